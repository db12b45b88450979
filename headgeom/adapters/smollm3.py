"""SmolLM3 (``smollm3``) in HF safetensors layout: Llama layout (q/k/v/o projections,
pre-attention RMSNorm ``input_layernorm``, GQA). Some layers use no positional encoding
(``no_rope_layers``); that changes no weight, so the factors are the Llama ones."""

from __future__ import annotations

from headgeom.architectures import FAMILIES

from .llama import LlamaAdapter


class SmolLM3Adapter(LlamaAdapter):
    name = "smollm3"
    model_types = FAMILIES["smollm3"].model_types
