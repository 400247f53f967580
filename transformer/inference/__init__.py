"""What a checkpoint does with an input: decoding (greedy, beam search, sampling), the Checkpoint front end that
reads, warns, decodes and captures, and batching across sessions. Imports model, io and data."""
