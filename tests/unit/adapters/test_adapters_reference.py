"""Adapters against the real thing: for every supported architecture, a tiny randomly
initialized ``transformers`` model (float64) is saved as safetensors, run through
``open_checkpoint`` -> ``extract`` -> ``TensorStore.layer_factors``, and the factors are
compared with what the model's own attention modules compute (docs/methods.md §0).

What is compared, per layer, for a random input at position 0 (RoPE is the identity there)
with sequence length 1 (softmax = 1: every head outputs its V):
  * q/k/v per head as the model itself splits them (captured at the attention kernel, i.e.
    after the fused-layout split, before GQA repetition), with the affine bias path removed
    by a second pass in which the attention input is replaced by the norm's bias (0 without
    one): ``real(n) - real(beta) = W (n - beta)``;
  * the attention module's output: ``real(n) - real(beta) = sum_h W_O^h W_V^{g(h)} (n - beta)``;
  * the folded norm: the adapter's ``norm_gain``/``norm_type`` applied to the layer input
    equals the model's norm output minus its bias.
Where the model computes its norm in float32 (HF RMSNorms, OLMo's LayerNorm) the comparisons
that go through the adapter-side norm use a float32-level tolerance; everything else is
compared at float64 level.

``transformers`` is a test-only dependency (written against transformers 5.24.0 with torch
2.13.0 and huggingface_hub 2.4.0); it is imported unconditionally so that a missing install fails
loudly instead of skipping the reference checks.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import transformers
import yaml

from headgeom.adapters import ADAPTERS, adapter_for, by_name, supported  # noqa: E402
from headgeom.adapters.gguf import permute_llama_rows, unpermute_llama_rows  # noqa: E402
from headgeom.io.checkpoint import open_checkpoint  # noqa: E402
from headgeom.core.errors import UnknownArchitectureError  # noqa: E402
from headgeom.core.factors import gqa_map  # noqa: E402
from headgeom.io.store import TensorStore, extract  # noqa: E402

T = transformers
REPO = Path(__file__).resolve().parents[3]
TIGHT = 1e-10  # float64 end to end
LOOSE = 1e-5  # through a norm the model computes in float32

COMMON = dict(vocab_size=32, pad_token_id=0, bos_token_id=1, eos_token_id=2)
LLAMA_LIKE = dict(
    COMMON, hidden_size=64, num_attention_heads=4, num_key_value_heads=2, num_hidden_layers=2,
    intermediate_size=96, max_position_embeddings=32,
)  # fmt: skip


def _llama_paths(m):
    return [(layer.input_layernorm, layer.self_attn, layer.self_attn) for layer in m.model.layers]


# name -> (config factory, model class, adapter name, layer paths, qk_norm kind, norm in float32)
# layer paths: model -> [(norm module or None, attention module, module whose output is the
#              attention output)] per layer
ARCHS = {
    "gpt2": (
        lambda: T.GPT2Config(n_embd=64, n_head=4, n_layer=2, n_positions=32, **COMMON),
        T.GPT2LMHeadModel, "gpt2",
        lambda m: [(b.ln_1, b.attn, b.attn) for b in m.transformer.h], None, False,
    ),
    "gpt2-bare": (  # the hub's gpt2 checkpoint has no "transformer." prefix
        lambda: T.GPT2Config(n_embd=64, n_head=4, n_layer=2, n_positions=32, **COMMON),
        T.GPT2Model, "gpt2",
        lambda m: [(b.ln_1, b.attn, b.attn) for b in m.h], None, False,
    ),
    "gpt_neox": (
        lambda: T.GPTNeoXConfig(
            hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
            max_position_embeddings=32, attention_bias=True, use_parallel_residual=True, **COMMON,
        ),
        T.GPTNeoXForCausalLM, "gpt_neox",
        lambda m: [(b.input_layernorm, b.attention, b.attention) for b in m.gpt_neox.layers], None, False,
    ),
    "llama": (
        lambda: T.LlamaConfig(**LLAMA_LIKE, attention_bias=True),
        T.LlamaForCausalLM, "llama", _llama_paths, None, True,
    ),
    "mistral": (
        lambda: T.MistralConfig(**LLAMA_LIKE, head_dim=24, sliding_window=None),
        T.MistralForCausalLM, "llama", _llama_paths, None, True,
    ),
    "smollm3": (
        lambda: T.SmolLM3Config(**LLAMA_LIKE),
        T.SmolLM3ForCausalLM, "smollm3", _llama_paths, None, True,
    ),
    "qwen2": (
        lambda: T.Qwen2Config(**LLAMA_LIKE),
        T.Qwen2ForCausalLM, "qwen2", _llama_paths, None, True,
    ),
    "qwen3": (
        lambda: T.Qwen3Config(**LLAMA_LIKE, head_dim=24),
        T.Qwen3ForCausalLM, "qwen3", _llama_paths, "head", True,
    ),
    "qwen3_moe": (
        lambda: T.Qwen3MoeConfig(
            **LLAMA_LIKE, head_dim=24, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            decoder_sparse_step=1,
        ),
        T.Qwen3MoeForCausalLM, "qwen3_moe", _llama_paths, "head", True,
    ),
    "olmo": (
        lambda: T.OlmoConfig(**LLAMA_LIKE, clip_qkv=None),
        T.OlmoForCausalLM, "olmo", _llama_paths, None, True,
    ),
    "olmo2": (
        lambda: T.Olmo2Config(**LLAMA_LIKE),
        T.Olmo2ForCausalLM, "olmo2",
        lambda m: [(None, b.self_attn, b.self_attn) for b in m.model.layers], "full", False,
    ),
    "granite": (
        lambda: T.GraniteConfig(
            **LLAMA_LIKE, attention_bias=True, attention_multiplier=0.2, residual_multiplier=0.5,
            embedding_multiplier=3.0, logits_scaling=2.0,
        ),
        T.GraniteForCausalLM, "granite", _llama_paths, None, True,
    ),
    "gemma3_text": (
        lambda: T.Gemma3TextConfig(**LLAMA_LIKE, head_dim=24, query_pre_attn_scalar=24, sliding_window=8),
        T.Gemma3ForCausalLM, "gemma3", _llama_paths, "head", True,
    ),
    "bert": (  # post-LN: the attention reads the previous block's output, nothing is folded
        lambda: T.BertConfig(
            hidden_size=64, num_attention_heads=4, num_hidden_layers=2, intermediate_size=96,
            max_position_embeddings=32, vocab_size=32, pad_token_id=0,
        ),
        T.BertModel, "bert",
        lambda m: [(None, b.attention.self, b.attention.output.dense) for b in m.encoder.layer], None, False,
    ),
}  # fmt: skip


# ---------------------------------------------------------------------------------------------
# capturing q/k/v as the model splits them: a registered attention kernel that records its
# inputs and then runs the stock sdpa kernel
_CAPTURED: dict[int, tuple] = {}


def _capture_attention(module, query, key, value, attention_mask, **kwargs):
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    _CAPTURED[id(module)] = (query.detach().clone(), key.detach().clone(), value.detach().clone())
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


T.AttentionInterface.register("headgeom_capture", _capture_attention)


def _randomize(model, seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.ndim >= 2:
                p.copy_(torch.randn(p.shape, generator=g, dtype=p.dtype) / np.sqrt(p.shape[-1]))
            else:  # norm gains (init ones/zeros) and biases (init zeros): make them nontrivial
                p.copy_(0.3 + 0.6 * torch.randn(p.shape, generator=g, dtype=p.dtype))


def _hidden(args, kwargs):
    return kwargs["hidden_states"] if "hidden_states" in kwargs else args[0]


def _run(model, paths, x_embeds, replace_inputs=None):
    """One forward pass at seq len 1. Returns per layer: norm input, attention input,
    attention output, captured (q, k, v). ``replace_inputs[l]`` replaces layer l's attention
    input (to measure the affine bias path)."""
    rec = [dict() for _ in paths]
    handles = []

    def pre_norm(i):
        def hook(mod, args, kwargs):
            rec[i]["x"] = _hidden(args, kwargs).detach().clone()

        return hook

    def pre_attn(i):
        def hook(mod, args, kwargs):
            h = _hidden(args, kwargs)
            if replace_inputs is not None:
                h = replace_inputs[i].reshape(1, 1, -1).expand_as(h).clone()
                if "hidden_states" in kwargs:
                    kwargs = {**kwargs, "hidden_states": h}
                else:
                    args = (h, *args[1:])
            rec[i]["n"] = h.detach().clone()
            return args, kwargs

        return hook

    def post_out(i):
        def hook(mod, args, out):
            rec[i]["out"] = (out[0] if isinstance(out, tuple) else out).detach().clone()

        return hook

    for i, (norm, attn, out) in enumerate(paths):
        if norm is not None:
            handles.append(norm.register_forward_pre_hook(pre_norm(i), with_kwargs=True))
        handles.append(attn.register_forward_pre_hook(pre_attn(i), with_kwargs=True))
        handles.append(out.register_forward_hook(post_out(i)))
    _CAPTURED.clear()
    try:
        with torch.no_grad():
            model(inputs_embeds=x_embeds, use_cache=False)
    finally:
        for h in handles:
            h.remove()
    for i, (norm, attn, out) in enumerate(paths):
        q, k, v = _CAPTURED[id(attn)]
        rec[i]["qkv"] = tuple(t[0, :, 0, :].numpy() for t in (q, k, v))  # (heads, d_head)
        for key in ("x", "n", "out"):
            if key in rec[i]:
                rec[i][key] = rec[i][key].reshape(-1).numpy()
    return rec


def _norm_eps(norm):
    for a in ("eps", "variance_epsilon"):
        if hasattr(norm, a):
            return float(getattr(norm, a))
    return 1e-5  # OlmoLayerNorm hard-codes F.layer_norm(..., eps=1e-5)


def _adapter_norm(x, lf, eps):
    """n = norm(x) from the adapter's folded description only (no bias)."""
    if lf.norm_type == "layernorm":
        c = x - x.mean()
        return lf.norm_gain * c / np.sqrt(np.mean(c**2) + eps)
    if lf.norm_type == "rmsnorm":
        return lf.norm_gain * x / np.sqrt(np.mean(x**2) + eps)
    assert lf.norm_type == "none" and lf.norm_gain is None
    return x


def _close(actual, expected, tol, what):
    expected = np.asarray(expected)
    scale = max(1.0, float(np.abs(expected).max()))
    err = float(np.abs(np.asarray(actual) - expected).max())
    assert err <= tol * scale, f"{what}: max abs error {err:.3g} > {tol:g} x {scale:.3g}"


def _apply_qk_norm(module_norm, proj, kind):
    """The model's own q_norm/k_norm applied to per-head projections (heads, d_head)."""
    t = torch.from_numpy(np.ascontiguousarray(proj))
    with torch.no_grad():
        if kind == "head":
            return module_norm(t).numpy()
        return module_norm(t.reshape(-1)).reshape(t.shape).numpy()  # "full": over all heads


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """Build, save and extract every architecture once (module scope keeps the file fast)."""
    cache = {}

    def get(arch):
        if arch not in cache:
            make_cfg, cls, _, _, _, _ = ARCHS[arch]
            config = make_cfg()
            config._attn_implementation = "headgeom_capture"
            config._experts_implementation = "eager"  # grouped-mm MoE kernels refuse float64
            model = cls(config)
            model = model.double().eval()
            _randomize(model, seed=sum(map(ord, arch)))
            root = tmp_path_factory.mktemp(arch)
            model.save_pretrained(root / "ckpt", safe_serialization=True)
            ckpt = open_checkpoint(root / "ckpt")
            extract(ckpt, root / "store", model=f"tiny-{arch}", source={"type": "local"}, log=lambda *a: None)
            cache[arch] = (model, config, ckpt, TensorStore(root / "store"))
        return cache[arch]

    return get


@pytest.mark.parametrize("arch", list(ARCHS))
def test_fields_and_gqa(arch, built):
    model, config, ckpt, store = built(arch)
    _, _, adapter_name, _, _, _ = ARCHS[arch]
    adapter = adapter_for(ckpt.config)
    assert adapter.name == adapter_name == store.manifest["adapter"]
    f = adapter.fields(ckpt.config, ckpt.keys())
    assert f == store.fields
    H = config.num_attention_heads
    G = getattr(config, "num_key_value_heads", None) or H
    d_head = getattr(config, "head_dim", None) or config.hidden_size // H
    assert (f.n_layers, f.d_model, f.n_heads, f.n_kv_heads, f.d_head) == (
        config.num_hidden_layers, config.hidden_size, H, G, d_head,
    )
    for layer in range(f.n_layers):
        lf = store.layer_factors(layer)
        assert lf.W_Q.shape == (H, d_head, f.d_model)
        assert lf.W_K.shape == (G, d_head, f.d_model)
        assert lf.W_V.shape == (G, d_head, f.d_model)
        assert lf.W_O.shape == (H, f.d_model, d_head)
        assert lf.kv_group.tolist() == (np.arange(H) // (H // G)).tolist() == gqa_map(H, G).tolist()
        assert lf.norm_type == f.norm_type
        assert not lf.nonfinite()
    # only attention (+ its norms) went into the store, never the MLP or embeddings
    assert all(("attn" in k or "attention" in k or "norm" in k or "ln_1" in k) for k in store.manifest["tensors"])


@pytest.mark.parametrize("arch", list(ARCHS))
def test_factors_match_transformers_attention(arch, built):
    model, config, ckpt, store = built(arch)
    _, _, _, layer_paths, qk_norm, norm_fp32 = ARCHS[arch]
    paths = layer_paths(model)
    D = config.hidden_size
    x = torch.randn((1, 1, D), generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    run1 = _run(model, paths, x)
    betas = [
        norm.bias.detach().clone() if norm is not None and getattr(norm, "bias", None) is not None
        else torch.zeros(D, dtype=torch.float64)
        for norm, _, _ in paths
    ]  # fmt: skip
    run2 = _run(model, paths, x, replace_inputs=betas)  # the affine bias path alone
    loose = LOOSE if norm_fp32 else TIGHT

    for layer, ((norm, attn, _), r1, r2, beta) in enumerate(zip(paths, run1, run2, betas)):
        lf = store.layer_factors(layer)
        beta = beta.numpy()
        n_real = r1["n"]  # the model's own norm output (or the raw input if there is no pre-norm)
        x_in = r1.get("x", n_real)
        n_ad = _adapter_norm(x_in, lf, _norm_eps(norm) if norm is not None else 0.0)
        (q1, k1, v1), (q2, k2, v2) = r1["qkv"], r2["qkv"]
        assert q1.shape[0] == lf.n_heads and k1.shape[0] == v1.shape[0] == lf.n_kv  # GQA: G kv heads
        tag = f"{arch} layer {layer}"

        # the folded norm reproduces the model's norm (minus its bias)
        _close(n_ad, n_real - beta, loose, f"{tag}: adapter norm vs model norm")
        if norm is not None and lf.norm_type != "none":
            assert not np.allclose(lf.norm_gain, 1.0) or arch == "olmo"

        # V per KV group, exact (float64) on the model's own norm output, then via the adapter norm
        v_real = v1 - v2
        _close(np.einsum("gdD,D->gd", lf.W_V, n_real - beta), v_real, TIGHT, f"{tag}: W_V")
        _close(np.einsum("gdD,D->gd", lf.W_V, n_ad), v_real, loose, f"{tag}: W_V via adapter norm")

        # Q and K per head / group
        if qk_norm is None:
            for W, real, what in ((lf.W_Q, q1 - q2, "W_Q"), (lf.W_K, k1 - k2, "W_K")):
                _close(np.einsum("hdD,D->hd", W, n_real - beta), real, TIGHT, f"{tag}: {what}")
                _close(np.einsum("hdD,D->hd", W, n_ad), real, loose, f"{tag}: {what} via adapter norm")
        else:  # q/k pass through the model's q_norm/k_norm: apply the same modules to W n
            for W, real, mod, bias, what in (
                (lf.W_Q, q1, attn.q_norm, attn.q_proj.bias, "W_Q"),
                (lf.W_K, k1, attn.k_norm, attn.k_proj.bias, "W_K"),
            ):
                proj = np.einsum("hdD,D->hd", W, n_real)
                if bias is not None:
                    proj = proj + bias.detach().numpy().reshape(proj.shape)
                _close(_apply_qk_norm(mod, proj, qk_norm), real, 1e-6, f"{tag}: {what} (after {qk_norm} qk-norm)")

        # single-token attention output: every head outputs its V; sum_h W_O^h W_V^{g(h)} n
        out_real = r1["out"] - r2["out"]
        ov = lambda n: sum(lf.W_O[h] @ (lf.W_V[lf.kv_group[h]] @ n) for h in range(lf.n_heads))  # noqa: E731
        _close(ov(n_real - beta), out_real, TIGHT, f"{tag}: attention output")
        _close(ov(n_ad), out_real, loose, f"{tag}: attention output via adapter norm")


def test_gemma_gain_is_one_plus_w(built):
    model, _, _, store = built("gemma3_text")
    w = model.model.layers[0].input_layernorm.weight.detach().numpy()
    np.testing.assert_array_equal(store.layer_factors(0).norm_gain, 1.0 + w)


def test_olmo2_folds_nothing_and_olmo_only_centers(built):
    lf2 = built("olmo2")[3].layer_factors(0)
    assert lf2.norm_type == "none" and lf2.norm_gain is None and "nothing" in lf2.notes["folded"]
    lf1 = built("olmo")[3].layer_factors(1)
    assert lf1.norm_type == "layernorm" and np.array_equal(lf1.norm_gain, np.ones(lf1.d_model))


def test_biases_are_recorded(built):
    assert built("qwen2")[3].layer_factors(0).notes["bias"] == [f"self_attn.{x}_proj.bias" for x in "qkv"]
    assert built("gpt2")[3].layer_factors(0).notes["bias"] == ["attn.c_attn.bias", "attn.c_proj.bias", "ln_1.bias"]
    assert built("qwen3")[3].layer_factors(0).notes["bias"] == []


# ---------------------------------------------------------------------------------------------
# GGUF (llama.cpp layout)


def _llamacpp_permute(weights, n_head, n_head_kv):
    """Verbatim logic of llama.cpp convert_hf_to_gguf.py LlamaModel.permute."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


@pytest.mark.parametrize("n_head,d_head,d_model", [(4, 8, 16), (2, 24, 64), (1, 2, 3)])
def test_gguf_unpermute_is_inverse_of_llamacpp_permute(n_head, d_head, d_model):
    rng = np.random.default_rng(n_head * 100 + d_head)
    W = rng.standard_normal((n_head * d_head, d_model))
    P = _llamacpp_permute(W, n_head, n_head)
    np.testing.assert_array_equal(permute_llama_rows(W, n_head), P)
    np.testing.assert_array_equal(unpermute_llama_rows(P, n_head), W)
    np.testing.assert_array_equal(permute_llama_rows(unpermute_llama_rows(W, n_head), n_head), W)
    # llama.cpp's K permute uses n_head_kv: same result as permuting with the KV head count
    np.testing.assert_array_equal(_llamacpp_permute(W, 2 * n_head, n_head), P)
    # meaning: HF rotate_half pairs (i, i + d/2) become adjacent GGUF rows (2i, 2i + 1)
    for h in range(n_head):
        for i in range(d_head // 2):
            np.testing.assert_array_equal(P[h * d_head + 2 * i], W[h * d_head + i])
            np.testing.assert_array_equal(P[h * d_head + 2 * i + 1], W[h * d_head + d_head // 2 + i])


def _write_gguf(path, arch, f, tensors):
    w = gguf.GGUFWriter(str(path), arch)
    w.add_block_count(f.n_layers)
    w.add_embedding_length(f.d_model)
    w.add_head_count(f.n_heads)
    w.add_head_count_kv(f.n_kv_heads)
    w.add_key_length(f.d_head)
    w.add_value_length(f.d_head)
    for name, arr in tensors.items():
        w.add_tensor(name, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("arch,gguf_arch", [("llama", "llama"), ("gemma3_text", "gemma3")])
def test_gguf_adapters_match_hf_factors(arch, gguf_arch, built, tmp_path):
    """Convert the tiny HF model the way llama.cpp does (llama: permute q/k rows, K with the KV
    head count; gemma3: norm weights + 1), write a float32 GGUF, and read it back through
    open_checkpoint -> extract -> TensorStore: the factors must equal the HF ones."""
    model, _, ckpt, store = built(arch)
    f = store.fields
    tensors = {}
    for layer in range(f.n_layers):
        a = f"{f.prefix}layers.{layer}."
        g = lambda k: ckpt_get(ckpt, a + k)  # noqa: E731
        q, k = g("self_attn.q_proj.weight"), g("self_attn.k_proj.weight")
        norm = g("input_layernorm.weight")
        if gguf_arch == "llama":
            q, k = _llamacpp_permute(q, f.n_heads, f.n_heads), _llamacpp_permute(k, f.n_heads, f.n_kv_heads)
        else:
            norm = norm + 1.0
        b = f"blk.{layer}."
        tensors[b + "attn_q.weight"] = q
        tensors[b + "attn_k.weight"] = k
        tensors[b + "attn_v.weight"] = g("self_attn.v_proj.weight")
        tensors[b + "attn_output.weight"] = g("self_attn.o_proj.weight")
        tensors[b + "attn_norm.weight"] = norm
    path = tmp_path / f"tiny-{arch}.gguf"
    _write_gguf(path, gguf_arch, f, tensors)
    gckpt = open_checkpoint(path)
    assert adapter_for(gckpt.config, "gguf").name == f"gguf-{gguf_arch}"
    extract(gckpt, tmp_path / "store", model=f"tiny-{arch}-gguf", source={"type": "local"}, log=lambda *a: None)
    gstore = TensorStore(tmp_path / "store")
    assert (gstore.fields.n_heads, gstore.fields.n_kv_heads, gstore.fields.d_head) == (f.n_heads, f.n_kv_heads, f.d_head)
    for layer in range(f.n_layers):
        hf, gg = store.layer_factors(layer), gstore.layer_factors(layer)
        for name in ("W_Q", "W_K", "W_V", "W_O", "norm_gain"):
            # the GGUF holds float32 copies of the float64 weights
            np.testing.assert_allclose(getattr(gg, name), getattr(hf, name), rtol=1e-6, atol=1e-6, err_msg=name)
        assert gg.kv_group.tolist() == hf.kv_group.tolist() and gg.norm_type == hf.norm_type == "rmsnorm"


def ckpt_get(ckpt, key):
    ((_, arr, _),) = list(ckpt.read([key]))
    return np.asarray(arr, dtype=np.float64)


# ---------------------------------------------------------------------------------------------
# registry


def test_unknown_architecture_names_supported_ones():
    with pytest.raises(UnknownArchitectureError) as e:
        adapter_for({"model_type": "mamba"})
    msg = str(e.value)
    assert "'mamba'" in msg
    for t in ("gpt2", "gpt_neox", "llama", "mistral", "smollm3", "qwen2", "qwen3", "qwen3_moe",
              "olmo", "olmo2", "granite", "gemma3_text", "bert"):  # fmt: skip
        assert f"{t} (safetensors)" in msg
    from headgeom.architectures import GGUF_ARCHS

    assert supported("gguf") == sorted(f"{a} (gguf)" for a in GGUF_ARCHS)
    with pytest.raises(UnknownArchitectureError, match="no attention"):
        adapter_for({"general.architecture": "mamba"}, "gguf")
    with pytest.raises(UnknownArchitectureError, match="unknown"):
        adapter_for({"general.architecture": "no-such-arch"}, "gguf")
    with pytest.raises(UnknownArchitectureError, match="supported"):
        by_name("no-such-adapter")


def test_wanted_patterns_skip_buffers_and_other_tensors():
    """Old GPT-2 / Pythia checkpoints carry attention buffers named like weights' neighbours."""
    gpt2, neox, olmo2 = by_name("gpt2"), by_name("gpt_neox"), by_name("olmo2")
    assert gpt2.wanted("h.3.attn.c_attn.weight") and gpt2.wanted("transformer.h.3.attn.c_proj.bias", "transformer.")
    assert not gpt2.wanted("h.3.attn.bias") and not gpt2.wanted("h.3.attn.masked_bias")
    assert not gpt2.wanted("h.3.mlp.c_proj.weight") and not gpt2.wanted("h.3.ln_2.weight")
    p = "gpt_neox."
    assert neox.wanted(p + "layers.5.attention.query_key_value.weight", p)
    for k in ("attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq", "mlp.dense_h_to_4h.weight"):
        assert not neox.wanted(p + "layers.5." + k, p), k
    assert olmo2.wanted("model.layers.0.post_attention_layernorm.weight", "model.")
    assert not olmo2.wanted("model.layers.0.post_feedforward_layernorm.weight", "model.")


def test_model_types_are_transformers_model_types():
    """Every safetensors model_type an adapter claims is one transformers really uses."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    for a in ADAPTERS.values():
        if a.fmt == "safetensors":
            for t in a.model_types:
                assert t in CONFIG_MAPPING_NAMES, (a.name, t)


def test_models_registry_entries_are_valid():
    """config/models.yaml: every entry is a valid config `models:` entry (the pipeline's own
    schema), names an adapter, and pairs / lineages are consistent."""
    import jsonschema

    reg = yaml.safe_load((REPO / "config" / "models.yaml").read_text())
    schema = yaml.safe_load((REPO / "workflow" / "schemas" / "config.schema.yaml").read_text())
    jsonschema.validate(reg["models"], schema["properties"]["models"])
    models = reg["models"]
    assert set(reg) == {"models"}
    for name, e in models.items():
        assert e["source"] == "hf", name
        assert isinstance(e["revision"], str) and e["revision"], name
        assert e["architecture"] in ADAPTERS and ADAPTERS[e["architecture"]].fmt == "safetensors", name
        assert e.get("tables"), name
        if "pair" in e:
            other = models[e["pair"]]
            assert other["pair"] == name and other["architecture"] == e["architecture"], name
    lineages: dict[str, set] = {}
    for e in models.values():
        if "lineage" in e:
            lineages.setdefault(e["lineage"], set()).add(e["architecture"])
    assert set(lineages) == {"pythia-2.8b-deduped", "olmo-1b", "tinyllama-1.1b"}
    assert all(len(archs) == 1 for archs in lineages.values())
    assert all(sum(e.get("lineage") == name for e in models.values()) == 4 for name in lineages)
    for paper_model in ("pythia-70m", "pythia-2.8b-deduped", "gpt2-124m", "olmo-1b", "olmo2-13b", "tinyllama-1.1b",
                        "smollm3-3b", "qwen3-4b-base", "qwen2.5-7b", "qwen2.5-7b-instruct", "qwen2.5-72b",
                        "qwen3-235b-a22b", "mistral-7b-v0.3", "granite-3.3-2b-base", "falcon3-3b-base", "yi-1.5-6b"):
        assert paper_model in models, paper_model
