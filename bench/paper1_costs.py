"""Time and peak memory of paper 1's per-layer jobs at one layer shape, on synthetic tensors.

    .venv/bin/python bench/paper1_costs.py                      # Qwen3-235B-A22B layer shape
    .venv/bin/python bench/paper1_costs.py --restarts 8 --iters 100 --method lbfgs --tol 1e-6 --window 10 \
        --jobs capacity                                         # config/paper.yaml capacity

Writes a one-layer Llama-layout checkpoint (float32) with ``--strong`` exactly closed heads
(so the capacity job has strong, matched and sampled heads), fetches it into a tensor store
like the pipeline does, then runs each job the way Snakemake does: a fresh Python process with
one BLAS thread. Reports wall time, CPU time (user + sys: the cost on a loaded machine) and peak
resident memory (ru_maxrss) per job."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

QWEN3_235B = dict(d_model=4096, d_head=128, heads=64, kv=4)

_CHILD = r"""
import json, resource, sys, time
t0 = time.perf_counter()
from headgeom.jobs import paper1 as paper1_jobs
kind, store, out, params = sys.argv[1], sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
if kind == "heads":
    paper1_jobs.heads_job(store, 0, out + "/h.parquet", out + "/p.parquet", params, log=lambda m: None)
else:
    paper1_jobs.capacity_job(store, store, 0, out + "/c.parquet", params, log=lambda m: None)
ru = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": ru.ru_utime + ru.ru_stime, "maxrss_mb": ru.ru_maxrss / 1024}))
"""


def write_checkpoint(path: Path, d_model: int, d_head: int, heads: int, kv: int, strong: int, seed: int = 0) -> None:
    from safetensors.numpy import save_file

    rng = np.random.default_rng(seed)
    path.mkdir(parents=True, exist_ok=True)
    s = 1 / np.sqrt(d_model)
    WV = rng.standard_normal((kv * d_head, d_model)) * s
    WO = rng.standard_normal((d_model, heads * d_head)) * s
    group = heads // kv
    for h in range(strong):  # spread the closed heads over the groups
        h = (h * group + h // kv) % heads
        V = WV[(h // group) * d_head:(h // group + 1) * d_head].T
        WO[:, h * d_head:(h + 1) * d_head] = V @ np.linalg.inv(V.T @ V) * (1.0 if h % 2 else -0.5)
    p = "model.layers.0."
    tensors = {
        p + "self_attn.q_proj.weight": rng.standard_normal((heads * d_head, d_model)) * s,
        p + "self_attn.k_proj.weight": rng.standard_normal((kv * d_head, d_model)) * s,
        p + "self_attn.v_proj.weight": WV,
        p + "self_attn.o_proj.weight": WO,
        p + "input_layernorm.weight": np.ones(d_model),
        "model.embed_tokens.weight": rng.standard_normal((16, d_model)),
    }
    save_file({k: np.ascontiguousarray(v, dtype=np.float32) for k, v in tensors.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps({
        "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": d_model,
        "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": d_head, "num_hidden_layers": 1,
        "rms_norm_eps": 1e-6, "vocab_size": 16, "intermediate_size": 4 * d_model,
    }))


def run_job(kind: str, store: Path, out: Path, params: dict) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-c", _CHILD, kind, str(store), str(out), json.dumps(params)],
                       capture_output=True, text=True, env=env, check=True)
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    for k, v in QWEN3_235B.items():
        ap.add_argument(f"--{k.replace('_', '-')}", type=int, default=v)
    ap.add_argument("--strong", type=int, default=8, help="exactly closed heads planted in the layer")
    ap.add_argument("--restarts", type=int, default=2)
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--method", default="gradient", choices=["gradient", "lbfgs"], help="paper1.capacity.method")
    ap.add_argument("--tol", type=float, default=0.0, help="paper1.capacity.tol (0: every start runs --iters steps)")
    ap.add_argument("--window", type=int, default=0, help="paper1.capacity.window")
    ap.add_argument("--scramble-draws", type=int, default=8)
    ap.add_argument("--haar-draws", type=int, default=2)
    ap.add_argument("--jobs", default="heads,capacity")
    a = ap.parse_args(argv)
    from headgeom.io.fetch import fetch_model
    from headgeom.io.shards import read_shard

    with tempfile.TemporaryDirectory(prefix="headgeom-bench-") as tmp:
        tmp = Path(tmp)
        write_checkpoint(tmp / "ckpt", a.d_model, a.d_head, a.heads, a.kv, a.strong)
        fetch_model("bench", {"source": "local", "path": str(tmp / "ckpt")}, tmp / "store", log=lambda m: None)
        common = {"rank_rtol": 1e-6, "identity_rtol": 1e-10, "scramble_draws": a.scramble_draws, "sv_rtol": 1e-12}
        params = {
            "heads": {**common, "haar_draws": a.haar_draws, "split_rtol": 1e-8},
            "capacity": {**common, "strong_threshold": 0.9, "restarts": a.restarts, "iters": a.iters,
                         "method": a.method, "tol": a.tol, "window": a.window, "sample_per_layer": 2, "final_model": "bench"},
        }
        print(f"layer shape: d_model {a.d_model}, d_head {a.d_head}, {a.heads} heads, {a.kv} KV groups; "
              f"{a.strong} planted closed heads; one BLAS thread per job")
        for kind in a.jobs.split(","):
            res = run_job(kind, tmp / "store", tmp, params[kind])
            extra = ""
            if kind == "capacity":
                t, _ = read_shard(tmp / "c.parquet")
                n = t.num_rows
                extra = (f"; {n} heads selected ({a.restarts} restarts x {a.iters} iters, {a.method}): "
                         f"{res['wall_s'] / max(n, 1):.2f} s/head wall, {res['cpu_s'] / max(n, 1):.2f} CPU-s/head")
            print(f"{kind:9s} wall {res['wall_s']:7.1f} s   CPU {res['cpu_s']:7.1f} s   peak RSS {res['maxrss_mb']:7.0f} MB{extra}")


if __name__ == "__main__":
    main()
