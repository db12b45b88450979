"""GGUF checkpoints (llama.cpp layout), read with the ``gguf`` package.

Tensors are dequantized to float32 at fetch time and stored under their GGUF names.
* llama: llama.cpp's converter permutes Q and K rows within each head (interleaved RoPE
  pairs -> halves). We undo it so factors match the HF layout exactly; the reading space is a
  row space, so it would be unchanged either way.
* gemma3: the converter already added 1 to every norm weight, so the stored weight IS the gain.
"""

from __future__ import annotations

import numpy as np

from headgeom.core.factors import LayerFactors, gqa_map, split_cols, split_rows
from .base import Adapter, ArchFields


def unpermute_llama_rows(W: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp convert_hf_to_gguf's ``permute`` for q/k weights."""
    rows = W.shape[0]
    d = rows // n_head
    return np.ascontiguousarray(
        W.reshape(n_head, d // 2, 2, *W.shape[1:]).swapaxes(1, 2).reshape(W.shape)
    )


def permute_llama_rows(W: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's forward permutation (used by tests to build GGUF-layout tensors)."""
    rows = W.shape[0]
    d = rows // n_head
    return np.ascontiguousarray(
        W.reshape(n_head, 2, d // 2, *W.shape[1:]).swapaxes(1, 2).reshape(W.shape)
    )


class GGUFAdapter(Adapter):
    fmt = "gguf"
    wanted_patterns = (
        r"blk\.{L}\.attn_(q|k|v|output)\.(weight|bias)",
        r"blk\.{L}\.attn_norm\.weight",
    )
    unpermute_qk = False
    folded_note = "RMSNorm gain (GGUF attn_norm weight)"

    def fields(self, config, keys):
        a = config["general.architecture"]
        D = int(config[f"{a}.embedding_length"])
        H = int(config[f"{a}.attention.head_count"])
        G = int(config.get(f"{a}.attention.head_count_kv", H))
        d_head = int(config.get(f"{a}.attention.value_length", D // H))
        return ArchFields(
            adapter=self.name,
            n_layers=int(config[f"{a}.block_count"]),
            d_model=D,
            n_heads=H,
            n_kv_heads=G,
            d_head=d_head,
            norm_type="rmsnorm",
            norm_position="pre",
            prefix="",
        )

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p = f"blk.{layer}."
        WQ, WK = get(p + "attn_q.weight"), get(p + "attn_k.weight")
        if self.unpermute_qk:
            WQ = unpermute_llama_rows(WQ, f.n_heads)
            WK = unpermute_llama_rows(WK, f.n_kv_heads)
        return LayerFactors(
            W_Q=split_rows(WQ, f.n_heads),
            W_K=split_rows(WK, f.n_kv_heads),
            W_V=split_rows(get(p + "attn_v.weight"), f.n_kv_heads),
            W_O=split_cols(get(p + "attn_output.weight"), f.n_heads),
            kv_group=gqa_map(f.n_heads, f.n_kv_heads),
            norm_gain=get(p + "attn_norm.weight"),
            norm_type="rmsnorm",
            notes={"folded": self.folded_note, "quantized": True},
        )


class GGUFLlamaAdapter(GGUFAdapter):
    name = "gguf-llama"
    model_types = ("llama",)
    unpermute_qk = True


class GGUFGemma3Adapter(GGUFAdapter):
    name = "gguf-gemma3"
    model_types = ("gemma3",)
    folded_note = "RMSNorm gain (GGUF attn_norm weight, which already includes Gemma's +1)"
    wanted_patterns = GGUFAdapter.wanted_patterns + (r"blk\.{L}\.attn_(q|k)_norm\.weight",)
