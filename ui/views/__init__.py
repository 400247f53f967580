"""The view registry: the view picker lists VIEWS in this order. Adding a view = one module exporting VIEW (and
declaring its own passes, if any: docs/architecture.md, "Adding a view with its own pass"), and one line here."""
from __future__ import annotations

from ui.view import View

from . import (
               ablation,
               attention,
               attribution,
               compare,
               corpus,
               decoding,
               head_view,
               heads,
               inside,
               masks,
               model,
               patching,
               positional,
               training,
)

VIEWS: list[View] = [
    attention.VIEW,
    model.VIEW,
    head_view.VIEW,
    inside.VIEW,
    compare.VIEW,
    decoding.VIEW,
    masks.VIEW,
    positional.VIEW,
    heads.VIEW,
    corpus.VIEW,
    ablation.VIEW,
    training.VIEW,
    attribution.VIEW,
    patching.VIEW,
]
BY_KEY = {view.key: view for view in VIEWS}
