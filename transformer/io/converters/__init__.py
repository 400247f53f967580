"""One module per pretrained family that `python -m transformer.convert` reads: each gives a Family (its tokenizer
files, its config.json -> our config, its tensors -> our state_dict). Adding a family is one module and one line
below."""
from __future__ import annotations

from . import bart, bert, gpt2, llama, marian, mistral, qwen2
from .family import Family

FAMILIES: dict[str, Family] = {family.name: family for family in (
    marian.FAMILY,
    gpt2.FAMILY, bert.FAMILY, bart.FAMILY,
    llama.FAMILY,
    qwen2.FAMILY,
    mistral.FAMILY,
)}
