"""Tiny synthetic checkpoints for tests (HF layout, safetensors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def closed_head(V: np.ndarray, alpha: float) -> np.ndarray:
    """O with V^T O = alpha I, so T = O V^T satisfies T^2 = alpha T exactly (P = 1)."""
    return V @ np.linalg.inv(V.T @ V) * alpha


def write_llama(path, *, d_model=48, n_heads=4, n_kv=2, d_head=12, n_layers=2, seed=0,
                closed=((0, 0, 1.5),), dtype=np.float32, shards=1, extra_mlp=False) -> dict:
    """A Llama-layout checkpoint. ``closed`` plants exactly closed heads (layer, head, alpha):
    that head's W_O is built from its group's V so T^2 = alpha T."""
    rng = np.random.default_rng(seed)
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    tensors = {}
    group = n_heads // n_kv
    for l in range(n_layers):
        p = f"model.layers.{l}."
        WQ = rng.standard_normal((n_heads * d_head, d_model))
        WK = rng.standard_normal((n_kv * d_head, d_model))
        WV = rng.standard_normal((n_kv * d_head, d_model))
        WO = rng.standard_normal((d_model, n_heads * d_head))
        for (cl, ch, a) in closed:
            if cl == l:
                g = ch // group
                V = WV[g * d_head:(g + 1) * d_head].T
                WO[:, ch * d_head:(ch + 1) * d_head] = closed_head(V, a)
        tensors[p + "self_attn.q_proj.weight"] = WQ
        tensors[p + "self_attn.k_proj.weight"] = WK
        tensors[p + "self_attn.v_proj.weight"] = WV
        tensors[p + "self_attn.o_proj.weight"] = WO
        tensors[p + "input_layernorm.weight"] = 1 + 0.1 * rng.standard_normal(d_model)
        if extra_mlp:
            tensors[p + "mlp.up_proj.weight"] = rng.standard_normal((4 * d_model, d_model))
    tensors["model.embed_tokens.weight"] = rng.standard_normal((100, d_model))
    tensors = {k: np.ascontiguousarray(v.astype(dtype)) for k, v in tensors.items()}
    config = {
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": d_model,
        "num_attention_heads": n_heads, "num_key_value_heads": n_kv, "head_dim": d_head,
        "num_hidden_layers": n_layers, "rms_norm_eps": 1e-6, "vocab_size": 100,
        "intermediate_size": 4 * d_model,
    }
    (path / "config.json").write_text(json.dumps(config))
    from safetensors.numpy import save_file

    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    else:
        names = sorted(tensors)
        parts = [names[i::shards] for i in range(shards)]
        wm = {}
        for i, part in enumerate(parts):
            fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            save_file({k: tensors[k] for k in part}, str(path / fn), metadata={"format": "pt"})
            wm.update({k: fn for k in part})
        (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return {"tensors": tensors, "config": config}


def write_gguf_stub(path, tokens, **uint32_fields) -> None:
    """A metadata-only llama GGUF (one 2 x 2 tensor): a vocabulary and the given uint32 fields
    (name -> value; ``llama.block_count`` is 1 unless given)."""
    import gguf

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", tokens)
    for name, value in {"llama.block_count": 1, **uint32_fields}.items():
        w.add_uint32(name, value)
    w.add_tensor("t", np.ones((2, 2), dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
