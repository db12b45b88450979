"""Every job kind at a paper model's full width, as a cluster runs it: measured CPU time, wall
time and peak RSS beside the runtime / mem_mb Snakemake requests (what SLURM enforces).

    .venv/bin/python bench/fullwidth.py write [--dir .fullwidth] [--one-file]   # the checkpoint (~1.6 GB)
    .venv/bin/python bench/fullwidth.py run   [--dir .fullwidth] [--one-file] [--jobs fetch,pk_within_layer,...]
    make bench-fullwidth [FULLWIDTH_DIR=...] [FULLWIDTH_ARGS=...]                # both

``write`` builds an attention-only checkpoint with Qwen2.5-7B's exact attention shapes (28
layers, d_model 3584, 28 q / 4 kv heads, d_head 128, q/k/v biases, bfloat16) and its file
layout: the real repository's four ``model-0000k-of-00004.safetensors`` files and
``model.safetensors.index.json``. Which file holds a tensor follows save_pretrained's 4 GB
sharding over the full model's tensors in module order (embeddings, then each layer's
attention, MLP and norms, then the final norm and the LM head); that reproduces the real files'
sizes (3,945 / 3,865 / 3,865 / 3,556 MB) to within their headers. Only the tensors the fetch
reads are written (q/k/v/o weights and biases, input_layernorm), random normal, seed 0.
``--one-file`` writes the same tensors as one ``model.safetensors`` (the fetch's peak must not
depend on the layout).

``run`` runs the fetch and one job of each kind alone through Snakemake (``--cores 1``, nice, one
BLAS thread) under config/paper.yaml's design for the model (10 within-layer null samples per job, one cross-layer sample) with the
fan-out ceiling lowered to ``--ceiling`` minutes (default 10) so that the cross-layer parts run in
minutes; each part is still requested at its own price. A fanned-out kind runs the part that reads
the most layers and the part with the fewest pairs. The process tree's resident memory and CPU
time are sampled every 0.2 s and printed beside the request read from a dry run, with the bounds
(no job above its request, every request at least 1.3 x the job's CPU time and peak memory; no request above 2 x the peak memory, or 3 x the CPU time where it is
above the runtime floor). Results go to results/bench/fullwidth.json; exit status 1 when a job is
above its request or has less than 1.3 x its measured time or peak memory to spare (HEADROOM). A run
starts without the shards of an earlier one in its directory (it keeps the fetched store)."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))  # the test fixtures the bench shares (tests/helpers/: dryrun.py)
from dryrun import dry_run_requests  # noqa: E402  (the dry-run parser the plan test uses)

DEFAULT_DIR = ROOT / ".fullwidth"
MODEL = "qwen2.5-7b"

# Qwen2.5-7B (config.json of Qwen/Qwen2.5-7B)
QWEN7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 3584,
    "intermediate_size": 18944, "num_hidden_layers": 28, "num_attention_heads": 28,
    "num_key_value_heads": 4, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6,
    "rope_theta": 1000000.0, "vocab_size": 152064, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "hidden_act": "silu", "sliding_window": 131072,
    "use_sliding_window": False, "max_window_layers": 28, "attention_dropout": 0.0,
}
MAX_SHARD_BYTES = 4 * 10**9  # save_pretrained(max_shard_size="4GB")


def full_model_tensors(c: dict) -> list[tuple[str, tuple, bool]]:
    """(name, shape, read by the fetch) of every tensor of the full model, in module order."""
    D, H, G, L = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"], c["num_hidden_layers"]
    d, F, V = D // H, c["intermediate_size"], c["vocab_size"]
    out = [("model.embed_tokens.weight", (V, D), False)]
    for l in range(L):
        p = f"model.layers.{l}."
        out += [(p + "self_attn.q_proj.weight", (H * d, D), True), (p + "self_attn.q_proj.bias", (H * d,), True),
                (p + "self_attn.k_proj.weight", (G * d, D), True), (p + "self_attn.k_proj.bias", (G * d,), True),
                (p + "self_attn.v_proj.weight", (G * d, D), True), (p + "self_attn.v_proj.bias", (G * d,), True),
                (p + "self_attn.o_proj.weight", (D, H * d), True),
                (p + "mlp.gate_proj.weight", (F, D), False), (p + "mlp.up_proj.weight", (F, D), False),
                (p + "mlp.down_proj.weight", (D, F), False),
                (p + "input_layernorm.weight", (D,), True), (p + "post_attention_layernorm.weight", (D,), False)]
    return out + [("model.norm.weight", (D,), False), ("lm_head.weight", (V, D), False)]


def shard_layout(tensors, max_bytes: int = MAX_SHARD_BYTES, itemsize: int = 2) -> tuple[dict, list[int]]:
    """name -> file index, and each file's data bytes: a new file starts when the next tensor
    would take the current one past ``max_bytes`` (save_pretrained's rule)."""
    where, sizes = {}, [0]
    for name, shape, _ in tensors:
        n = itemsize
        for s in shape:
            n *= s
        if sizes[-1] and sizes[-1] + n > max_bytes:
            sizes.append(0)
        where[name] = len(sizes) - 1
        sizes[-1] += n
    return where, sizes


def write_checkpoint(out: Path, seed: int = 0, one_file: bool = False) -> Path:
    """The attention-only Qwen2.5-7B-shaped checkpoint in ``out/ckpt`` (atomic: built aside,
    renamed); ``one_file``: the same tensors in one ``model.safetensors``, in ``out/ckpt-one-file``."""
    import torch
    from safetensors.torch import save_file

    ckpt = out / ("ckpt-one-file" if one_file else "ckpt")
    if (ckpt / "config.json").exists():
        print(f"{ckpt}: already written")
        return ckpt
    tmp = out / f"{ckpt.name}.partial"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    tensors = full_model_tensors(QWEN7B)
    where, sizes = shard_layout(tensors, 2**62 if one_file else MAX_SHARD_BYTES)
    n = len(sizes)
    names = ["model.safetensors"] if one_file else [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
    print("full model's files (MB):", " / ".join(f"{s / 1e6:,.0f}" for s in sizes))
    gen = torch.Generator().manual_seed(seed)
    weight_map = {}
    for i, fn in enumerate(names):
        part = {}
        for name, shape, read in tensors:
            if read and where[name] == i:
                scale = 1.0 if name.endswith("layernorm.weight") else 0.02
                t = torch.randn(shape, generator=gen, dtype=torch.float32) * scale
                part[name] = (t + 1.0 if name.endswith("layernorm.weight") else t).to(torch.bfloat16)
                weight_map[name] = fn
        save_file(part, str(tmp / fn), metadata={"format": "pt"})
        print(f"{fn}: {len(part)} tensors, {(tmp / fn).stat().st_size / 1e6:,.0f} MB", flush=True)
        del part
    total = sum((tmp / fn).stat().st_size for fn in names)
    if not one_file:
        (tmp / "model.safetensors.index.json").write_text(
            json.dumps({"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2) + "\n")
    (tmp / "config.json").write_text(json.dumps(QWEN7B, indent=2) + "\n")
    shutil.rmtree(ckpt, ignore_errors=True)
    tmp.rename(ckpt)
    return ckpt


# ---------------------------------------------------------------------------------- the runs

JOB_KINDS = ("fetch", "pk_within_layer", "pk_null_within", "pk_cross_layer", "pk_null_cross", "paper1_heads",
             "paper1_capacity")
# one BLAS thread, and each job in its own process as under SLURM (no local job server: its forked jobs
# would share the server's pages, which the process tree's RSS counts twice)
BLAS1 = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HEADGEOM_NO_JOB_SERVER": "1"}


def _config(out: Path, ckpt: Path, ceiling: float) -> Path:
    """The model under config/paper.yaml's design (its design for qwen2.5-7b: Q and K within-layer
    nulls, cross-layer nulls) and paper 1's per-layer jobs at that paper's settings, read from the
    local checkpoint; no activation stage (a 7B forward pass needs 28 GB); the fan-out
    ceiling lowered so that the cross-layer parts run in minutes (each part is still requested at
    its own price: what the check is about)."""
    import yaml

    cfg = {
        "models": {MODEL: {"source": "local", "path": str(ckpt), "architecture": "qwen2", "tables": [],
                           "notes": "bench/fullwidth.py: random weights, Qwen2.5-7B's attention shapes"}},
        "active_models": [MODEL],
        "activation": {"enabled": False},
        "designs": {MODEL: {"stages": ["pk", "paper1"], "fanout": {"max_job_minutes": ceiling}}},  # over the design's own
        "fanout": {"max_job_minutes": ceiling},
        # each job runs on one core here (--cores 1): the cross-layer null jobs laid out and requested for one
        # (config/paper.yaml gives them 16, whose wall-clock request a one-core run would overrun)
        "pk": {"nulls": {"cross_threads": 1}},
    }
    path = out / "bench-config.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path


def _snakemake_cmd(work: Path, cfg: Path, *args, targets=()) -> list[str]:
    return ["nice", "-n", "5", str(ROOT / ".venv/bin/snakemake"), "-s", str(ROOT / "Snakefile"), "-d", str(work),
            "--cores", "1", "--nolock", "--rerun-triggers", "mtime", *args,
            "--configfile", str(ROOT / "config/paper.yaml"), str(cfg), *(("--", *targets) if targets else ())]


def _requests(work: Path, cfg: Path, *args, targets=()) -> dict:
    """output -> {rule, mem_mb, runtime} of every job of a dry run (default: the design, all forced)."""
    args = args or ("--forcerun", *JOB_KINDS[1:])  # not the fetch: a checkpoint, its jobs unknown until it ran
    r = subprocess.run(_snakemake_cmd(work, cfg, "-n", *args, targets=targets), text=True, capture_output=True,
                       env={**os.environ, **BLAS1})
    jobs = dry_run_requests(r.stdout + r.stderr)
    if not jobs:
        raise SystemExit(f"dry run listed no jobs:\n{(r.stdout + r.stderr)[-3000:]}")
    return jobs


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


TICK = os.sysconf("SC_CLK_TCK")


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 once it is gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (OSError, IndexError, ValueError):
        return 0.0


def _descendants(pid: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                ppid = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            kids.setdefault(ppid, []).append(int(p.name))
    out, todo = [], list(kids.get(pid, []))
    while todo:
        q = todo.pop()
        out.append(q)
        todo += kids.get(q, [])
    return out


def run_one(work: Path, cfg: Path, target: str, rule: str, period: float = 0.2) -> dict:
    """One job through Snakemake, its process tree's resident memory sampled every ``period`` s:
    ``peak_rss_mib`` is the tree's (Snakemake's process and the job's, as a SLURM job step's
    cgroup holds both), ``job_rss_mib`` the job's own processes alone; ``wall_s`` Snakemake's whole
    invocation (what a runtime limit covers), ``job_s`` the job's own processes' lifetime, ``cpu_s``
    the CPU seconds of the whole tree (Snakemake's start-up included): on a shared machine the wall
    time is the load's, the CPU time what one idle core would take."""
    # --force reruns the target alone (--forcerun would also rerun whatever outputs of an earlier run read it)
    cmd = _snakemake_cmd(work, cfg, "--force", "--allowed-rules", rule, targets=(target,))
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, env={**os.environ, **BLAS1}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    peak, job_peak, job_t0, job_t1, cpu = 0, 0, None, None, {}
    while p.poll() is None:
        kids = _descendants(p.pid)
        for q in [p.pid, *kids]:
            cpu[q] = max(cpu.get(q, 0.0), _cpu_s(q))
        job = sum(_rss_kib(k) for k in kids)
        if job:
            job_t0 = job_t0 or time.perf_counter()
            job_t1 = time.perf_counter()
        job_peak = max(job_peak, job)
        peak = max(peak, _rss_kib(p.pid) + job)
        time.sleep(period)
    out = p.stdout.read()
    wall = time.perf_counter() - t0
    if p.returncode:
        raise SystemExit(f"{target}: snakemake failed\n{out[-4000:]}")
    return {"wall_s": round(wall, 1), "job_s": round((job_t1 or t0) - (job_t0 or t0), 1),
            "cpu_s": round(sum(cpu.values()), 1),
            "peak_rss_mib": round(peak / 1024), "job_rss_mib": round(job_peak / 1024)}


def _chosen(requests: dict, kinds, fields: dict, config: dict) -> list[tuple[str, dict]]:
    """One job of each per-layer kind (layer 0, block 0); of a fanned-out kind (block 0) the part
    that reads the most layers (its memory) and the one with the fewest layer pairs."""
    from headgeom.schedule import fanout
    from headgeom.schedule.families import JOBS

    out = []
    for kind in kinds:
        jobs = {o: j for o, j in requests.items() if j["rule"] == kind}
        if not jobs:
            continue
        if not JOBS[kind].fanout:
            out.append(min(jobs.items(), key=lambda oj: (len(oj[0]), oj[0])))
            continue
        parts = fanout.parts(JOBS[kind], fields, config)
        read = [len({l for w, r0, r1 in p for l in (w, *range(r0, r1))}) for p in parts]
        big = max(range(len(parts)), key=lambda i: (read[i], fanout.n_pairs(parts[i])))
        small = min(range(len(parts)), key=lambda i: (fanout.n_pairs(parts[i]), read[i]))
        for i in dict.fromkeys((big, small)):
            o = next(o for o in jobs if re.search(rf"(block0/)?part{i}\.parquet$", o)
                     and ("/block" not in o or "/block0/" in o))
            out.append((o, {**jobs[o], "pairs": fanout.n_pairs(parts[i]), "layers_read": read[i]}))
    return out


HEADROOM = 1.3  # every request at least this many times the job's measured CPU time and peak memory


def headroom(m: dict) -> tuple[float, float]:
    """(requested time / CPU time, requested memory / peak RSS) of a measured job."""
    return 60 * m["runtime"] / max(m["cpu_s"], 1e-9), m["mem_mb"] / max(m["peak_rss_mib"], 1e-9)


def bounds(m: dict, floor: int) -> str:
    """Whether a measurement is inside its request with HEADROOM to spare (load or a slower node does
    not kill it), and the request within 2x memory / 3x time (time: the CPU seconds, what the job
    takes with a core of its own; above the runtime floor)."""
    flags = []
    t, mem = headroom(m)
    if m["peak_rss_mib"] > m["mem_mb"]:  # SLURM's --mem (Snakemake's mem_mb) counts MiB
        flags.append("OVER MEMORY")
    elif mem < HEADROOM:
        flags.append(f"UNDER HEADROOM memory {mem:.2f}x")
    if m["cpu_s"] > 60 * m["runtime"]:
        flags.append("OVER TIME")
    elif t < HEADROOM:
        flags.append(f"UNDER HEADROOM time {t:.2f}x")
    if m["mem_mb"] > 2 * m["peak_rss_mib"]:
        flags.append("mem > 2x")
    if m["runtime"] > floor and 60 * m["runtime"] > 3 * m["cpu_s"]:
        flags.append("time > 3x")
    return ", ".join(flags) or "ok"


def run(out: Path, ckpt: Path, kinds, ceiling: float, result: Path) -> list[dict]:
    from headgeom.schedule.costs import MIN_RUNTIME

    gemm = [node_gemm_gflops()]
    work = out / ("run" if ckpt.name == "ckpt" else f"run-{ckpt.name}")
    work.mkdir(parents=True, exist_ok=True)
    # an earlier run's shards are not this run's files once the code or the config lays them out otherwise (the
    # fan-out, a block's samples): the workflow would rebuild them inside the first measured job's window
    # (headgeom.rules.start.rebuild_damaged). Every job here is rerun with --force, so none is kept.
    shutil.rmtree(work / "results" / "shards", ignore_errors=True)
    cfg = _config(work, ckpt, ceiling)
    manifest = f"results/tensors/{MODEL}/manifest.json"
    rows = []
    if "fetch" in kinds or not (work / manifest).exists():
        req = _requests_fetch(work, cfg, manifest)
        rows.append({"job": "fetch", "output": manifest, **req, **run_one(work, cfg, manifest, "fetch")})
        print(_line(rows[-1], MIN_RUNTIME), flush=True)
    requests = _requests(work, cfg)
    from headgeom.core.config import load_config
    from headgeom.schedule import designs

    config = designs.model_config(load_config([ROOT / "config/paper.yaml", cfg]), MODEL)
    fields = json.loads((work / manifest).read_text())["fields"]
    for o, j in _chosen(requests, [k for k in kinds if k != "fetch"], fields, config):
        rows.append({"job": j["rule"], "output": o, **{k: j[k] for k in ("mem_mb", "runtime", "pairs", "layers_read")
                                                          if k in j}, **run_one(work, cfg, o, j["rule"])})
        print(_line(rows[-1], MIN_RUNTIME), flush=True)
    for r in rows:
        r["bounds"] = bounds(r, MIN_RUNTIME)
    gemm.append(node_gemm_gflops())
    result.parent.mkdir(parents=True, exist_ok=True)
    result.write_text(json.dumps({"checkpoint": str(ckpt), "ceiling_min": ceiling, "load_avg": os.getloadavg(),
                                  "gemm_gflops": gemm, "jobs": rows}, indent=1) + "\n")
    print()
    print(table(rows, MIN_RUNTIME))
    print(node_line(gemm))
    return rows


def node_gemm_gflops() -> float:
    """This node's one-thread float64 GEMM rate (GFLOP/s), in a process of its own as a job's BLAS runs."""
    code = ("import sys, time; sys.path[:0] = [sys.argv[1], sys.argv[1] + '/bench']; "
            "from bench.null_cross_routes import gemm_rate; import numpy as np; "
            "print(gemm_rate(np.float64, 3, clock=time.process_time) / 1e9)")
    r = subprocess.run([sys.executable, "-c", code, str(ROOT)], capture_output=True, text=True, check=True,
                       env={**os.environ, **BLAS1})
    return float(r.stdout.strip().splitlines()[-1])


def node_line(gemm) -> str:
    """The node's GEMM rate beside the rates the requests are priced for."""
    from headgeom.methods.projectors import GEMM_FLOPS, SLOWEST_GEMM_FLOPS

    return (f"this node's one-thread float64 GEMM: {min(gemm):.1f}-{max(gemm):.1f} GFLOP/s (before and after the jobs); "
            f"the expected work is priced at {GEMM_FLOPS / 1e9:.0f}, the requests for a node of "
            f"{SLOWEST_GEMM_FLOPS / 1e9:.0f} (headgeom.methods.projectors)")


def _requests_fetch(work: Path, cfg: Path, manifest: str) -> dict:
    req = _requests(work, cfg, "--forcerun", manifest, targets=(manifest,))[manifest]
    return {"mem_mb": req["mem_mb"], "runtime": req["runtime"]}


def _line(r: dict, floor: int) -> str:
    t, mem = headroom(r)
    return (f"{r['job']:<16} {r['output']}: CPU {r['cpu_s']:.0f} s, wall {r['wall_s']:.0f} s (job {r['job_s']:.0f} s), peak RSS "
            f"{r['peak_rss_mib']} MiB (job {r['job_rss_mib']} MiB); requested {r['runtime']} min / "
            f"{r['mem_mb']} MB (headroom {t:.2f}x time, {mem:.2f}x memory): {bounds(r, floor)}")


def table(rows, floor: int) -> str:
    lines = ["| job | output | CPU | wall (job) | peak RSS (job) | requested | headroom time / memory | |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        t, mem = headroom(r)
        lines.append(f"| {r['job']} | {r['output'].split('/', 2)[-1]} | {r['cpu_s']:.0f} s | {r['wall_s']:.0f} s ({r['job_s']:.0f} s) | "
                     f"{r['peak_rss_mib']:,} MiB ({r['job_rss_mib']:,}) | {r['runtime']} min / {r['mem_mb']:,} MB | "
                     f"{t:.2f}x / {mem:.2f}x | {bounds(r, floor)} |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=("write", "run", "all"))
    ap.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    ap.add_argument("--jobs", default=",".join(JOB_KINDS))
    ap.add_argument("--ceiling", type=float, default=10.0,
                    help="fanout.max_job_minutes for the run (minutes; default 10: parts of a few minutes)")
    ap.add_argument("--one-file", action="store_true",
                    help="the same tensors in one model.safetensors (the fetch's peak must not depend on the layout)")
    ap.add_argument("--out", type=Path, default=None, help="default: results/bench/fullwidth[-one-file].json")
    a = ap.parse_args()
    a.dir = a.dir.resolve()  # the config names the checkpoint by path; the run reads it from its own work directory
    ckpt = write_checkpoint(a.dir, one_file=a.one_file)
    a.out = a.out or ROOT / f"results/bench/fullwidth{'-one-file' if a.one_file else ''}.json"
    if a.what in ("run", "all"):
        rows = run(a.dir, ckpt, a.jobs.split(","), a.ceiling, a.out)
        bad = [r for r in rows if "OVER" in r["bounds"] or "UNDER HEADROOM" in r["bounds"]]
        sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
