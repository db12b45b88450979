"""Llama family in HF safetensors layout (Llama, Mistral, TinyLlama, Yi, SmolLM2/3,
Falcon3, ...): separate q/k/v/o projections, pre-attention RMSNorm ``input_layernorm``."""

from __future__ import annotations

from headgeom.architectures import FAMILIES

from headgeom.core.factors import LayerFactors, gqa_map, split_cols, split_rows
from .base import Adapter, ArchFields, present

PROJ_BIASES = [f"self_attn.{x}_proj.bias" for x in "qkvo"]


def llama_projections(get, f: ArchFields, p: str) -> dict:
    """Per-head factors from separate q/k/v/o projections (HF Llama layout) under prefix ``p``."""
    return dict(
        W_Q=split_rows(get(p + "self_attn.q_proj.weight"), f.n_heads),
        W_K=split_rows(get(p + "self_attn.k_proj.weight"), f.n_kv_heads),
        W_V=split_rows(get(p + "self_attn.v_proj.weight"), f.n_kv_heads),
        W_O=split_cols(get(p + "self_attn.o_proj.weight"), f.n_heads),
        kv_group=gqa_map(f.n_heads, f.n_kv_heads),
    )


class LlamaAdapter(Adapter):
    name = "llama"
    model_types = FAMILIES["llama"].model_types
    wanted_patterns = (
        r"layers\.{L}\.self_attn\.(q|k|v|o)_proj\.(weight|bias)",
        r"layers\.{L}\.input_layernorm\.weight",
    )
    norm_offset = 0.0  # Gemma-style norms multiply by (1 + w)

    def fields(self, config, keys):
        return self.standard_fields(config, keys, anchor="layers.0.", norm_type="rmsnorm", norm_position="pre")

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p = f"{f.prefix}layers.{layer}."
        return LayerFactors(
            **llama_projections(get, f, p),
            norm_gain=get(p + "input_layernorm.weight") + self.norm_offset,
            norm_type="rmsnorm",
            notes={"folded": "RMSNorm gain" + (" (1 + w)" if self.norm_offset else ""),
                   "bias": present(get, p, PROJ_BIASES)},
        )


class Gemma3Adapter(LlamaAdapter):
    """Gemma-3 HF safetensors: RMSNorm multiplies by (1 + w); per-head q/k RMSNorm after the
    projection does not change the reading spaces (it acts inside the head)."""

    name = "gemma3"
    model_types = FAMILIES["gemma3"].model_types
    norm_offset = FAMILIES["gemma3"].norm_offset  # (1 + w)
    wanted_patterns = LlamaAdapter.wanted_patterns + (
        r"layers\.{L}\.self_attn\.(q|k)_norm\.weight",
    )

    def fields(self, config, keys):
        if "text_config" in config:  # multimodal wrapper config
            config = {**config["text_config"]}
        return super().fields(config, keys)
