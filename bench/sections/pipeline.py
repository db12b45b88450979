"""``make bench`` sections ``fetch`` and ``overhead`` and the end-to-end run (``--e2e``): the pipeline's
own code paths (the fetch against a loopback hub, a job's start-up, whole Snakemake runs)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import ROOT, log


def bench_fetch(args) -> dict:
    """Bytes the loopback hub (tests/helpers/hubserver.py) sends for a fetch, over the bytes needed."""
    tmp = Path(tempfile.mkdtemp(prefix="headgeom-bench-fetch-"))
    home = tmp / "hf_home"
    os.environ.update(HF_HOME=str(home), HF_HUB_DISABLE_TELEMETRY="1", NO_PROXY="127.0.0.1,localhost")
    for var in ("HF_HUB_CACHE", "HF_HUB_OFFLINE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        os.environ.pop(var, None)
    from huggingface_hub import close_session, constants

    from headgeom.adapters import adapter_for
    from headgeom.io.fetch import fetch_model
    from hubserver import FakeHub
    from synth import write_llama

    constants.HF_HUB_OFFLINE = False
    constants.HF_HOME, constants.HF_HUB_CACHE = str(home), str(home / "hub")
    constants.HF_TOKEN_PATH, constants.HF_STORED_TOKENS_PATH = str(home / "token"), str(home / "stored_tokens")
    close_session()
    ckpt = tmp / "ckpt"
    shape = dict(d_model=256, n_heads=8, n_kv=2, d_head=32, n_layers=6)
    info = write_llama(ckpt, **shape, shards=3, extra_mlp=True, closed=())
    tensors, config = info["tensors"], info["config"]
    adapter = adapter_for(config, "safetensors")
    prefix = adapter.fields(config, list(tensors)).prefix
    need = [k for k in tensors if adapter.wanted(k, prefix)]
    need_bytes = sum(tensors[k].nbytes for k in need)
    ckpt_bytes = sum(p.stat().st_size for p in ckpt.glob("*.safetensors"))
    repo, sha = "bench-org/tiny-llama", "be" * 20
    fake = FakeHub(repo, {sha: ckpt})
    constants.ENDPOINT = fake.endpoint
    constants.HUGGINGFACE_CO_URL_TEMPLATE = fake.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    try:
        fake.reset()
        t0 = time.perf_counter()
        m = fetch_model("bench", {"source": "hf", "repo_id": repo, "revision": "main"}, tmp / "store", log=lambda s: None)
        wall = time.perf_counter() - t0
        sent = fake.repo_bytes_sent
        by_kind = dict(fake.sent_by_kind)
        n_req = len([r for r in fake.requests if r["server"] in ("hub", "cdn") and r["path"] != "/api/agent-harnesses"])
    finally:
        fake.close()
        shutil.rmtree(tmp, ignore_errors=True)
    res = {
        "checkpoint": {**shape, "shards": 3, "mlp": True, "dtype": "float32"},
        "bytes_needed": need_bytes,
        "bytes_transferred": sent,
        "bytes_by_kind": by_kind,
        "checkpoint_bytes": ckpt_bytes,
        "requests": n_req,
        "ratio_transferred_over_needed": sent / need_bytes,
        "share_of_checkpoint": sent / ckpt_bytes,
        "client_bytes_fetched": m["source"]["bytes_fetched"],
        "wall_s": wall,
    }
    log(f"fetch: {sent} bytes sent for {need_bytes} needed ({sent / need_bytes:.4f}x), "
        f"{100 * sent / ckpt_bytes:.1f}% of the checkpoint")
    return res


def bench_overhead(args) -> dict:
    """What a `make run` job pays before its work (bench/job_overhead.py: Snakemake's scheduling,
    the script preamble, the interpreter, the job's imports), per job, on throw-away workflows."""
    out = Path(args.out) / "job_overhead.json"
    log("overhead: bench/job_overhead.py --jobs 20")
    subprocess.run([sys.executable, str(ROOT / "bench" / "job_overhead.py"), "--jobs", "20", "--out", str(out)],
                   check=True, capture_output=True)
    return json.loads(out.read_text())


def bench_e2e(args) -> dict:
    """Cold `make run`: the pipeline in a fresh working directory (the default config, every
    target), as a clean clone's `make run` after the environment is installed; with --paper, then
    `--configfile config/paper.yaml` on its outputs (the papers' design, choice_sensitivity included)."""
    work = Path(tempfile.mkdtemp(prefix="headgeom-bench-e2e-"))
    cmd = [str(Path(sys.executable).parent / "snakemake"), f"-c{args.cores}", "-s", str(ROOT / "Snakefile"), "-d", str(work)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}
    log(f"e2e: {' '.join(cmd)}")
    res = _timed_run(cmd, env, work)
    res["cores"] = args.cores
    log(f"e2e: rc {res['returncode']}, {res['wall_s']:.1f}s, {res['jobs']} jobs")
    failed = res["returncode"] != 0
    if not failed and getattr(args, "paper", False):
        pcmd = cmd + ["--configfile", str(ROOT / "config" / "paper.yaml")]
        log(f"e2e paper: {' '.join(pcmd)}")
        res["paper"] = _timed_run(pcmd, env, work)
        failed = res["paper"]["returncode"] != 0
        log(f"e2e paper: rc {res['paper']['returncode']}, {res['paper']['wall_s']:.1f}s, {res['paper']['jobs']} jobs")
    if not failed:  # a failed run's work directory is kept for a look
        shutil.rmtree(work, ignore_errors=True)
        res["workdir"] = None
    return res


def _timed_run(cmd, env, work) -> dict:
    """One Snakemake run in ``work``: wall time, job count, and where its seconds went per rule
    from its own logs (headgeom timings)."""
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t0
    text = r.stdout + r.stderr
    steps = re.findall(r"(\d+) of (\d+) steps \(100%\) done", text)
    res = {"command": " ".join(cmd), "returncode": r.returncode, "wall_s": wall,
           "jobs": int(steps[-1][1]) if steps else None, "workdir": str(work)}
    try:
        from headgeom.commands.timings import render, timings

        rows, runlog = timings(work)
        res["rules"] = rows
        res["rules_markdown"] = render(rows, runlog)
    except Exception as e:  # noqa: BLE001 - a failed run may have no log to read
        res["rules_error"] = str(e)
    if r.returncode != 0:
        res["tail"] = text[-3000:]
    return res
