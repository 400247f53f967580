"""`python -m transformer.faithfulness`: the command line of transformer.training.faithfulness."""
from .training.faithfulness import main

if __name__ == "__main__":
    main()
