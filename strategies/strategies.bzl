"""The strategy plugins linked into //strategies:all, by id.

Adding a strategy: strategies/<id>.cc, a `ckpt_strategy(name = "<id>")` stanza in
strategies/BUILD, and its id here (docs/extending.md). The registry test checks that every id
listed here registers, and the conformance tests run every registered strategy.
"""

STRATEGIES = [
    "chunked_sequence",
    "optimal",
    "plan",
    "recompute_all",
    "revolve",
    "selective_attention",
    "selective_mlp",
    "store_all",
    "uniform",
]
