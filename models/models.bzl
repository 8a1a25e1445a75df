"""The list of model plugins linked into //models:all (one line per model package target)."""

MODELS = [
    "chain",
    "deep_mlp",
    "gpt2",
    "heavy_mlp",
    "llama",
    "resnet",
    "torchscript",
    "transformer",
    "vit",
]
