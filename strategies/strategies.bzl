"""The list of strategy plugins linked into //strategies:all.

Adding a strategy: create strategies/<id>/ (see strategies/uniform/) and add its id here.
The all-strategies test checks that every id listed here is registered, and the conformance
tests run every registered strategy.
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
