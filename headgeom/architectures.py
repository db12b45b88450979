"""Architectures: where each transformer architecture keeps its attention pieces (docs/methods.md §0).

One ``Architecture`` per transformers ``model_type`` group says, in transformers' own module names
(relative to one decoder/encoder layer of the base model, ``AutoModel``):

  layers      path of the ModuleList of layers in the base model (``layers``, ``h``, ``decoder.layers``)
  attn        the attention module (its first output is what the block adds, before any post norm)
  q, k, v     separate projections, or ``qkv`` one fused projection with a ``split`` rule
  o           the output projection: its input is the concatenation z of the head outputs
  conv1d      weights stored ``(in, out)`` (GPT-2's Conv1D): transposed on read
  norm        the pre-attention norm (None: post-LN or no norm), ``norm_type`` what is folded
              (layernorm: centering and gain; rmsnorm: gain; none), ``norm_offset`` added to its
              weight (Gemma's ``1 + w``), ``norm_weight`` False for a non-parametric norm (OLMo)
  post_norm   a norm on the attention output before it reaches the residual (Gemma-2/3, OLMo-2):
              ``post_norm_type`` (rmsnorm | layernorm) and ``post_norm_offset`` (Gemma's ``1 + w``) say
              what it computes; the activation stage takes each head's write through it
  eps_keys    config keys of the pre-attention norm's epsilon (first present wins; GGUF metadata:
              ``<arch>.attention.layer_norm_rms_epsilon`` / ``layer_norm_epsilon``), which the activation
              stage checks against the epsilon the model's norm module computes with
  qk_norm     "per_head" | "full" (over all heads jointly) | None: a norm after the q/k projection
  parallel    attention and MLP read the same normalized input (GPT-J, Falcon, Phi, ...)
  moe         the MLP is a mixture of experts (irrelevant to attention, recorded)

``split`` rules for a fused projection (rows of the ``(out, in)`` weight, H query heads, G KV
heads, d = d_head):
  concat       [q (H d) | k (G d) | v (G d)]            GPT-2, MPT, Phi-3, BigCode/Falcon MQA
  per_head     (H, 3, d): q, k, v interleaved per head   GPT-NeoX, BLOOM, BigCode MHA, old Falcon
  grouped      (G, H/G + 2, d): a group's queries, k, v  Falcon new_decoder_architecture
  codegen      (4, 3, H d / 4) in the order q, v, k      CodeGen (mp_num = 4)

An architecture that a config selects by ``model_type`` can be forced with a model's ``architecture:``
key (``architecture_for``). Config-dependent layouts (Falcon's three, BigCode's MQA switch, OPT's
post-LN variant) are resolved by ``Architecture.resolve(config)``, which returns the architecture as that
config builds it. This module is the single place that names architectures; the adapters
(``headgeom.adapters``), the activation hooks and base/instruct read it. A safetensors architecture,
named or derived, is used only once transformers' own attention module, as the checkpoint's config
builds it, reproduces it (``headgeom.adapters.oracle``, run by ``adapter_for``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from headgeom.core.errors import UnknownArchitectureError

SPLITS = ("concat", "per_head", "grouped", "codegen")


@dataclass(frozen=True)
class Architecture:
    name: str
    model_types: tuple[str, ...]
    layers: str = "layers"
    attn: str = "self_attn"
    q: str | None = "self_attn.q_proj"
    k: str | None = "self_attn.k_proj"
    v: str | None = "self_attn.v_proj"
    qkv: str | None = None
    split: str | None = None
    o: str = "self_attn.o_proj"
    conv1d: bool = False
    norm: str | None = "input_layernorm"
    norm_type: str = "rmsnorm"
    norm_offset: float = 0.0
    norm_weight: bool = True
    norm_eps: float | None = None  # the norm's eps is a constant in its code, not a config key (OLMo, OPT)
    post_norm: str | None = None
    post_norm_type: str = "rmsnorm"
    post_norm_offset: float = 0.0
    qk_norm: str | None = None
    parallel: bool = False
    moe: bool = False
    post_ln: bool = False
    # config key names (first present wins) for the shapes
    d_model_keys: tuple[str, ...] = ("hidden_size",)
    heads_keys: tuple[str, ...] = ("num_attention_heads",)
    layers_keys: tuple[str, ...] = ("num_hidden_layers",)
    kv_keys: tuple[str, ...] = ("num_key_value_heads",)
    head_dim_keys: tuple[str, ...] = ("head_dim",)
    eps_keys: tuple[str, ...] = ("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps",
                                 "norm_epsilon", "layernorm_epsilon")
    #: config -> field overrides (a config-dependent layout); None: the same for every config
    variant: Callable[[dict], dict] | None = field(default=None, compare=False, repr=False)
    notes: str = ""

    def resolve(self, config: dict) -> "Architecture":
        """The architecture as ``config`` builds it (variant layouts applied)."""
        if self.variant is None:
            return self
        return replace(self, **self.variant(config), variant=None)

    # ---- shapes from a config dict ------------------------------------------------------
    def shapes(self, config: dict) -> dict:
        def first(keys, default=None):
            for k in keys:
                if config.get(k) is not None:
                    return config[k]
            if default is None:
                from headgeom.core.errors import CheckpointError

                raise CheckpointError(f"{self.name}: config lacks all of {keys}")
            return default

        D = int(first(self.d_model_keys))
        H = int(first(self.heads_keys))
        G = int(first(self.kv_keys, H)) if self.kv_keys else H
        d = int(first(self.head_dim_keys, D // H)) if self.head_dim_keys else D // H
        return dict(n_layers=int(first(self.layers_keys)), d_model=D, n_heads=H, n_kv_heads=G, d_head=d)

    @property
    def tensors(self) -> tuple[str, ...]:
        """Module names (within a layer) whose weights the weight stages read."""
        mods = [m for m in (self.q, self.k, self.v, self.qkv, self.o) if m]
        if self.norm and self.norm_weight:
            mods.append(self.norm)
        if self.post_norm:
            mods.append(self.post_norm)
        return tuple(mods)


def split_fused(W: np.ndarray, rule: str, H: int, G: int, d: int):
    """Per-head (W_Q (H,d,D), W_K (G,d,D), W_V (G,d,D)) from a fused ``(rows, D)`` weight."""
    D = W.shape[1]
    if rule == "concat":
        if W.shape[0] != (H + 2 * G) * d:
            raise ValueError(f"fused qkv has {W.shape[0]} rows, expected (H + 2G) d = {(H + 2 * G) * d}")
        q, k, v = W[: H * d], W[H * d : (H + G) * d], W[(H + G) * d :]
        return q.reshape(H, d, D), k.reshape(G, d, D), v.reshape(G, d, D)
    if rule == "per_head":
        if G != H or W.shape[0] != 3 * H * d:
            raise ValueError(f"per-head fused qkv needs G == H and 3 H d rows; got G={G}, rows={W.shape[0]}")
        Wr = W.reshape(H, 3, d, D)
        return Wr[:, 0], Wr[:, 1], Wr[:, 2]
    if rule == "grouped":
        r = H // G
        if H % G or W.shape[0] != G * (r + 2) * d:
            raise ValueError(f"grouped fused qkv needs G | H and G (H/G + 2) d rows; got H={H}, G={G}, rows={W.shape[0]}")
        Wr = W.reshape(G, r + 2, d, D)
        return Wr[:, :r].reshape(H, d, D), Wr[:, r], Wr[:, r + 1]
    if rule == "codegen":
        mp = 4
        if G != H or W.shape[0] != 3 * H * d or (H * d) % mp:
            raise ValueError(f"CodeGen qkv needs G == H, 3 H d rows and H d divisible by {mp}")
        Wr = W.reshape(mp, 3, H * d // mp, D)  # per mp block: q, v, k
        q, v, k = (Wr[:, i].reshape(H, d, D) for i in range(3))
        return q, k, v
    raise ValueError(f"unknown split rule {rule!r} (known: {SPLITS})")


# ---- config-dependent layouts ---------------------------------------------------------------
def _falcon(c: dict) -> dict:
    if c.get("new_decoder_architecture"):
        two = c.get("num_ln_in_parallel_attn") in (None, 2)
        return dict(split="grouped", kv_keys=("num_kv_heads",), norm="ln_attn" if two else "input_layernorm")
    if c.get("multi_query", True):
        return dict(split="concat", kv_keys=("_falcon_mqa_kv",))
    return dict(split="per_head", kv_keys=())  # MHA, H = G


def _bigcode(c: dict) -> dict:
    return dict(split="concat", kv_keys=("_bigcode_mqa_kv",)) if c.get("multi_query", True) else dict(
        split="per_head", kv_keys=())


def _opt(c: dict) -> dict:
    if c.get("do_layer_norm_before", True):
        return {}
    return dict(norm=None, norm_type="none", post_ln=True)


def _stablelm(c: dict) -> dict:
    return dict(qk_norm="per_head" if c.get("qk_layernorm") else None,
                parallel=bool(c.get("use_parallel_residual")))


def _gemma(c: dict) -> dict:
    # Gemma-1's post_attention_layernorm is its pre-MLP norm (the llama layout): no post-attention
    # norm and no q/k norm; Gemma-2 has the post-attention norm but no q/k norm
    return {"gemma": dict(post_norm=None, qk_norm=None), "gemma2": dict(qk_norm=None)}.get(c.get("model_type"), {})


def _cohere(c: dict) -> dict:
    return dict(qk_norm="per_head" if c.get("use_qk_norm") else None)


_LN = dict(norm_type="layernorm")
_BERT = dict(layers="encoder.layer", attn="attention", q="attention.self.query", k="attention.self.key",
             v="attention.self.value", o="attention.output.dense", norm=None, norm_type="none",
             post_ln=True, kv_keys=(), head_dim_keys=(),
             post_norm=None, notes="post-LN: the layer input is the previous block's LayerNorm output")
_GPT2_NAMES = dict(d_model_keys=("n_embd", "hidden_size"), heads_keys=("n_head", "num_attention_heads"),
                   layers_keys=("n_layer", "num_hidden_layers"), kv_keys=(), head_dim_keys=())

ARCHITECTURES: dict[str, Architecture] = {f.name: f for f in (
    # separate q/k/v/o projections, RMSNorm input_layernorm: the llama layout
    Architecture("llama", ("llama", "mistral")),
    Architecture("mixtral", ("mixtral",), moe=True),
    Architecture("gemma3", ("gemma3_text", "gemma3", "gemma2", "gemma"), norm_offset=1.0, qk_norm="per_head",
           post_norm="post_attention_layernorm", post_norm_offset=1.0, variant=_gemma,
           notes="(1 + w) RMSNorms; Gemma-1 has no q/k or post norm, Gemma-2 no q/k norm"),
    Architecture("qwen2", ("qwen2",)),
    Architecture("qwen2_moe", ("qwen2_moe",), moe=True),
    Architecture("qwen3", ("qwen3",), qk_norm="per_head"),
    Architecture("qwen3_moe", ("qwen3_moe",), qk_norm="per_head", moe=True),
    Architecture("smollm3", ("smollm3",)),
    Architecture("granite", ("granite",), notes="scalar multipliers not folded"),
    Architecture("granitemoe", ("granitemoe",), moe=True, notes="scalar multipliers not folded"),
    Architecture("cohere", ("cohere", "cohere2"), parallel=True, variant=_cohere, **_LN,
           notes="CohereLayerNorm: mean-centred, no bias"),
    Architecture("olmo", ("olmo",), norm_weight=False, norm_eps=1e-5, **_LN,
           notes="non-parametric LayerNorm (gain 1); OlmoLayerNorm calls layer_norm with eps=1e-5"),
    Architecture("olmo2", ("olmo2",), norm=None, norm_type="none", post_norm="post_attention_layernorm",
           qk_norm="full", notes="no pre-attention norm; RMSNorm on the attention output"),
    Architecture("olmoe", ("olmoe",), qk_norm="full", moe=True),
    Architecture("phimoe", ("phimoe",), moe=True, **_LN),
    Architecture("stablelm", ("stablelm",), variant=_stablelm, **_LN),
    Architecture("starcoder2", ("starcoder2",), **_LN),
    Architecture("gpt_oss", ("gpt_oss",), moe=True, notes="attention sinks (a per-head logit) not in the factors"),
    Architecture("minimax_m2", ("minimax_m2",), qk_norm="full", moe=True),
    Architecture("nemotron", ("nemotron",), norm_offset=1.0, **_LN, notes="LayerNorm1P: gain (1 + w)"),
    Architecture("phi", ("phi",), o="self_attn.dense", parallel=True, **_LN),
    Architecture("phi3", ("phi3",), q=None, k=None, v=None, qkv="self_attn.qkv_proj", split="concat"),
    Architecture("opt", ("opt",), layers="decoder.layers", q="self_attn.q_proj", k="self_attn.k_proj",
           v="self_attn.v_proj", o="self_attn.out_proj", norm="self_attn_layer_norm", variant=_opt,
           kv_keys=(), head_dim_keys=(), norm_eps=1e-5, notes="nn.LayerNorm with its default eps 1e-5", **_LN),
    Architecture("gpt_neo", ("gpt_neo",), layers="h", attn="attn", q="attn.attention.q_proj", k="attn.attention.k_proj",
           v="attn.attention.v_proj", o="attn.attention.out_proj", norm="ln_1", kv_keys=(), head_dim_keys=(),
           heads_keys=("num_heads",), layers_keys=("num_layers",), **_LN),
    Architecture("gptj", ("gptj",), layers="h", attn="attn", q="attn.q_proj", k="attn.k_proj", v="attn.v_proj",
           o="attn.out_proj", norm="ln_1", parallel=True, **{**_GPT2_NAMES, **_LN}),
    Architecture("codegen", ("codegen",), layers="h", attn="attn", q=None, k=None, v=None, qkv="attn.qkv_proj",
           split="codegen", o="attn.out_proj", norm="ln_1", parallel=True, **{**_GPT2_NAMES, **_LN}),
    Architecture("gpt2", ("gpt2",), layers="h", attn="attn", q=None, k=None, v=None, qkv="attn.c_attn", split="concat",
           o="attn.c_proj", conv1d=True, norm="ln_1", **{**_GPT2_NAMES, **_LN}),
    Architecture("gpt_bigcode", ("gpt_bigcode",), layers="h", attn="attn", q=None, k=None, v=None, qkv="attn.c_attn",
           o="attn.c_proj", norm="ln_1", variant=_bigcode, **{**_GPT2_NAMES, **_LN}),
    Architecture("gpt_neox", ("gpt_neox",), attn="attention", q=None, k=None, v=None, qkv="attention.query_key_value",
           split="per_head", o="attention.dense", kv_keys=(), head_dim_keys=(), **_LN),
    Architecture("bloom", ("bloom",), layers="h", attn="self_attention", q=None, k=None, v=None,
           qkv="self_attention.query_key_value", split="per_head", o="self_attention.dense",
           heads_keys=("n_head", "num_attention_heads"), layers_keys=("n_layer", "num_hidden_layers"),
           kv_keys=(), head_dim_keys=(), **_LN),
    Architecture("falcon", ("falcon",), layers="h", attn="self_attention", q=None, k=None, v=None,
           qkv="self_attention.query_key_value", o="self_attention.dense", parallel=True, variant=_falcon,
           head_dim_keys=(), **_LN),
    Architecture("mpt", ("mpt",), layers="blocks", attn="attn", q=None, k=None, v=None, qkv="attn.Wqkv", split="concat",
           o="attn.out_proj", norm="norm_1", d_model_keys=("d_model",), heads_keys=("n_heads",),
           layers_keys=("n_layers",), kv_keys=(), head_dim_keys=(), **_LN),
    Architecture("bert", ("bert", "roberta"), **_BERT),
)}

# MQA layouts whose KV-head count is not a config key
_IMPLIED = {"_falcon_mqa_kv": 1, "_bigcode_mqa_kv": 1}


def config_view(config: dict) -> dict:
    """The text config of a (possibly multimodal) HF config dict, plus implied keys."""
    c = dict(config.get("text_config") or config) if "text_config" in config else dict(config)
    return {**_IMPLIED, **c}


#: model_type -> architecture name
BY_MODEL_TYPE = {mt: f.name for f in ARCHITECTURES.values() for mt in f.model_types}

#: the architecture whose layout a derived type is read with (and whose cuts size its oracle instance)
DERIVED_LAYOUT = "llama"

#: llama-layout model_types that no architecture names, run through the forward-pass oracle end to end by
#: tests/unit/adapters/test_architectures_oracle.py (any other is derived and checked at first use the same way)
DERIVED_TESTED = ("arcee", "ernie4_5", "glm", "helium", "ministral", "seed_oss")

#: what docs/models.md's coverage table (headgeom.adapters.coverage) says of an architecture beyond its
#: fields, by column: the fused projection's split rules, what is folded, other options, the Q/K check
COVERAGE_NOTES = {
    "falcon": {"split": "grouped (new_decoder_architecture), concat (multi_query), per_head (MHA)"},
    "gpt_bigcode": {"split": "concat (multi_query), per_head (MHA)"},
    "opt": {"folded": "; post-LN variant: nothing"},
    "stablelm": {"other": "options by config"},
    "cohere": {"other": "options by config"},
    "gemma3": {"qk": "Q/K skipped (architecture has q/k norm), multimodal `gemma3` wrapper not built"},
}

#: refused with the reason (architectures transformers builds but whose attention is not
#: standard multi-head/grouped/multi-query attention)
REFUSED = {
    "bitnet": "an RMSNorm (attn_sub_norm) sits between the heads' outputs and o_proj: T is not linear in the "
              "heads' output, so the OV operator is not O V^T",
    "deepseek_v2": "multi-head latent attention: the value path passes through a low-rank norm",
    "deepseek_v3": "multi-head latent attention: the value path passes through a low-rank norm",
    "mamba": "no attention (state-space model)",
    "mamba2": "no attention (state-space model)",
    "rwkv": "no attention (recurrent)",
    "lfm2": "hybrid: attention in some layers only, short convolutions in the others",
    "gemma4": "the head dimension differs between sliding-window and full-attention layers",
    "deci": "the attention shape differs from layer to layer (some layers have none)",
    "t5": "encoder-decoder: relative position bias and cross-attention are not modelled",
    "umt5": "encoder-decoder: relative position bias and cross-attention are not modelled",
}


# ---- GGUF (llama.cpp's converter, convert_hf_to_gguf.py) ------------------------------------------
@dataclass(frozen=True)
class GGUFArch:
    """How llama.cpp's converter writes one architecture: GGUF ``general.architecture`` -> architecture.
    Tensors are ``blk.{L}.`` + ``GGUF_NAMES[role]``; every fused ``attn_qkv`` the converter writes
    is ``[q | k | v]`` (``concat``: Falcon's groups and BLOOM's per-head interleave are reordered,
    GPT-2's Conv1D transposed)."""

    architecture: str  # an ARCHITECTURES key: norm type and offset, q/k and post norms
    permute_qk: bool = False  # Q/K rows permuted within each head (interleaved RoPE pairs): undone on read
    split: str | None = None  # a fused attn_qkv and its layout as written
    #: whose norm offset (+1) the converter added to the stored weights ("Gemma"); "" for none
    norm_offset_stored: str = ""
    #: the pre-attention norm's GGUF names, the first present wins (Falcon-40B's ln_attn is attn_norm_2)
    norm: tuple[str, ...] = ("attn_norm",)
    notes: str = ""


#: role -> GGUF tensor name within ``blk.{L}.`` (llama.cpp's standard names)
GGUF_NAMES = dict(q="attn_q", k="attn_k", v="attn_v", qkv="attn_qkv", o="attn_output", q_norm="attn_q_norm",
                  k_norm="attn_k_norm")

#: every GGUF architecture transformers' own GGUF loader reads (transformers.integrations.ggml)
GGUF_ARCHS: dict[str, GGUFArch] = {
    "llama": GGUFArch("llama", permute_qk=True),
    "mistral": GGUFArch("llama", permute_qk=True, notes="llama.cpp writes Mistral as llama"),
    "qwen2": GGUFArch("qwen2"),
    "qwen2moe": GGUFArch("qwen2_moe"),
    "qwen3": GGUFArch("qwen3"),
    "qwen3moe": GGUFArch("qwen3_moe"),
    "gpt-oss": GGUFArch("gpt_oss"),
    "minimax-m2": GGUFArch("minimax_m2"),
    "phi3": GGUFArch("phi3", split="concat"),
    "bloom": GGUFArch("bloom", split="concat", notes="per-head interleave reordered to q, k, v blocks"),
    "falcon": GGUFArch("falcon", split="concat", norm=("attn_norm_2", "attn_norm"),
                       notes="KV groups reordered to q, k, v blocks; `attn_norm_2` (ln_attn) where present"),
    "gpt2": GGUFArch("gpt2", split="concat", notes="Conv1D transposed to (out, in)"),
    "stablelm": GGUFArch("stablelm"),
    "starcoder2": GGUFArch("starcoder2"),
    "nemotron": GGUFArch("nemotron", norm_offset_stored="Nemotron"),
    "gemma2": GGUFArch("gemma3", norm_offset_stored="Gemma"),
    "gemma3": GGUFArch("gemma3", norm_offset_stored="Gemma"),
}

#: GGUF architectures transformers reads that headgeom refuses, with the reason
GGUF_REFUSED = {
    "mamba": REFUSED["mamba"],
    "t5": REFUSED["t5"],
    "t5encoder": "encoder only, relative position bias is not modelled",
    "lfm2": REFUSED["lfm2"],
    "gemma4": REFUSED["gemma4"],
    "deci": REFUSED["deci"],
}


def gguf_architecture(arch: str) -> Architecture:
    """The architecture of a GGUF ``general.architecture`` (or its adapter name ``gguf-<arch>``)."""
    arch = arch.removeprefix("gguf-")
    if arch in GGUF_REFUSED:
        raise UnknownArchitectureError(f"GGUF architecture {arch!r} is not supported: {GGUF_REFUSED[arch]}")
    if arch not in GGUF_ARCHS:
        raise UnknownArchitectureError(
            f"unknown GGUF architecture {arch!r}; supported: {', '.join(sorted(GGUF_ARCHS))}")
    return ARCHITECTURES[GGUF_ARCHS[arch].architecture]


def architecture_for(config: dict, architecture: str | None = None) -> Architecture:
    """The architecture of an HF config dict (by ``model_type``), resolved for that config; a given
    ``architecture`` (a model's ``architecture:`` key) forces the architecture, and must exist."""
    if architecture is not None:
        fam = ARCHITECTURES.get(architecture) or ARCHITECTURES.get(BY_MODEL_TYPE.get(architecture, ""))
        if fam is None and architecture.startswith("gguf-") and architecture[5:] in GGUF_ARCHS:
            fam = gguf_architecture(architecture)
        if fam is None:
            raise UnknownArchitectureError(
                f"architecture: {architecture!r} is not a known architecture; known: {', '.join(sorted(ARCHITECTURES))}")
        return fam.resolve(config_view(config))
    mt = config.get("model_type")
    if mt in REFUSED:
        raise UnknownArchitectureError(f"architecture {mt!r} is not supported: {REFUSED[mt]}")
    name = BY_MODEL_TYPE.get(mt)
    if name is None:
        return derive(config_view(config))
    return ARCHITECTURES[name].resolve(config_view(config))


def hook_map(fam: Architecture) -> dict:
    """Module paths the activation stage hooks, relative to one layer of the base model:
    o (its input is z), attn (its first output is the attention block's output), q/k/v or qkv
    (weight check), norm (pre-attention; None: post-LN or none) with what it computes (norm_type,
    norm_offset, norm_weight, a constant norm_eps), post_norm (on the attention output before the
    residual add) with post_norm_type and post_norm_offset."""
    return dict(layers=fam.layers, attn=fam.o if fam.post_ln and fam.name == "bert" else fam.attn, o=fam.o,
                q=fam.q, k=fam.k, v=fam.v, qkv=fam.qkv, split=fam.split, conv1d=fam.conv1d,
                norm=fam.norm, norm_type=fam.norm_type, norm_offset=fam.norm_offset, norm_weight=fam.norm_weight,
                norm_eps=fam.norm_eps, post_norm=fam.post_norm, post_norm_type=fam.post_norm_type,
                post_norm_offset=fam.post_norm_offset)


#: GGUF metadata keys of the norm epsilon (after ``<general.architecture>.``)
_GGUF_EPS = ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon")


def config_eps(config: dict, fam: Architecture | None = None) -> float | None:
    """The pre-attention norm's epsilon a checkpoint's config declares (an HF config dict with its
    architecture ``fam``, or GGUF metadata, as a tensor store's manifest records it); the architecture's code
    constant where its norm has one (OLMo); None when the architecture has no pre-attention norm or the
    config names none."""
    arch = config.get("general.architecture")
    if arch:  # GGUF: every supported GGUF layout has an RMSNorm before attention
        keys, c = tuple(f"{arch}.{k}" for k in _GGUF_EPS), config
    elif fam is None or fam.norm is None:
        return None
    elif fam.norm_eps is not None:
        return float(fam.norm_eps)
    else:
        keys, c = fam.eps_keys, config_view(config)
    for k in keys:
        if c.get(k) is not None:
            v = c[k]
            return float(v[0] if isinstance(v, (list, tuple)) else v)
    return None


def o_proj_names() -> tuple[str, ...]:
    """Output-projection module names of every architecture (plus GGUF's ``attn_output``)."""
    return tuple(sorted({f.o for f in ARCHITECTURES.values()} | {"attn_output"}))




def derive(config: dict) -> Architecture:
    """An architecture for a ``model_type`` not in ARCHITECTURES, read from transformers' own modules: the
    model skeleton is built from the config on the meta device (no weights, no remote code) and
    accepted when a layer has the llama layout (``self_attn.{q,k,v,o}_proj`` and an
    ``input_layernorm`` whose class is an RMSNorm or LayerNorm); the norm's ``(1 + w)`` form is
    read from its forward's source. Anything else is refused with what was found. This reads the
    structure only: ``headgeom.adapters.oracle.derived_architecture`` (what ``adapter_for`` calls) accepts
    the architecture only when transformers' own module reproduces it on a tiny random instance."""
    import inspect

    mt = config.get("model_type")
    try:
        import torch
        from transformers import AutoConfig, AutoModel

        kw = {k: v for k, v in config.items() if k not in ("model_type", "architectures", "transformers_version")}
        cfg = AutoConfig.for_model(mt, **kw)
        with torch.device("meta"):
            model = AutoModel.from_config(cfg)
    except Exception as e:  # transformers does not know or cannot build it
        why = str(e).split(". Should contain one of")[0].strip()  # not transformers' list of every model type
        raise UnknownArchitectureError(
            f"unknown architecture {mt!r} (transformers cannot build it offline: {type(e).__name__}: {why}); "
            f"supported model_types: {', '.join(sorted(BY_MODEL_TYPE))}") from None
    base = model.base_model
    layers = next((p for p in ("layers", "model.layers", "language_model.layers") if _has(base, p)), None)
    layer = _getattr(base, layers)[0] if layers else None
    need = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj", "input_layernorm")
    missing = [n for n in need if layer is None or not _has(layer, n)]
    if missing:
        raise UnknownArchitectureError(
            f"architecture {mt!r} is not in headgeom.architectures and its layers lack the llama layout "
            f"({', '.join(missing)} not found); it needs a Architecture entry")
    norm = _getattr(layer, "input_layernorm")
    cls = type(norm).__name__
    if "RMSNorm" in cls:
        norm_type = "rmsnorm"
    elif "LayerNorm" in cls:
        norm_type = "layernorm"
    else:
        raise UnknownArchitectureError(f"architecture {mt!r}: pre-attention norm {cls} is neither an RMSNorm nor a LayerNorm")
    try:
        src = inspect.getsource(type(norm).forward)
    except (OSError, TypeError):
        src = ""
    offset = 1.0 if ("1.0 + self.weight" in src or "1 + self.weight" in src) else 0.0
    attn = _getattr(layer, "self_attn")
    qk = "per_head" if _has(attn, "q_norm") else None
    post = "post_attention_layernorm" if _has(layer, "post_feedforward_layernorm") and _has(
        layer, "pre_feedforward_layernorm") else None
    return Architecture(mt, (mt,), layers=layers, norm_type=norm_type, norm_offset=offset, qk_norm=qk, post_norm=post,
                  notes=f"derived from transformers' {type(layer).__name__} ({cls})")


def _getattr(obj, dotted):
    for part in dotted.split("."):
        obj = getattr(obj, part)
    return obj


def _has(obj, dotted) -> bool:
    try:
        _getattr(obj, dotted)
        return True
    except AttributeError:
        return False
