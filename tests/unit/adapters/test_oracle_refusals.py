"""An architecture is accepted only when transformers' own attention module reproduces it (headgeom.adapters.oracle).

* tiny BitNet (an RMSNorm between the heads' outputs and o_proj) and a llama-layout type made
  here whose attention block carries an extra module between V and O are refused at pre-flight
  (``headgeom.commands.check.problems``, what ``headgeom check`` and the workflow run) with
  their reasons; the same type without the extra module passes (the control);
* the oracle alone (BitNet taken out of ``REFUSED``) names ``attn_sub_norm``; a named architecture
  forced onto the extra-module type, and a config switch that adds a q/k norm the architecture does
  not describe (Phi's ``qk_layernorm``), are refused the same way;
* the verdict cache: one file per key, written once, read warm without building anything, a
  corrupt file recomputed, keys that change no module share an entry.
"""

from __future__ import annotations

import json
import re

import pytest
import torch
import transformers as T
from torch import nn
from transformers.models.llama import modeling_llama as ml

from headgeom.adapters import oracle
from headgeom.architectures import ARCHITECTURES, REFUSED
from headgeom.core.errors import UnknownArchitectureError
from headgeom.commands.check import problems

BETWEEN = "sits between the heads' outputs and o_proj, so the OV operator is not O V^T"


class ExtraConfig(ml.LlamaConfig):
    model_type = "hgtest_llama_vo_extra"


class PlainConfig(ml.LlamaConfig):
    model_type = "hgtest_llama_plain"


class ExtraAttention(ml.LlamaAttention):
    """Llama's attention with one more module, ``mix``, applied to the heads' outputs before o_proj."""

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        n = config.num_attention_heads * self.head_dim
        self.mix = nn.Linear(n, n, bias=False)
        self.o_proj.register_forward_pre_hook(lambda mod, args: (self.mix(args[0]), *args[1:]))


class ExtraModel(ml.LlamaModel):
    config_class = ExtraConfig

    def __init__(self, config):
        super().__init__(config)
        for i, layer in enumerate(self.layers):
            layer.self_attn = ExtraAttention(config, i)


class PlainModel(ml.LlamaModel):
    config_class = PlainConfig


for _cfg, _model in ((ExtraConfig, ExtraModel), (PlainConfig, PlainModel)):
    if _cfg.model_type not in T.CONFIG_MAPPING:
        T.AutoConfig.register(_cfg.model_type, _cfg)
        T.AutoModel.register(_cfg, _model)


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HEADGEOM_CACHE", str(tmp_path / "cache"))


def _save(model_type: str, path, cls=T.AutoModel):
    c = {"model_type": model_type}
    cut = oracle.cut_config(c, ARCHITECTURES["llama"])
    cfg = T.AutoConfig.for_model(model_type, **{k: v for k, v in cut.items() if k != "model_type"})
    torch.manual_seed(0)
    cls.from_config(cfg).save_pretrained(path)
    assert json.loads((path / "config.json").read_text())["model_type"] == model_type
    return {"source": "local", "path": str(path)}


def _problems(**models) -> dict[str, str]:
    found = problems({"models": models, "active_models": list(models)})
    return {p.name: p.line() for p in found}


def test_bitnet_and_an_extra_module_between_v_and_o_are_refused_at_preflight(tmp_path):
    found = _problems(bitnet=_save("bitnet", tmp_path / "bitnet", T.AutoModelForCausalLM),
                      extra=_save(ExtraConfig.model_type, tmp_path / "extra"),
                      plain=_save(PlainConfig.model_type, tmp_path / "plain"))
    assert set(found) == {"bitnet", "extra"}, found  # the plain subclass passes: the refusal is the module's
    assert "(fetch)" in found["bitnet"] and "'bitnet' is not supported" in found["bitnet"], found
    assert "attn_sub_norm" in found["bitnet"] and "not linear in the heads' output" in found["bitnet"], found
    assert f"{ExtraConfig.model_type}: mix {BETWEEN}" in found["extra"], found


def test_the_oracle_alone_refuses_bitnet(monkeypatch):
    monkeypatch.delitem(REFUSED, "bitnet")
    with pytest.raises(UnknownArchitectureError, match=re.escape(f"bitnet: attn_sub_norm {BETWEEN}")):
        oracle.derived_architecture({"model_type": "bitnet", "hidden_size": 2560, "num_attention_heads": 20,
                               "num_key_value_heads": 5, "num_hidden_layers": 30})


def test_named_architecture_forced_onto_the_extra_module_is_refused(tmp_path):
    found = _problems(forced={**_save(ExtraConfig.model_type, tmp_path / "x"), "architecture": "llama"},
                      control={**_save(PlainConfig.model_type, tmp_path / "p"), "architecture": "llama"})
    assert list(found) == ["forced"] and f"mix {BETWEEN}" in found["forced"], found


def test_a_config_switch_adding_an_undescribed_qk_norm_is_refused():
    from headgeom.adapters import adapter_for

    assert adapter_for({"model_type": "phi"}).name == "phi"
    with pytest.raises(UnknownArchitectureError, match="phi: q_layernorm sits on the query/key path"):
        adapter_for({"model_type": "phi", "qk_layernorm": True})


def test_verdicts_are_cached_once_per_layout(tmp_path, monkeypatch):
    llama = ARCHITECTURES["llama"]
    base = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32, "num_key_value_heads": 8,
            "num_hidden_layers": 32, "rms_norm_eps": 1e-5, "rope_theta": 5e5, "vocab_size": 128256}
    calls = []
    real = oracle.check
    monkeypatch.setattr(oracle, "check", lambda fam, cfg: calls.append(1) or real(fam, cfg))
    oracle.verify(llama, base)
    files = list((tmp_path / "cache" / "oracle").glob("llama-*.json"))
    assert len(calls) == 1 and len(files) == 1
    assert json.loads(files[0].read_text())["ok"] is True
    # other widths, eps, RoPE base and vocabulary: the same tiny instance, the same entry
    oracle.verify(llama, {**base, "hidden_size": 8192, "num_hidden_layers": 80, "rms_norm_eps": 1e-6,
                          "rope_theta": 1e4, "vocab_size": 32000})
    assert len(calls) == 1
    # MHA instead of GQA builds another instance
    oracle.verify(llama, {**base, "num_key_value_heads": 32})
    assert len(calls) == 2
    # a corrupt entry is recomputed and rewritten
    files[0].write_text("{not json")
    oracle.verify(llama, base)
    assert len(calls) == 3 and json.loads(files[0].read_text())["ok"] is True


def test_a_cached_refusal_is_raised_without_building(monkeypatch):
    c = {"model_type": "phi", "qk_layernorm": True}
    fam = ARCHITECTURES["phi"].resolve(c)
    with pytest.raises(UnknownArchitectureError):
        oracle.verify(fam, c)
    monkeypatch.setattr(oracle, "tiny_model", lambda cut: pytest.fail("a warm verdict built a model"))
    with pytest.raises(UnknownArchitectureError, match="q_layernorm"):
        oracle.verify(fam, c)


GEMMA3_270M = {"model_type": "gemma3_text", "hidden_size": 640, "num_attention_heads": 4, "num_key_value_heads": 1,
               "head_dim": 256, "num_hidden_layers": 18, "intermediate_size": 2048, "vocab_size": 262144,
               "layer_types": (["sliding_attention"] * 5 + ["full_attention"]) * 3, "sliding_window": 512,
               "query_pre_attn_scalar": 256}


@pytest.mark.parametrize("config", [
    {"model_type": "gemma3", "text_config": GEMMA3_270M, "vision_config": {"model_type": "siglip_vision_model"}},
    {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28, "num_key_value_heads": 4,
     "num_hidden_layers": 28, "intermediate_size": 18944, "max_window_layers": 28, "use_sliding_window": False,
     "sliding_window": 131072, "rope_theta": 1e6, "vocab_size": 152064},
], ids=["gemma3-270m-multimodal", "qwen2.5-7b"])
def test_full_size_configs_are_checked_and_pass(config):
    """A paper-scale config (per-layer lists, a multimodal wrapper's text config) is cut, built and
    passes: checked (ok True), not merely unbuildable (ok None)."""
    from headgeom.adapters import adapter_for
    from headgeom.architectures import architecture_for

    assert oracle.verdict(architecture_for(config), config)["ok"] is True
    assert adapter_for(config).architecture.name == architecture_for(config).name
