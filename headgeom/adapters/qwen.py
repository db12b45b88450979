"""Qwen2/2.5 (``qwen2``), Qwen3 (``qwen3``) and Qwen3-MoE (``qwen3_moe``) in HF safetensors
layout: Llama-style separate q/k/v/o projections and pre-attention RMSNorm
``input_layernorm`` (gain folded).

* Qwen2/2.5 have q/k/v biases (ignored, recorded).
* Qwen3 / Qwen3-MoE have ``head_dim`` independent of ``d_model / H`` and a per-head RMSNorm
  (``q_norm``/``k_norm`` over ``d_head``) applied after the q/k projections. It acts inside
  each head (a per-token scalar and a fixed diagonal gain on the head's coordinates), so it is
  not folded; W_Q/W_K are the raw projection rows. The MoE feed-forward is irrelevant here.
"""

from __future__ import annotations

from headgeom.architectures import FAMILIES

from headgeom.core.factors import LayerFactors
from .base import ArchFields
from .llama import LlamaAdapter

class Qwen2Adapter(LlamaAdapter):
    name = "qwen2"
    model_types = FAMILIES["qwen2"].model_types

class Qwen3Adapter(Qwen2Adapter):
    name = "qwen3"
    model_types = FAMILIES["qwen3"].model_types
    wanted_patterns = LlamaAdapter.wanted_patterns + (r"layers\.{L}\.self_attn\.(q|k)_norm\.weight",)

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        lf = super().layer_factors(get, f, layer)
        lf.notes["qk_norm"] = "per-head RMSNorm over d_head after q/k projection (not folded)"
        return lf


class Qwen3MoeAdapter(Qwen3Adapter):
    name = "qwen3_moe"
    model_types = FAMILIES["qwen3_moe"].model_types
