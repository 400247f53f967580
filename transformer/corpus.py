"""`python -m transformer.corpus`: the command line of transformer.analysis.corpus_heads."""
from .analysis.corpus_heads import main

if __name__ == "__main__":
    main()
