"""Stand-ins of every paper model, run through the hub code path: `make standins`.

For every model of config/models.yaml this builds a tiny random checkpoint with the model's own
transformers architecture (its model_type, so its biases, QK-norm, MoE blocks, post-norms,
parallel attention and fused projections come from transformers itself), the model's number of
layers, query heads and KV heads and its H·d_head : d_model ratio, at d_head = 8 (the width is
what is tiny). A few heads per layer are planted near-closed (O_h = alpha V_g (V_g^T V_g)^-1 plus
5 % noise), so paper 1's strong-head populations are not empty. A base/instruct pair's second half
and a lineage's earlier checkpoints are perturbations of the first half / of the final checkpoint
(relative noise 0.03 for an instruct twin; 2.0, 0.5, 0.1 along a lineage, earliest first).
Every checkpoint carries a character-level tokenizer, so the activation stage runs on it.

The checkpoints are served by a loopback hub (tests/helpers/hubserver.py) under the entries'
real repo_id and revision (a 40-hex revision is the commit; a branch name is a ref to a commit
named after it), and the pipeline fetches them with `source: hf` as it would from the hub. The
run is config/models.yaml + config/paper.yaml (lineages enabled, the activation stage on every
model with the embedded text) with samples and restarts cut (never shapes), listed in CUTS.
It ends with the claims ledger's coverage line and the ledger's status counts.

    .venv/bin/python bench/standins.py [--work .standins] [--cores 2] [--build-only] [--models m ...]
"""

from __future__ import annotations

import argparse
import copy
import csv
import hashlib
import io
import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))  # the test fixtures the bench shares (tests/helpers/: hubserver.py)

D_HEAD = 8  # the stand-ins' head width (the real models': 64-256)


@dataclass(frozen=True)
class Shape:
    """A model's attention shape as its config.json gives it, plus config keys that set its
    structural features (kept at the real values where they are not widths)."""

    model_type: str
    layers: int
    heads: int
    kv_heads: int
    d_head: int
    d_model: int
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:  # H·d_head : d_model
        return self.heads * self.d_head / self.d_model


MOE = dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16, decoder_sparse_step=1, mlp_only_layers=[])
NEOX = dict(use_parallel_residual=True, rotary_pct=0.25)
# per models.yaml entry: the shape from each model's config.json (architecture = headgeom adapter)
SHAPES: dict[str, Shape] = {
    "gpt2-124m": Shape("gpt2", 12, 12, 12, 64, 768),
    "pythia-70m": Shape("gpt_neox", 6, 8, 8, 64, 512, NEOX),
    "qwen2.5-7b": Shape("qwen2", 28, 28, 4, 128, 3584),
    "qwen2.5-7b-instruct": Shape("qwen2", 28, 28, 4, 128, 3584),
    "qwen3-235b-a22b": Shape("qwen3_moe", 94, 64, 4, 128, 4096, MOE),
    "pythia-2.8b-deduped": Shape("gpt_neox", 32, 32, 32, 80, 2560, NEOX),
    "qwen3-4b-base": Shape("qwen3", 36, 32, 8, 128, 2560),
    "qwen3-4b-instruct": Shape("qwen3", 36, 32, 8, 128, 2560),
    "mistral-7b-v0.3": Shape("mistral", 32, 32, 8, 128, 4096),
    "olmo2-13b": Shape("olmo2", 40, 40, 40, 128, 5120),
    "qwen2.5-72b": Shape("qwen2", 80, 64, 8, 128, 8192),
    "olmo-1b": Shape("olmo", 16, 16, 16, 128, 2048),
    "tinyllama-1.1b": Shape("llama", 22, 32, 4, 64, 2048),
    "smollm3-3b": Shape("smollm3", 36, 16, 4, 128, 2048),
    "granite-3.3-2b-base": Shape("granite", 40, 32, 8, 64, 2048),
    "falcon3-3b-base": Shape("llama", 22, 12, 4, 256, 3072),
    "yi-1.5-6b": Shape("llama", 32, 32, 4, 128, 4096),
}

# what the stand-in run cuts from config/paper.yaml (samples and restarts; never shapes)
CUTS = {
    "pk": {"nulls": {"within_samples": 2, "cross_samples": 2, "samples_per_job": 2}, "self_permutations": 200},
    "paper1": {"bootstrap": 200, "capacity": {"restarts": 2, "iters": 20}},
    "figures": {"pk_fig2_random_samples": 20, "pk_random_reference_draws": 20},
}
PERTURB_PAIR = 0.03
PERTURB_LINEAGE = (2.0, 0.5, 0.1)  # earliest checkpoint first; the last of a lineage is the final model


def _seed(*parts) -> int:
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:4], "little")


def shape_for(name: str, entry: dict, lineage_final: dict[str, str]) -> Shape:
    """A models.yaml entry's shape: its own, its lineage's (``lineage:``, the name of the lineage's
    final model) or its lineage's last checkpoint's (same architecture)."""
    shape = SHAPES.get(name) or SHAPES.get(entry.get("lineage", "")) or SHAPES.get(lineage_final.get(name, ""))
    if shape is None:
        raise SystemExit(f"standins: no shape for models.yaml entry {name!r}; add it to SHAPES in {__file__}")
    declared = entry.get("shape")
    if declared:  # models.yaml records some shapes for `headgeom plan`: they must agree
        mine = dict(n_layers=shape.layers, d_model=shape.d_model, n_heads=shape.heads, n_kv_heads=shape.kv_heads,
                    d_head=shape.d_head)
        if mine != declared:
            raise SystemExit(f"standins: SHAPES[{name!r}] = {mine} disagrees with models.yaml's {declared}")
    return shape


def tiny_config(shape: Shape, vocab: int):
    """The transformers config of the stand-in: the architecture's keys at the real counts, d_head 8,
    d_model = H·8 / ratio."""
    import transformers

    from headgeom.architectures import BY_MODEL_TYPE, ARCHITECTURES

    fam = ARCHITECTURES[BY_MODEL_TYPE[shape.model_type]]
    d_model = round(shape.heads * D_HEAD / shape.ratio)
    kw = dict(vocab_size=vocab, max_position_embeddings=1024, n_positions=1024, intermediate_size=32, n_inner=32,
              pad_token_id=None, bos_token_id=1, eos_token_id=None, tie_word_embeddings=False, **shape.extra)
    kw[fam.d_model_keys[0]] = d_model
    kw[fam.heads_keys[0]] = shape.heads
    kw[fam.layers_keys[0]] = shape.layers
    if fam.kv_keys and not fam.kv_keys[0].startswith("_"):
        kw[fam.kv_keys[0]] = shape.kv_heads
    if abs(shape.ratio - 1) > 1e-12:
        if not fam.head_dim_keys:
            raise SystemExit(f"standins: {shape.model_type} has no head_dim key; ratio {shape.ratio} cannot be kept")
        kw[fam.head_dim_keys[0]] = D_HEAD
    if shape.model_type == "smollm3":  # its NoPE layers: every 4th layer without rotary, as released
        kw["no_rope_layers"] = [int((i + 1) % 4 != 0) for i in range(shape.layers)]
    return transformers.AutoConfig.for_model(shape.model_type, **kw)


def _attention_slices(model, shape: Shape, layer: int):
    """(V_g as d_model x d_head, setter of O_h as d_model x d_head) for one layer, from the
    torch modules of the three layouts among the paper models."""
    import torch

    H, G, dh = shape.heads, shape.kv_heads, D_HEAD
    mt = shape.model_type
    if mt == "gpt2":  # Conv1D c_attn: x @ W, columns [q | k | v]; c_proj: z @ W, rows per head
        att = model.transformer.h[layer].attn
        d = att.c_attn.weight.shape[0]
        W = att.c_attn.weight

        def V(g):
            return W[:, 2 * d + g * dh: 2 * d + (g + 1) * dh].double()

        def set_O(h, O):
            att.c_proj.weight[h * dh:(h + 1) * dh, :] = torch.as_tensor(O.T, dtype=att.c_proj.weight.dtype)
    elif mt == "gpt_neox":  # fused query_key_value rows per head [q; k; v]; dense columns per head
        att = model.gpt_neox.layers[layer].attention
        W = att.query_key_value.weight

        def V(g):
            return W[g * 3 * dh + 2 * dh: g * 3 * dh + 3 * dh, :].T.double()

        def set_O(h, O):
            att.dense.weight[:, h * dh:(h + 1) * dh] = torch.as_tensor(O, dtype=att.dense.weight.dtype)
    else:  # separate v_proj / o_proj (Llama layout)
        att = model.model.layers[layer].self_attn

        def V(g):
            return att.v_proj.weight[g * dh:(g + 1) * dh, :].T.double()

        def set_O(h, O):
            att.o_proj.weight[:, h * dh:(h + 1) * dh] = torch.as_tensor(O, dtype=att.o_proj.weight.dtype)
    return V, set_O, H // G


def plant_closed_heads(model, shape: Shape, seed: int) -> list[tuple[int, int, float]]:
    """Near-closed heads (every 8th head of every layer, from head l mod 8): O_h = alpha V (V^T V)^-1
    + 5 % noise, so T_h^2 ~ alpha T_h. Returns (layer, head, alpha)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    planted = []
    with torch.no_grad():
        for layer in range(shape.layers):
            V, set_O, group = _attention_slices(model, shape, layer)
            for h in range(layer % 8 % shape.heads, shape.heads, 8):
                v = V(h // group)
                alpha = 0.5 + 1.5 * float(torch.rand(1, generator=gen))
                O = v @ torch.linalg.inv(v.T @ v) * alpha
                O = O + 0.05 * O.std() * torch.randn(O.shape, generator=gen, dtype=O.dtype)
                set_O(h, O.numpy())
                planted.append((layer, h, round(alpha, 4)))
    return planted


def perturb(model, scale: float, seed: int) -> None:
    """Every floating parameter += scale · its own SD · N(0, 1) (a later checkpoint's drift)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            if p.dtype.is_floating_point and p.numel() > 1:
                p.add_(scale * p.float().std() * torch.randn(p.shape, generator=gen).to(p.dtype))


def char_tokenizer(path: Path, text: str) -> int:
    """A word-level tokenizer over single characters (every character of the text), saved with
    transformers; returns the vocabulary size."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = sorted(set(text) - {"\n", "\r"} | set("abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ.,"))
    vocab = {"<unk>": 0, "<s>": 1, **{c: i + 2 for i, c in enumerate(chars)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", unk_token="<unk>").save_pretrained(path)
    return len(vocab)


def _build_model(shape: Shape, vocab: int, seed: int):
    import torch
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(tiny_config(shape, vocab)).to(torch.bfloat16).eval()


def plan_checkpoints(models: dict, lineages: dict[str, list[str]]) -> list[tuple[str, str | None, float, str]]:
    """(model, parent or None, perturbation scale, why) in build order: every base model
    first, then each instruct twin from its base and each earlier lineage checkpoint from its
    final model."""
    derived: dict[str, tuple[str, float, str]] = {}
    for final_of, members in lineages.items():
        final = members[-1]
        for i, m in enumerate(members[:-1]):
            derived[m] = (final, PERTURB_LINEAGE[i % len(PERTURB_LINEAGE)], f"lineage {final_of}, checkpoint {i + 1}")
    for name, e in models.items():
        twin = e.get("pair")
        if twin and "instruct" in name and name not in derived:
            derived[name] = (twin, PERTURB_PAIR, f"instruct twin of {twin}")
    out = [(m, None, 0.0, "base") for m in models if m not in derived]
    out += [(m, *derived[m]) for m in models if m in derived]
    return out


def _commit_for(repo_id: str, revision: str) -> str:
    if re.fullmatch(r"[0-9a-f]{40}", revision):
        return revision
    return hashlib.sha1(f"standin {repo_id}@{revision}".encode()).hexdigest()


def build(work: Path, models: dict, lineages: dict, text: str, log=print) -> dict:
    """Write every stand-in checkpoint under work/checkpoints/<model> and a manifest (shape,
    planted heads, parent) per model to work/standins.json; return the hub's repos
    ({repo_id: (commits, refs)})."""
    ckpt_root = work / "checkpoints"
    ckpt_root.mkdir(parents=True, exist_ok=True)
    final_of = {m: ms[-1] for ms in lineages.values() for m in ms}
    plan = plan_checkpoints(models, lineages)
    parents = {parent for _, parent, *_ in plan if parent is not None}
    built: dict[str, dict] = {}  # the weights and planted heads of each model another derives from
    manifest = {}
    for name, parent, scale, why in plan:
        e = models[name]
        shape = shape_for(name, e, final_of)
        out = ckpt_root / name
        t0 = time.perf_counter()
        vocab = char_tokenizer(out, text)
        if parent is None:
            model = _build_model(shape, vocab, _seed(name))
            planted = plant_closed_heads(model, shape, _seed(name, "plant"))
        else:
            model = _build_model(shape, vocab, _seed(parent))
            model.load_state_dict(built[parent]["state"])
            perturb(model, scale, _seed(name, "perturb"))
            planted = built[parent]["planted"]
        model.save_pretrained(out, safe_serialization=True)
        if name in parents:
            built[name] = {"state": {k: v.clone() for k, v in model.state_dict().items()}, "planted": planted}
        size = sum(f.stat().st_size for f in out.iterdir())
        manifest[name] = {"repo_id": e["repo_id"], "revision": e["revision"], "model_type": shape.model_type,
                          "layers": shape.layers, "heads": shape.heads, "kv_heads": shape.kv_heads, "d_head": D_HEAD,
                          "d_model": model.config.hidden_size if hasattr(model.config, "hidden_size") else None,
                          "ratio": shape.ratio, "from": parent, "scale": scale, "why": why,
                          "planted_heads": len(planted), "bytes": size}
        log(f"[standins] {name}: {shape.model_type}, {shape.layers} layers, {shape.heads} q / {shape.kv_heads} kv heads, "
            f"d_head {D_HEAD} ({why}; {len(planted)} planted heads; {size / 2**20:.1f} MiB; "
            f"{time.perf_counter() - t0:.1f} s)")
        del model
    repos: dict[str, tuple[dict, dict]] = {}
    for name in manifest:
        e = models[name]
        commits, refs = repos.setdefault(e["repo_id"], ({}, {}))
        sha = _commit_for(e["repo_id"], e["revision"])
        commits[sha] = ckpt_root / name
        if sha != e["revision"]:
            refs[e["revision"]] = sha
    for commits, refs in repos.values():
        refs.setdefault("main", next(iter(commits)))
    (work / "standins.json").write_text(json.dumps(manifest, indent=1))
    return repos


def run_config(models: dict, lineages: dict) -> dict:
    """The stand-in run's config, merged over config/models.yaml and config/paper.yaml."""
    cfg = copy.deepcopy(CUTS)
    cfg["active_models"] = list(models)
    cfg.setdefault("paper1", {})["lineages"] = lineages
    cfg["activation"] = {"enabled": True, "models": None}
    return cfg


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--work", default=str(ROOT / ".standins"), help="work directory (checkpoints, hub cache, results)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--build-only", action="store_true", help="build the checkpoints and stop")
    ap.add_argument("--models", nargs="*", help="only these models (and what they derive from)")
    ap.add_argument("snakemake_args", nargs="*", help="extra Snakemake arguments (after --)")
    args = ap.parse_args(argv)
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    models = yaml.safe_load((ROOT / "config" / "models.yaml").read_text())["models"]
    paper = yaml.safe_load((ROOT / "config" / "paper.yaml").read_text())
    lineages = {
        "pythia-2.8b-deduped": ["pythia-2.8b-deduped-step0", "pythia-2.8b-deduped-step1000",
                                "pythia-2.8b-deduped-step71000", "pythia-2.8b-deduped"],
        "olmo-1b": ["olmo-1b-step1000", "olmo-1b-step110000", "olmo-1b-step330000", "olmo-1b-step738020"],
        "tinyllama-1.1b": ["tinyllama-1.1b-step5k", "tinyllama-1.1b-step50k", "tinyllama-1.1b-step480k",
                           "tinyllama-1.1b"],
    }
    lineages = paper["paper1"].get("lineages") or lineages  # config/paper.yaml's, where it enables them
    if args.models:
        keep = set(args.models)
        models = {m: e for m, e in models.items() if m in keep}
        lineages = {k: v for k, v in lineages.items() if set(v) <= keep}
    from headgeom.io.texts import load_corpus

    text, _ = load_corpus("eb1911", {"source": "embedded", "name": "eb1911-shakespeare"})
    t0 = time.time()
    repos = build(work, models, lineages, text)
    print(f"[standins] built {len(models)} checkpoints in {time.time() - t0:.0f} s under {work / 'checkpoints'}",
          flush=True)
    if args.build_only:
        return 0
    cfg_path = work / "standins.yaml"
    cfg_path.write_text(yaml.safe_dump(run_config(models, lineages), sort_keys=False))
    from hubserver import MultiHub

    env = dict(os.environ, HF_HOME=str(work / "hf-home"), NO_PROXY="127.0.0.1,localhost", HF_HUB_DISABLE_TELEMETRY="1")
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_CACHE"):
        env.pop(var, None)
    snakemake = str(Path(sys.executable).with_name("snakemake"))
    with MultiHub(repos) as hub:
        env["HF_ENDPOINT"] = hub.endpoint
        cmd = [snakemake, "-s", str(ROOT / "Snakefile"), "-d", str(work), f"-c{args.cores}", "--keep-going", "--rerun-incomplete",
               "--configfile", str(ROOT / "config" / "models.yaml"), str(ROOT / "config" / "paper.yaml"), str(cfg_path),
               *args.snakemake_args]
        print("[standins] " + " ".join(cmd), flush=True)
        t1 = time.time()
        rc = subprocess.call(cmd, env=env, cwd=work)
        wall = time.time() - t1
        print(f"[standins] pipeline rc {rc}, {wall / 60:.1f} min; hub sent {hub.bytes_sent / 2**20:.1f} MiB", flush=True)
    claims = subprocess.run([str(Path(sys.executable).with_name("headgeom")), "claims", "-d", str(work),
                             "--format", "csv"], capture_output=True, text=True, cwd=ROOT)
    print(claims.stderr.strip())
    status = Counter(row["status"] for row in csv.DictReader(io.StringIO(claims.stdout)))
    print("[standins] ledger status: " + ", ".join(f"{k} {v}" for k, v in status.most_common()))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
