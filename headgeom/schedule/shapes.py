"""A model's attention shape before any fetch: from its manifest, a --shape file, a local
checkpoint's config.json or the model registry's ``shape:`` (``headgeom plan`` and the fetch's
cost model read it; below both, so neither imports the other)."""

from __future__ import annotations

import json
from pathlib import Path

from headgeom import layout
from headgeom.core.errors import ConfigError

SHAPE_KEYS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head")
#: the names an HF config.json gives the layer count (the pre-flight reads them too)
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


def shape_from_file(path) -> dict:
    """Fields from a headgeom manifest or the usual names of an HF config.json."""
    d = json.loads(Path(path).read_text())
    if "fields" in d:
        return {k: int(d["fields"][k]) for k in SHAPE_KEYS}
    d = {**d, **(d.get("text_config") or {})}

    def first(*names, default=None):
        for n in names:
            if d.get(n) is not None:
                return int(d[n])
        if default is None:
            raise ConfigError(f"{path}: no {' / '.join(names)}: cannot read the model's shape")
        return default

    D = first("hidden_size", "n_embd", "d_model")
    H = first("num_attention_heads", "n_head", "num_heads")
    return {"n_layers": first(*LAYER_KEYS), "d_model": D, "n_heads": H,
            "n_kv_heads": first("num_key_value_heads", "multi_query_group_num", default=H),
            "d_head": first("head_dim", "kv_channels", default=D // H)}


def model_shape(model: str, config: dict, workdir=".", shapes: dict | None = None) -> tuple[dict, str]:
    """(fields, where they came from)."""
    manifest = Path(workdir) / layout.manifest(model)
    if manifest.exists():
        return shape_from_file(manifest), str(manifest)
    if shapes and model in shapes:
        return shape_from_file(shapes[model]), str(shapes[model])
    entry = config["models"].get(model) or {}
    if entry.get("source") == "local" and (Path(entry.get("path", "")) / "config.json").exists():
        p = Path(entry["path"]) / "config.json"
        return shape_from_file(p), str(p)
    if entry.get("shape"):
        return {k: int(entry["shape"][k]) for k in SHAPE_KEYS}, "model registry (shape:)"
    raise ConfigError(f"plan: no shape for model {model!r}: fetch it, pass --shape {model}=config.json, "
                      f"or add shape: {{{', '.join(SHAPE_KEYS)}}} to its entry")
