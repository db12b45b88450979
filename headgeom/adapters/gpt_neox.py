"""GPT-NeoX / Pythia (HF ``gpt_neox`` layout).

``attention.query_key_value`` is one Linear ``(3 d_model, d_model)`` whose output is viewed as
``(..., H, 3 d_head)`` and chunked into q, k, v per head: its weight rows are interleaved per
head as ``(H, 3, d_head, d_model)``. ``attention.dense`` is the output projection. The
pre-attention norm ``input_layernorm`` is a LayerNorm (also with the parallel residual, where
the attention branch reads ``input_layernorm(x)``).
"""

from __future__ import annotations

from headgeom.architectures import FAMILIES

import numpy as np

from headgeom.core.factors import LayerFactors, split_cols
from .base import Adapter, ArchFields, present


class GPTNeoXAdapter(Adapter):
    name = "gpt_neox"
    model_types = FAMILIES["gpt_neox"].model_types
    wanted_patterns = (
        r"layers\.{L}\.attention\.(query_key_value|dense)\.(weight|bias)",
        r"layers\.{L}\.input_layernorm\.(weight|bias)",
    )

    def fields(self, config, keys):
        return self.standard_fields(config, keys, anchor="layers.0.attention.", norm_type="layernorm",
                                    norm_position="pre", gqa=False)

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p = f"{f.prefix}layers.{layer}."
        D, H, d = f.d_model, f.n_heads, f.d_head
        qkv = get(p + "attention.query_key_value.weight")
        if qkv.shape != (3 * H * d, D):
            raise ValueError(f"{p}attention.query_key_value.weight has shape {qkv.shape}, expected {(3 * H * d, D)}")
        W = qkv.reshape(H, 3, d, D)
        return LayerFactors(
            W_Q=W[:, 0],
            W_K=W[:, 1],
            W_V=W[:, 2],
            W_O=split_cols(get(p + "attention.dense.weight"), H),
            kv_group=np.arange(H),
            norm_gain=get(p + "input_layernorm.weight"),
            norm_type="layernorm",
            notes={
                "folded": "LayerNorm input_layernorm: centering P_c and gain input_layernorm.weight",
                "bias": present(
                    get, p, ["attention.query_key_value.bias", "attention.dense.bias", "input_layernorm.bias"]
                ),
                "layout": "query_key_value rows interleaved per head (H, 3, d_head, d_model)",
            },
        )
