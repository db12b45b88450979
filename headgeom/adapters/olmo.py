"""OLMo (``olmo``) and OLMo-2 (``olmo2``) in HF safetensors layout (the ``-hf`` repos; the
original ``hf_olmo`` checkpoints with a fused ``att_proj`` are not this layout).

* OLMo: separate q/k/v/o projections; the pre-attention norm is a *non-parametric* LayerNorm
  (no weight, no bias), so the folded gain is all ones and reading spaces fold only the
  centering ``P_c``. ``clip_qkv`` (some OLMo releases) clamps projection outputs; it is
  nonlinear, not a weight, and is not represented in the factors.
* OLMo-2: no norm before attention at all: attention reads the raw residual stream. The block
  normalizes the attention *output* (``post_attention_layernorm``, RMSNorm) and q/k after
  projection with an RMSNorm over the full projection (all heads jointly: ``q_norm`` has
  ``H d_head`` weights). Nothing is folded (norm_type "none"); W_Q/W_K/W_V/W_O are the raw
  projections. Both norms' weights are kept in the store for reference.
"""

from __future__ import annotations

from headgeom.architectures import FAMILIES

import numpy as np

from headgeom.core.factors import LayerFactors
from .base import ArchFields, present
from .llama import PROJ_BIASES, LlamaAdapter, llama_projections

_PROJ = r"layers\.{L}\.self_attn\.(q|k|v|o)_proj\.(weight|bias)"


class OlmoAdapter(LlamaAdapter):
    name = "olmo"
    model_types = FAMILIES["olmo"].model_types
    wanted_patterns = (_PROJ,)

    def fields(self, config, keys):
        fl = super().fields(config, keys)
        return ArchFields(**{**fl.to_dict(), "norm_type": "layernorm"})

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p = f"{f.prefix}layers.{layer}."
        return LayerFactors(
            **llama_projections(get, f, p),
            norm_gain=np.ones(f.d_model),
            norm_type="layernorm",
            notes={
                "folded": "non-parametric LayerNorm: centering P_c only (gain all ones)",
                "bias": present(get, p, PROJ_BIASES),
            },
        )


class Olmo2Adapter(LlamaAdapter):
    name = "olmo2"
    model_types = FAMILIES["olmo2"].model_types
    wanted_patterns = (
        _PROJ,
        r"layers\.{L}\.self_attn\.(q|k)_norm\.weight",
        r"layers\.{L}\.post_attention_layernorm\.weight",
    )

    def fields(self, config, keys):
        fl = super().fields(config, keys)
        return ArchFields(**{**fl.to_dict(), "norm_type": "none", "norm_position": "post"})

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p = f"{f.prefix}layers.{layer}."
        return LayerFactors(
            **llama_projections(get, f, p),
            norm_gain=None,
            norm_type="none",
            notes={
                "folded": "nothing: OLMo-2 has no pre-attention norm (attention reads the raw residual "
                "stream); post_attention_layernorm (RMSNorm on the attention output) and "
                "q_norm/k_norm (RMSNorm over the full q/k projection) are not folded",
                "qk_norm": "full-projection RMSNorm over H*d_head after q/k projection (not folded)",
                "bias": present(get, p, PROJ_BIASES),
            },
        )
