"""``headgeom costs``: the SLURM plugin's efficiency report beside the cost model.

The profile writes ``logs/slurm/efficiency_report_<run>.csv`` (``slurm-efficiency-report``): one
row per job step with its rule and wildcards (``RuleName`` = ``rule_<rule>_wildcards_<values>``,
the values joined by ``_`` in the order of the output pattern), ``Elapsed_sec``, ``MaxRSS_MB`` and
``RequestedMem_MB``. For every per-layer job of the shard-family registry this module recomputes
the request of its cost model (the same call the rules make, from the fetched manifest) and
reports, per rule, how the measured time and memory compare with it: a ratio near 1/SAFETY means
the model is right; above 1 the job outgrew its request (and was killed or retried)."""

from __future__ import annotations

import csv
import re
import statistics
from pathlib import Path

from headgeom import layout
from headgeom.core.errors import ConfigError
from headgeom.schedule.families import JOBS


def parse_rule(comment: str) -> tuple[str, dict] | None:
    """(rule, wildcards) of a registry job from the plugin's comment string; None for others."""
    for name, job in JOBS.items():
        prefix = f"rule_{name}_wildcards_"
        if not comment.startswith(prefix):
            continue
        names = re.findall(r"\{(\w+)\}", job.families[0].path)  # model first, then integers
        values = comment[len(prefix):].split("_")
        k = len(names) - 1
        if len(values) <= k or not all(v.isdigit() for v in values[len(values) - k:]):
            raise ConfigError(f"efficiency report: cannot read wildcards {names} from {comment!r}")
        rest = values[len(values) - k:] if k else []
        return name, {"model": "_".join(values[:len(values) - k]), **dict(zip(names[1:], rest))}
    return None


def compare(report, workdir=".", config: dict | None = None) -> dict:
    """Per rule: the report's jobs beside their cost-model requests."""
    from headgeom.core.config import load_config

    config = config or load_config()
    rows = {}
    with open(report, newline="") as fh:
        for r in csv.DictReader(fh):
            parsed = parse_rule(r.get("RuleName", ""))
            if parsed is None:
                continue
            rule, wc = parsed
            manifest = Path(workdir) / layout.manifest(wc["model"])
            if not manifest.exists():
                raise ConfigError(f"efficiency report: no manifest {manifest} (run `headgeom costs` in the work "
                                  "directory, or pass -d)")
            model = JOBS[rule].cost(manifest, config, wc)
            elapsed_min = float(r["Elapsed_sec"] or 0) / 60
            rss = float(r["MaxRSS_MB"] or 0)
            req = float(r["RequestedMem_MB"] or 0)
            rows.setdefault(rule, []).append({
                "job": r.get("JobID", ""), "wildcards": wc, "elapsed_min": elapsed_min, "max_rss_mb": rss,
                "requested_mem_mb": req, "model_runtime_min": model["runtime"], "model_mem_mb": model["mem_mb"],
                "attempt": round(req / model["mem_mb"]) if req else None,
                "time_ratio": elapsed_min / model["runtime"], "mem_ratio": rss / model["mem_mb"],
            })
    out = {}
    for rule, rs in rows.items():
        out[rule] = {
            "jobs": len(rs),
            "elapsed_median_min": statistics.median(r["elapsed_min"] for r in rs),
            "elapsed_max_min": max(r["elapsed_min"] for r in rs),
            "model_runtime_max_min": max(r["model_runtime_min"] for r in rs),
            "time_ratio_max": max(r["time_ratio"] for r in rs),
            "rss_max_mb": max(r["max_rss_mb"] for r in rs),
            "model_mem_max_mb": max(r["model_mem_mb"] for r in rs),
            "mem_ratio_max": max(r["mem_ratio"] for r in rs),
            "over": [r for r in rs if r["time_ratio"] > 1 or r["mem_ratio"] > 1],
            "retried": sum(1 for r in rs if (r["attempt"] or 1) > 1),
        }
    return out


def render(res: dict) -> str:
    lines = [f"{'rule':<18}{'jobs':>6}{'elapsed med/max (min)':>24}{'model (min)':>13}{'t/model':>9}"
             f"{'MaxRSS (MB)':>13}{'model (MB)':>12}{'rss/model':>11}{'retried':>9}{'over':>6}"]
    for rule, r in res.items():
        lines.append(f"{rule:<18}{r['jobs']:>6}{r['elapsed_median_min']:>12.2f} / {r['elapsed_max_min']:<9.2f}"
                     f"{r['model_runtime_max_min']:>13}{r['time_ratio_max']:>9.2f}{r['rss_max_mb']:>13.0f}"
                     f"{r['model_mem_max_mb']:>12}{r['mem_ratio_max']:>11.2f}{r['retried']:>9}{len(r['over']):>6}")
        for o in r["over"][:5]:
            lines.append(f"    over its request: job {o['job']} {o['wildcards']}: {o['elapsed_min']:.1f} of "
                         f"{o['model_runtime_min']} min, {o['max_rss_mb']:.0f} of {o['model_mem_mb']} MB")
    return "\n".join(lines) + "\n"
