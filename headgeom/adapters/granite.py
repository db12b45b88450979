"""IBM Granite 3.x (``granite``) in HF safetensors layout: Llama-style q/k/v/o projections and
pre-attention RMSNorm ``input_layernorm`` (gain folded). Granite's scalar multipliers
(``attention_multiplier`` = the softmax scale, ``residual_multiplier`` on the attention output,
``embedding_multiplier``) are scalars: they change no space and are not folded into the factors
(they are in the manifest's config)."""

from __future__ import annotations

from headgeom.architectures import FAMILIES

from headgeom.core.factors import LayerFactors
from .base import ArchFields
from .llama import LlamaAdapter


class GraniteAdapter(LlamaAdapter):
    name = "granite"
    model_types = FAMILIES["granite"].model_types

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        lf = super().layer_factors(get, f, layer)
        lf.notes["scalars"] = "attention_multiplier / residual_multiplier not folded (scalars)"
        return lf
