"""GGUF checkpoints (llama.cpp layout), read with the ``gguf`` package: one adapter class for every
GGUF architecture of ``headgeom.architectures.GGUF_ARCHS``, driven by its architecture description.

Tensors are dequantized to float32 at fetch time and stored under their GGUF names
(``blk.{L}.attn_q.weight``, ...: ``GGUF_NAMES``). What the converter changed is undone from the
table: llama.cpp's Q/K row permutation (interleaved RoPE pairs -> halves) so factors match the HF
layout exactly (a reading space is a row space, so it would be unchanged either way); a fused
``attn_qkv`` is split by the table's rule (the converter writes ``[q | k | v]``); norm weights the
converter stored with the architecture's offset already added (Gemma, Nemotron) are the gain as stored.
"""

from __future__ import annotations

import numpy as np

from headgeom.architectures import ARCHITECTURES, GGUF_ARCHS, GGUF_NAMES, GGUFArch, split_fused
from headgeom.core.factors import LayerFactors, gqa_map, split_cols, split_rows
from .base import Adapter, ArchFields, present


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


def _first(config: dict, keys, default=None):
    for k in keys:
        if config.get(k) is not None:
            return config[k]
    if default is None:
        from headgeom.core.errors import CheckpointError

        raise CheckpointError(f"GGUF metadata lacks all of {list(keys)}")
    return default


class GGUFAdapter(Adapter):
    """The adapter ``gguf-<arch>`` of one GGUF architecture (``GGUF_ARCHS[arch]``)."""

    fmt = "gguf"

    def __init__(self, arch: str, spec: GGUFArch | None = None):
        self.arch = arch
        self.spec = spec or GGUF_ARCHS[arch]
        self.architecture = ARCHITECTURES[self.spec.architecture]
        self.name = f"gguf-{arch}"
        self.model_types = (arch,)
        n = GGUF_NAMES
        proj = [n["qkv"]] if self.spec.split else [n["q"], n["k"], n["v"]]
        pats = [rf"blk\.{{L}}\.({'|'.join(proj + [n['o']])})\.(weight|bias)"]
        if self.architecture.norm and self.architecture.norm_weight:
            pats.append(rf"blk\.{{L}}\.({'|'.join(self.spec.norm)})\.(weight|bias)")
        if self.architecture.qk_norm:
            pats.append(rf"blk\.{{L}}\.({n['q_norm']}|{n['k_norm']})\.weight")
        self.wanted_patterns = tuple(pats)

    def fields(self, config, keys):
        a = config["general.architecture"]
        D = int(_first(config, [f"{a}.embedding_length"]))
        H = int(_first(config, [f"{a}.attention.head_count"]))
        G = int(_first(config, [f"{a}.attention.head_count_kv"], H))
        d = int(_first(config, [f"{a}.attention.value_length", f"{a}.attention.key_length"], D // H))
        fam = self.architecture
        return ArchFields(adapter=self.name, n_layers=int(_first(config, [f"{a}.block_count"])), d_model=D, n_heads=H,
                          n_kv_heads=G, d_head=d, norm_type=fam.norm_type if fam.norm else "none",
                          norm_position="post" if fam.post_ln else "pre", prefix="")

    def layer_factors(self, get, f: ArchFields, layer: int) -> LayerFactors:
        p, n, fam, g = f"blk.{layer}.", GGUF_NAMES, self.architecture, self.spec
        H, G, d = f.n_heads, f.n_kv_heads, f.d_head
        if g.split:
            WQ, WK, WV = split_fused(get(p + n["qkv"] + ".weight"), g.split, H, G, d)
        else:
            WQ, WK = get(p + n["q"] + ".weight"), get(p + n["k"] + ".weight")
            if g.permute_qk:
                WQ, WK = unpermute_llama_rows(WQ, H), unpermute_llama_rows(WK, G)
            WQ, WK, WV = split_rows(WQ, H), split_rows(WK, G), split_rows(get(p + n["v"] + ".weight"), G)
        offset = 0.0 if g.norm_offset_stored else fam.norm_offset
        norm = None
        if fam.norm is None:
            gain = None
        elif fam.norm_weight:
            norm = next((m for m in g.norm[:-1] if present(get, p, [m + ".weight"])), g.norm[-1])
            gain = get(p + norm + ".weight") + offset
        else:
            gain = np.ones(f.d_model)
        folded = {"layernorm": "LayerNorm: centering P_c and gain", "rmsnorm": "RMSNorm gain",
                  "none": "nothing"}[fam.norm_type if fam.norm else "none"]
        if fam.norm:
            folded += f" (GGUF {norm or g.norm[-1]} weight" + (
                f", which already includes {g.norm_offset_stored}'s +{fam.norm_offset:g})"
                if g.norm_offset_stored and fam.norm_offset
                else f" + {offset:g})" if offset else ")")
        mods = ([n["qkv"]] if g.split else [n["q"], n["k"], n["v"]]) + [n["o"]] + ([norm] if norm else [])
        notes = {"folded": folded, "quantized": True, "architecture": fam.name,
                 "bias": present(get, p, [m + ".bias" for m in mods])}
        if g.split:
            notes["layout"] = f"fused {n['qkv']}: {g.split}"
        for k in ("qk_norm", "post_norm", "parallel", "moe"):
            if getattr(fam, k):
                notes[k] = getattr(fam, k)
        return LayerFactors(W_Q=WQ, W_K=WK, W_V=WV, W_O=split_cols(get(p + n["o"] + ".weight"), H),
                            kv_group=gqa_map(H, G), norm_gain=gain, norm_type=fam.norm_type if fam.norm else "none",
                            notes=notes)


def gguf_adapters() -> list[GGUFAdapter]:
    return [GGUFAdapter(a) for a in GGUF_ARCHS]


__all__ = ["GGUFAdapter", "gguf_adapters", "permute_llama_rows", "unpermute_llama_rows"]
