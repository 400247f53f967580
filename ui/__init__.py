"""The app's parts: URL state, model passes, their typed analysis, the sidebar and one module per view.

Dependencies run one way: views see `page` (a Page), `analysis`, `state`, `widgets` and `viz`; only `passes`
imports torch or `transformer`.
"""
