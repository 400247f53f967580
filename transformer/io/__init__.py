"""Files: the loading policy (safety), tokenizers, text as a model reads it and the caveats about an output (as
data), checkpoint folders (read and written safely) and the converters of pretrained families. Imports only
transformer.model."""
