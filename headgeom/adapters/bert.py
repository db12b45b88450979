"""BERT (post-LN MHA). Post-norm: the layer input is the previous block's LayerNorm output,
so nothing is folded into reading spaces (docs/methods.md §2.1)."""

from __future__ import annotations

import numpy as np

from headgeom.core.factors import LayerFactors, split_cols, split_rows
from headgeom.architectures import FAMILIES
from .base import Adapter, ArchFields


class BertAdapter(Adapter):
    name = "bert"
    model_types = FAMILIES["bert"].model_types  # bert, roberta
    wanted_patterns = (
        r"encoder\.layer\.{L}\.attention\.self\.(query|key|value)\.(weight|bias)",
        r"encoder\.layer\.{L}\.attention\.output\.dense\.(weight|bias)",
    )

    def fields(self, config, keys):
        return self.standard_fields(config, list(keys), anchor="encoder.layer.", norm_type="none",
                                    norm_position="post", gqa=False)

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p = f"{f.prefix}encoder.layer.{layer}.attention."
        H = f.n_heads
        return LayerFactors(
            W_Q=split_rows(get(p + "self.query.weight"), H),
            W_K=split_rows(get(p + "self.key.weight"), H),
            W_V=split_rows(get(p + "self.value.weight"), H),
            W_O=split_cols(get(p + "output.dense.weight"), H),
            kv_group=np.arange(H),
            norm_gain=None,
            norm_type="none",
            notes={"bias": True, "folded": "nothing (post-LN: the input LayerNorm belongs to the previous block)"},
        )
