"""`python -m transformer.convert`: the command line of transformer.io.convert."""
from .io.convert import main

if __name__ == "__main__":
    main()
