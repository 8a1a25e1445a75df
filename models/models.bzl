"""The list of model plugins linked into //models:all (one line per model package target)."""

MODELS = [
    "heavy_mlp",
]
