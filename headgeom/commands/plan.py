"""``headgeom plan``: what the per-layer jobs of a config will cost, before fetching weights.

For every active model the plan lists the jobs the workflow generates from the shard-family
registry (headgeom.schedule.families: same designs, blocks and fan-out parts as
headgeom/rules/jobs.py) with the resources the rules request (each job's cost model, the
same call the rules make), and estimates the wall-clock on N cores by list-scheduling the jobs
longest first (each job holds its cores, one but for pk_null_cross under pk.nulls.cross_threads;
fetch, then the per-layer jobs, which are independent; aggregation is local and not counted):
as expected (each job its expected work) and at most (each job its whole request). The choice sensitivity's jobs are priced too:
one per alternative of each switch (headgeom.publish.choice_sensitivity.planned, its cost model
``alternative_cost``) and, for window cutting, one forward pass per model, corpus and windows
(the forward step's cost).

Model shapes, first found wins: a fetched manifest (``results/tensors/<model>/manifest.json``
under the work directory), ``--shape MODEL=FILE`` (a manifest or an HF ``config.json``), the
``config.json`` of a ``source: local`` checkpoint, or the entry's ``shape:`` in the model
registry (config/models.yaml)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from headgeom.schedule import designs, fanout
from headgeom.schedule.families import SHARD_FAMILIES, FETCH, FORWARD, JOBS, STEPS, activation_models, forward_shapes
from headgeom.schedule.shapes import SHAPE_KEYS, model_shape, shape_from_file  # noqa: F401 (the plan's API)

@dataclass(frozen=True)
class PlannedJob:
    rule: str
    model: str
    wildcards: dict
    mem_mb: int
    runtime: int  # minutes
    path: str | None = None  # its first output, where the registries do not derive it (the sensitivity jobs)
    work_s: float | None = None  # the cost model's expected seconds of work (no safety factor, no runtime
    #   floor: headgeom.schedule.costs.job_resources); None: as requested
    threads: int = 1  # cores it holds: its core-hours are that many times its hours

    @classmethod
    def of(cls, rule: str, model: str, wildcards: dict, res: dict, path: str | None = None) -> PlannedJob:
        """A job from its cost model's resources (mem_mb, runtime and, where modelled, work_s)."""
        work = res.get("work_s")
        return cls(rule, model, wildcards, int(res["mem_mb"]), int(res["runtime"]), path,
                   None if work is None else float(work), int(res.get("threads", 1)))

    @property
    def expected_s(self) -> float:
        """Seconds the cost model expects it to run (its request's runtime where it models none)."""
        return 60.0 * self.runtime if self.work_s is None else self.work_s

    @property
    def core_hours(self) -> float:
        """Core-hours requested: its runtime on each of its cores."""
        return self.threads * self.runtime / 60

    @property
    def work_core_hours(self) -> float:
        """Core-hours of expected work: its expected run on each of its cores."""
        return self.threads * self.expected_s / 3600

    @property
    def output(self) -> str:
        if self.path is not None:
            return self.path
        if self.rule in STEPS:
            return STEPS[self.rule].output(model=self.model, **self.wildcards)
        fam = next(f for f in SHARD_FAMILIES.values() if f.job == self.rule)
        return fam.path.format(model=self.model, **self.wildcards)


def jobs_for(model: str, fields: dict, config: dict) -> list[PlannedJob]:
    """Every per-layer job of one model, as headgeom/rules/jobs.py generates them (the
    model's design included: headgeom.schedule.designs)."""
    out = []
    act = model in activation_models(config)
    for job in JOBS.values():
        for wc in designs.job_wildcards(job.name, config, model, fields):
            mc = designs.model_config(config, model, wc.get("layer"))
            r = job.cost(fields, mc, {k: str(v) for k, v in wc.items()})
            out.append(PlannedJob.of(job.name, model, wc, r))
    if act:  # the forward pass: one job per distinct (corpus, windows) of the activation sections
        for wc in forward_shapes(config):
            wc = dict(zip(("corpus", "nwin", "win"), wc))
            r = FORWARD.cost(fields, config, wc)
            out.append(PlannedJob.of(FORWARD.name, model, wc, r))
    return out


def makespan(runtimes, cores: int, threads=None) -> float:
    """Longest-processing-time-first list schedule on ``cores`` identical cores (minutes): each job
    (``threads``: the cores each holds, default one) starts when that many cores are free, on the
    earliest free ones. Never below max(core-minutes / cores, longest job); with one core a job, within
    4/3 of the optimum."""
    if not runtimes:
        return 0.0
    threads = [1] * len(runtimes) if threads is None else [max(1, int(t)) for t in threads]
    if max(threads) > cores:
        raise ValueError(f"makespan: a job holds {max(threads)} cores, more than the {cores} there are")
    free = [0.0] * min(cores, sum(threads))
    for t, k in sorted(zip(runtimes, threads), reverse=True):
        held = [heapq.heappop(free) for _ in range(k)]
        end = max(held) + t  # it starts when the k-th core frees
        for _ in range(k):
            heapq.heappush(free, end)
    return max(free)


def plan(config: dict, workdir=".", shapes=None, models=None, more_jobs=None) -> dict:
    """Jobs, core-hours and memory per rule of a run of ``config``. ``more_jobs(config, fields)``
    (fields: model -> shape) adds the jobs of layers above this package, e.g. the choice
    sensitivity's (headgeom.publish.choice_sensitivity.planned_jobs, which the CLI passes)."""
    models = list(models or config["active_models"])
    per_model, jobs = {}, []
    for m in models:
        fields, src = model_shape(m, config, workdir, shapes)
        per_model[m] = {"fields": fields, "shape_from": src, "design": designs.summary_line(config, m, fields)}
        jobs += jobs_for(m, fields, config)
    if more_jobs is not None:
        jobs += more_jobs(config, {m: d["fields"] for m, d in per_model.items()})
    rules = {}
    for j in jobs:
        r = rules.setdefault(j.rule, {"jobs": 0, "core_hours": 0.0, "work_core_hours": 0.0, "peak_mem_mb": 0,
                                      "largest": None})
        r["jobs"] += 1
        r["core_hours"] += j.core_hours
        r["work_core_hours"] += j.work_core_hours
        r["threads"] = max(r.get("threads", 1), j.threads)
        r["peak_mem_mb"] = max(r["peak_mem_mb"], j.mem_mb)
        if r["largest"] is None or j.runtime > r["largest"].runtime:
            r["largest"] = j
    fetches = [FETCH.cost(d["fields"], config, {"model": m}) for m, d in per_model.items()]
    return {"models": per_model, "rules": rules, "jobs": jobs, "ceiling_min": fanout.max_job_minutes(config),
            "fetch_min": max((f["runtime"] for f in fetches), default=0),
            "fetch_expected_min": max((f.get("work_s", 60 * f["runtime"]) / 60 for f in fetches), default=0),
            "fetch_mem_mb": max((f["mem_mb"] for f in fetches), default=0)}


def wall_clock_hours(p: dict, cores: int, expected: bool = False) -> float:
    """Fetch (models in parallel) then the per-layer jobs on ``cores`` cores, each job running its whole
    request, or (``expected``) the fetch's and the jobs' expected time."""
    jobs = p["jobs"]
    # a job holding more cores than there are (Snakemake gives it --cores) runs its core-minutes on them all
    minutes = [(j.expected_s / 60 if expected else j.runtime) * max(1.0, j.threads / cores) for j in jobs]
    fetch = p["fetch_expected_min"] if expected else p["fetch_min"]
    return (fetch + makespan(minutes, cores, [min(j.threads, cores) for j in jobs])) / 60


def render(p: dict, cores=(1, 16, 64, 256, 1024)) -> str:
    lines = ["models:"]
    for m, d in p["models"].items():
        f = d["fields"]
        lines.append(f"  {m}: {f['n_layers']} layers, d_model {f['d_model']}, {f['n_heads']} q / "
                     f"{f['n_kv_heads']} kv heads, d_head {f['d_head']}  (shape: {d['shape_from']})")
        lines.append(f"    design: {d['design']}")
    lines += ["", "core-h: requested (the jobs' runtime: safety factor and floors included); "
                  "work: the cost model's expected work", "",
              f"{'rule':<20}{'jobs':>8}{'core-h':>11}{'work':>9}{'peak MiB/job':>14}  largest job (min; cores)"]
    tot_jobs, tot_h, tot_w = 0, 0.0, 0.0
    for name, r in p["rules"].items():
        big = r["largest"]
        lines.append(f"{name:<20}{r['jobs']:>8}{r['core_hours']:>11.1f}{r['work_core_hours']:>9.1f}"
                     f"{r['peak_mem_mb']:>14}  {big.runtime}{'' if big.threads == 1 else f' x {big.threads}'} "
                     f"{big.output}")
        tot_jobs += r["jobs"]
        tot_h += r["core_hours"]
        tot_w += r["work_core_hours"]
    lines.append(f"{'total':<20}{tot_jobs:>8}{tot_h:>11.1f}{tot_w:>9.1f}")
    longest = max((j.runtime for j in p["jobs"]), default=0)
    over = [j for j in p["jobs"] if j.runtime > p["ceiling_min"]]
    lines += ["", f"runtime ceiling (fanout.max_job_minutes): {p['ceiling_min']:g} min; longest job {longest} min; "
                  f"{len(over)} job(s) over the ceiling" + (f" (e.g. {over[0].output})" if over else "")]
    lines.append(f"fetch: {p['fetch_min']} min, {p['fetch_mem_mb']} MiB at most (one job per model, in parallel)")
    lines.append("wall-clock (fetch + per-layer jobs, longest first, each on its cores): expected (each job its "
                 "expected work), at most (each job its whole request)")
    for c in cores:
        lines.append(f"  {c:>6} cores: {wall_clock_hours(p, c, expected=True):10.1f} h expected, "
                     f"{wall_clock_hours(p, c):.1f} h at most")
    return "\n".join(lines) + "\n"
