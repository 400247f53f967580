"""`python -m transformer.evaluate`: the command line of transformer.training.evaluate."""
from .training.evaluate import main

if __name__ == "__main__":
    main()
