"""Training, evaluation and the attribution-faithfulness run. Imports everything below it."""
