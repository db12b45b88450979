"""SmolLM3 (``smollm3``) in HF safetensors layout: Llama layout (q/k/v/o projections,
pre-attention RMSNorm ``input_layernorm``, GQA). Some layers use no positional encoding
(``no_rope_layers``); that changes no weight, so the factors are the Llama ones."""

from __future__ import annotations

from ..factors import LayerFactors
from .base import ArchFields
from .gpt2 import present
from .llama import LlamaAdapter


class SmolLM3Adapter(LlamaAdapter):
    name = "smollm3"
    model_types = ("smollm3",)

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        lf = super().layer_factors(get, f, layer)
        lf.notes["bias"] = present(get, f"{f.prefix}layers.{layer}.", [f"self_attn.{x}_proj.bias" for x in "qkvo"])
        return lf
