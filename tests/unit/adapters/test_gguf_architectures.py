"""GGUF, one test for every architecture of ``headgeom.architectures.GGUF_ARCHS``.

Per GGUF architecture, transformers builds the tiny random model of its architecture (float32, the
oracle's config: hidden 64, 4 query heads, 2 KV heads where the architecture has GQA, 2 layers), saved
as safetensors; it is converted to GGUF the way llama.cpp's convert_hf_to_gguf.py does (tensor
names from the ``gguf`` package's own name map, Q/K rows permuted for llama, Falcon's KV groups
and BLOOM's per-head interleave reordered to [q | k | v], GPT-2's Conv1D transposed, Gemma's and
Nemotron's norm weights stored + 1) and written with ``gguf.GGUFWriter``. Then:

  * the GGUF adapter's factors (open_checkpoint -> extract -> TensorStore) equal the architecture's
    safetensors factors of the same model (projections bit for bit, the gain to float32 rounding);
  * where transformers' own GGUF loader reads the file (``from_pretrained(..., gguf_file=...)``),
    the attention weights it loads equal the model's: the conversion above is the one transformers
    undoes (``LOADER_NA`` lists the architectures it cannot load, with the reason).
"""

from __future__ import annotations

import logging

import gguf
import numpy as np
import pytest
import torch
import transformers

import tests.unit.adapters.test_architectures_oracle as oracle
from headgeom.adapters import adapter_for
from headgeom.adapters.gguf import permute_llama_rows
from headgeom.architectures import BY_MODEL_TYPE, ARCHITECTURES, GGUF_ARCHS, GGUF_REFUSED
from headgeom.core.errors import UnknownArchitectureError
from headgeom.io.checkpoint import open_checkpoint
from headgeom.io.store import TensorStore, extract

T = transformers

#: GGUF architecture -> (HF model_type, config overrides)
HF = {
    "llama": ("llama", {}), "mistral": ("mistral", {}), "qwen2": ("qwen2", {}), "qwen2moe": ("qwen2_moe", {}),
    "qwen3": ("qwen3", {"head_dim": 128}), "qwen3moe": ("qwen3_moe", {}), "gpt-oss": ("gpt_oss", {"head_dim": 64}),
    "minimax-m2": ("minimax_m2", {}), "phi3": ("phi3", {}), "bloom": ("bloom", {}),
    "falcon": ("falcon", {"new_decoder_architecture": True, "num_kv_heads": 2}), "gpt2": ("gpt2", {}),
    "stablelm": ("stablelm", {}), "starcoder2": ("starcoder2", {}), "nemotron": ("nemotron", {}),
    "gemma2": ("gemma2", {}), "gemma3": ("gemma3_text", {}),
}
#: extra cases: other layouts of one GGUF architecture
EXTRA = [("falcon", ("falcon", {})), ("falcon", ("falcon", {"multi_query": False}))]
CASES = [(a, HF[a]) for a in GGUF_ARCHS] + EXTRA
IDS = [a + "".join(f"-{k}" for k in extra) for a, (_, extra) in CASES]

#: cases whose files transformers' GGUF loader cannot read, with the reason
_FALCON = "transformers' GGUF loader builds every Falcon as multi-query (it sets no new_decoder_architecture)"
LOADER_NA = {"mistral": "transformers reads Mistral from a llama GGUF whose general.name says mistral; "
                        "gguf-py has no tensor map for general.architecture mistral",
             "falcon-new_decoder_architecture-num_kv_heads": _FALCON, "falcon-multi_query": _FALCON}

_ARCH_ENUM = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}


def test_every_transformers_gguf_architecture_is_read_or_refused():
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES

    gguf_name = {"qwen2_moe": "qwen2moe", "qwen3_moe": "qwen3moe", "gpt_oss": "gpt-oss", "minimax_m2": "minimax-m2",
                 "umt5": "t5"}
    missing = [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in ("general", "tokenizer")
               and gguf_name.get(a, a) not in GGUF_ARCHS and gguf_name.get(a, a) not in GGUF_REFUSED]
    assert missing == []
    for a in GGUF_REFUSED:
        with pytest.raises(UnknownArchitectureError, match="not supported"):
            adapter_for({"general.architecture": a}, "gguf")


def _convert(arch, model, cfg, fam, H, G, d):
    """HF state dict -> GGUF attention tensors, as llama.cpp's converter writes them."""
    n_layers = cfg.num_hidden_layers
    names = gguf.get_tensor_name_map(_ARCH_ENUM["llama" if arch == "mistral" else arch], n_layers)
    spec = GGUF_ARCHS[arch]
    out = {}
    for hf_name, t in model.state_dict().items():
        w = t.detach().float().numpy()
        base, _, suffix = hf_name.rpartition(".")
        g = names.get_name(base)
        if g is None or not g.startswith("blk.") or ".attn_" not in g + ".":
            continue
        g += "." + suffix
        role = g.split(".")[2]
        if spec.permute_qk and role in ("attn_q", "attn_k") and suffix == "weight":
            w = permute_llama_rows(w, H if role == "attn_q" else G)
        if role == "attn_qkv":
            if fam.conv1d and suffix == "weight":
                w = w.T
            if arch == "bloom":  # (H, 3, d) interleave -> [q | k | v]
                w = w.reshape(H, 3, d, *w.shape[1:]).swapaxes(0, 1).reshape(w.shape)
            if arch == "falcon":  # (G, H/G + 2, d) groups -> [q | k | v] (MHA: G = H, MQA: G = 1)
                r = w.reshape(G, -1, d, *w.shape[1:])
                q = r[:, :-2].reshape(-1, *w.shape[1:])
                w = np.concatenate([q, r[:, -2].reshape(-1, *w.shape[1:]), r[:, -1].reshape(-1, *w.shape[1:])])
        if role == "attn_output" and fam.conv1d and suffix == "weight":
            w = w.T
        if spec.norm_offset_stored and role.endswith("norm") and suffix == "weight":
            w = w + np.float32(1.0)
        out[g] = np.ascontiguousarray(w, dtype=np.float32)
    return out


def _write(path, arch, cfg, f, tensors):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(f.n_layers)
    w.add_embedding_length(f.d_model)
    w.add_context_length(64)
    w.add_feed_forward_length(64)
    w.add_head_count(f.n_heads)
    w.add_head_count_kv(f.n_kv_heads)
    w.add_key_length(f.d_head)
    w.add_value_length(f.d_head)
    w.add_vocab_size(64)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_layer_norm_eps(1e-5)
    w.add_rope_dimension_count(f.d_head)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_pad_token_id(0)
    for name, arr in tensors.items():
        w.add_tensor(name, arr)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _build(mt, extra, root):
    torch.manual_seed(0)
    cfg = oracle.tiny_config(mt, {**extra, ARCHITECTURES[BY_MODEL_TYPE[mt]].layers_keys[0]: 2})
    model = T.AutoModelForCausalLM.from_config(cfg).float().eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "norm" in name or ".ln" in name:
                p.copy_(0.5 + torch.rand(p.shape, generator=g, dtype=p.dtype))
            elif p.ndim == 1:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype))  # biases are recorded, not read
    model.save_pretrained(root / "ckpt")
    extract(open_checkpoint(root / "ckpt"), root / "store", model=f"tiny-{mt}", source={"type": "local"},
            log=lambda *a: None)
    return model, cfg, TensorStore(root / "store")


@pytest.mark.parametrize("i", range(len(CASES)), ids=IDS)
def test_gguf_factors_equal_safetensors_factors(i, tmp_path):
    arch, (mt, extra) = CASES[i]
    model, cfg, store = _build(mt, extra, tmp_path)
    f = store.fields
    fam = ARCHITECTURES[BY_MODEL_TYPE[mt]].resolve(cfg.to_dict())
    tensors = _convert(arch, model, cfg, fam, f.n_heads, f.n_kv_heads, f.d_head)
    path = tmp_path / f"tiny-{arch}.gguf"
    _write(path, arch, cfg, f, tensors)
    gckpt = open_checkpoint(path)
    assert adapter_for(gckpt.config, "gguf").name == f"gguf-{arch}"
    extract(gckpt, tmp_path / "gstore", model=f"tiny-{arch}-gguf", source={"type": "local"}, log=lambda *a: None)
    gstore = TensorStore(tmp_path / "gstore")
    for k in ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_head", "norm_type", "norm_position"):
        assert getattr(gstore.fields, k) == getattr(f, k), k
    for layer in range(f.n_layers):
        hf, gg = store.layer_factors(layer), gstore.layer_factors(layer)
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            np.testing.assert_array_equal(getattr(gg, name), getattr(hf, name), err_msg=f"{IDS[i]} layer {layer} {name}")
        assert gg.kv_group.tolist() == hf.kv_group.tolist() and gg.norm_type == hf.norm_type
        if hf.norm_gain is None:
            assert gg.norm_gain is None
        else:
            np.testing.assert_allclose(gg.norm_gain, hf.norm_gain, rtol=1e-6, err_msg=f"{IDS[i]} gain")
    if IDS[i] in LOADER_NA:
        return
    # transformers' own GGUF -> HF conversion of the same file
    logging.getLogger("transformers").setLevel(logging.ERROR)
    back = T.AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file=path.name, dtype=torch.float32)
    sd, ref = back.state_dict(), model.state_dict()
    layer0 = f"{fam.layers}.0."
    keys = [k for k in ref if layer0 in k and any(f".{m}." in k for m in (fam.q, fam.k, fam.v, fam.qkv, fam.o) if m)]
    assert keys
    for k in keys:
        np.testing.assert_array_equal(sd[k].numpy(), ref[k].numpy(), err_msg=f"{IDS[i]}: transformers' loader, {k}")
    if fam.norm:  # the loader takes Gemma's and Nemotron's stored +1 off again
        k = f"{layer0}{fam.norm}.weight"
        k = next(x for x in ref if x.endswith(k))
        np.testing.assert_allclose(sd[k].numpy(), ref[k].numpy(), atol=1e-6, err_msg=f"{IDS[i]}: transformers' loader, {k}")
