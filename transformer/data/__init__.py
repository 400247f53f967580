"""Training data: the code-generated tasks, the corpora of ../shared/data and eng-fra's recipes.
Imports model and io."""
