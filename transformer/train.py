"""`python -m transformer.train`: the command line of transformer.training.train."""
from .training.train import main

if __name__ == "__main__":
    main()
