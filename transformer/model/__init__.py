"""The model core: config, the three stacks' layers and attention, masks, positions, hook points and per-call capture.
Imports nothing else of transformer/."""
