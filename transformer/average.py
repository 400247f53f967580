"""`python -m transformer.average`: the command line of transformer.training.average."""
from .training.average import main

if __name__ == "__main__":
    main()
