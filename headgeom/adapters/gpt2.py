"""GPT-2 (HF ``gpt2`` layout): Conv1D projections that store weights ``(in, out)``.

* ``attn.c_attn``: one Conv1D ``(d_model, 3 d_model)``; its output is ``[q | k | v]`` along the
  out axis, each ``d_model`` wide and split into heads in order (``view(..., H, d_head)``).
* ``attn.c_proj``: Conv1D ``(d_model, d_model)``; its HF-style ``(out, in)`` weight is the
  transpose.
* Pre-attention ``ln_1`` is a LayerNorm: reading spaces fold ``P_c diag(ln_1.weight)``;
  ``ln_1.bias`` and the projection biases are a bias path (ignored, recorded in notes).
"""

from __future__ import annotations

from headgeom.architectures import FAMILIES

import numpy as np

from headgeom.core.factors import LayerFactors, split_cols, split_rows
from .base import Adapter, ArchFields, present


class GPT2Adapter(Adapter):
    name = "gpt2"
    model_types = FAMILIES["gpt2"].model_types
    wanted_patterns = (
        r"h\.{L}\.attn\.c_(attn|proj)\.(weight|bias)",
        r"h\.{L}\.ln_1\.(weight|bias)",
    )

    def fields(self, config, keys):
        return self.standard_fields(config, keys, anchor="h.0.attn.", norm_type="layernorm", norm_position="pre",
                                    d_model=("n_embd", "hidden_size"), heads=("n_head", "num_attention_heads"),
                                    layers=("n_layer", "num_hidden_layers"), gqa=False)

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p = f"{f.prefix}h.{layer}."
        D, H = f.d_model, f.n_heads
        c_attn = get(p + "attn.c_attn.weight")  # (in, out) = (D, 3D)
        if c_attn.shape != (D, 3 * D):
            raise ValueError(f"{p}attn.c_attn.weight has shape {c_attn.shape}, expected {(D, 3 * D)}")
        W_qkv = c_attn.T  # (3D, D): HF (out, in)
        c_proj = get(p + "attn.c_proj.weight")  # (in, out) = (D, D)
        return LayerFactors(
            W_Q=split_rows(W_qkv[:D], H),
            W_K=split_rows(W_qkv[D : 2 * D], H),
            W_V=split_rows(W_qkv[2 * D :], H),
            W_O=split_cols(np.ascontiguousarray(c_proj.T), H),
            kv_group=np.arange(H),
            norm_gain=get(p + "ln_1.weight"),
            norm_type="layernorm",
            notes={
                "folded": "LayerNorm ln_1: centering P_c and gain ln_1.weight",
                "bias": present(get, p, ["attn.c_attn.bias", "attn.c_proj.bias", "ln_1.bias"]),
                "layout": "Conv1D (in, out); c_attn = [q|k|v] along out",
            },
        )
