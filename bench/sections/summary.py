"""``make bench``'s summary.md: every section's results as one table of ratios with their targets,
and the notes saying what each measured."""

from __future__ import annotations

import time

from .capacity import capacity_rows, fmt_x


#: each stage's FLOP rate over the same run's numpy matmul rate, at least
STAGE_TARGETS = {"closure_core": 0.80, "null_within_rotation": 0.75, "null_within_reassign": 0.75, "null_cross_job": 0.75}
#: cold `make run`, then `--configfile config/paper.yaml` on its outputs: wall time, at most (s)
RUN_WALL_TARGET_S = 300
PAPER_WALL_TARGET_S = 600


def _total_row(run: dict) -> dict | None:
    """The ``total`` row of a timed run's per-rule table (bench/sections/pipeline.py: ``headgeom timings``)."""
    return next((r for r in run.get("rules") or [] if r["rule"] == "total"), None)


def summarize(results: dict, env: dict) -> str:
    rows = []  # (stage, measure, value, target, ok)
    st = results.get("stages")
    if st:
        for k, v in st["stages"].items():
            rows.append((f"{k} ({st['precision']})", f"{v['flops']['total'] / 1e9:.1f} GFLOP in {v['seconds']:.2f} {st.get('clock', 'wall')}-s: FLOP rate / numpy matmul rate ({st['matmul_gflops']:.1f} GFLOP/s)",
                         f"{100 * v['share_of_matmul']:.0f}%" + (f" (rounds {min(v['share_rounds']) * 100:.0f}–{max(v['share_rounds']) * 100:.0f}%)" if v.get("share_rounds") else ""),
                         f"≥ {100 * STAGE_TARGETS[k]:.0f}%", v["share_of_matmul"] >= STAGE_TARGETS[k]))
    c = results.get("closure")
    if c:
        r = c["ratios"]
        rows += [
            ("closure, Qwen3-235B layer", "naive (materialize T, T²) time / headgeom Gram core time", fmt_x(r["naive_over_gram_core"]), "≥ 100x", r["naive_over_gram_core"] >= 100),
            ("closure, Qwen3-235B layer", "FactoredMatrix-style time / headgeom Gram core time", fmt_x(r["factored_over_gram_core"]), "≥ 1x", r["factored_over_gram_core"] >= 1),
            ("closure, Qwen3-235B layer", "naive time / full closure_layer time (+ ranks, principal coords)", fmt_x(r["naive_over_closure_layer"]), "–", None),
            ("closure, Qwen3-235B layer", "FactoredMatrix-style time / full closure_layer time", fmt_x(r["factored_over_closure_layer"]), "–", None),
            ("closure, Qwen3-235B layer", "all methods agree (max rel. err.)", f"{max(c['max_rel_err'].values()):.1e}", "< 1e-8", c["agree"]),
        ]
    p = results.get("pk")
    if p:
        rows += [
            ("PK cross-layer, Qwen2.5-7B", "cross_pairs FLOP rate (as pk_cross_job calls it) / numpy matmul FLOP rate", f"{100 * p['share_of_matmul']['cross_pairs']:.0f}%", "≥ 85%", p["share_of_matmul"]["cross_pairs"] >= 0.85),
            ("PK cross-layer, Qwen2.5-7B", "cross_pairs without the weighted measure / numpy matmul", f"{100 * p['share_of_matmul']['cross_pairs_rho_angle']:.0f}%", "–", None),
            ("PK cross-layer, Qwen2.5-7B", "cross_blocks GEMM alone / numpy matmul", f"{100 * p['share_of_matmul']['cross_blocks_gemm']:.0f}%", "–", None),
            ("PK cross-layer, Qwen2.5-7B", "scipy subspace_angles per pair / headgeom per pair, same outputs (rho, min angle; bases included)", fmt_x(p["speedup_over_scipy"]), "≥ 20x", p["speedup_over_scipy"] >= 20),
            ("PK cross-layer, Qwen2.5-7B", "scipy per pair / headgeom per pair as the job runs (+ spectral-weighted measure)", fmt_x(p["speedup_over_scipy_job"]), "–", None),
            ("PK cross-layer, Qwen2.5-7B", "agrees with scipy (rho rel., min angle deg)", f"{p['max_rel_err_rho_vs_scipy']:.0e}, {p['max_abs_err_min_angle_deg_vs_scipy']:.0e}", "< 1e-8, 1e-6", p["agree"]),
        ]
    n = results.get("nulls")
    if n:
        for name, row in n["shapes"].items():
            for null, v in row["nulls"].items():
                if "skipped" in v:
                    rows.append((f"nulls, {name}", f"{null}: samples/s per layer", "skipped (--quick)", "–", None))
                else:
                    rows.append((f"nulls, {name}", f"{null}: samples/s per layer (all 4 kinds)", f"{v['samples_per_second_per_layer']:.3g} ({v['seconds_per_layer_sample']:.1f} s/sample)", "–", None))
    nc = results.get("null_cross")
    if nc:
        for name, r in nc["shapes"].items():
            for dt in ("float64", "float32"):
                v = r[dt]
                rows.append((f"null cross pairs, {name} ({dt})", "blocks / slab packing / slab products (at a part's "
                             f"call, {v['gram_heads'][0]} x {v['gram_heads'][1]} heads): FLOP rate / GEMM rate",
                             f"{v['blocks_share']:.0%} / {v['pack_share']:.0%} / {v['gram_share']:.0%}",
                             "packing, products ≥ 80%" if dt == "float64" else "–",
                             min(v["pack_share"], v["gram_share"]) >= 0.8 if dt == "float64" else None))
                lp = v["layer_pair_s"]
                rows.append((f"null cross pairs, {name} ({dt})", "one layer pair, one sample and null: blocks s / projectors s",
                             f"{lp['blocks']:.2f} / {lp['projectors']:.2f} ({lp['blocks'] / lp['projectors']:.1f}x)", "–", None))
            rows.append((f"null cross pairs, {name}", "rho by projectors vs blocks (float64, max rel.); float32 vs float64 (max abs.)",
                         f"{r['float64']['rho_vs_blocks_max_rel']:.0e}; {r['float32']['rho_vs_float64_max_abs']:.0e}",
                         "< 1e-12; < 1e-5", r["float64"]["rho_vs_blocks_max_rel"] < 1e-12
                         and r["float32"]["rho_vs_float64_max_abs"] < r["float32"]["bound"]))
            rows.append((f"null cross pairs, {name}", "packing one head: per-head GEMM + gather s / slab packing s",
                         fmt_x(r["gather_packing_s_per_head"] / r["slab_packing_s_per_head"]), "–", None))
    nt = results.get("null_cross_threads")
    if nt:
        for phase, what in (("draws", "draws"), ("packing", "packing"), ("gram", "slab products at the design's tile")):
            rows.append((f"null cross on 2 threads, {nt['shape']}", f"{what}: speed-up / 2 (wall)",
                         f"{nt[f'{phase}_efficiency']:.2f}", f"≥ {nt[f'{phase}_model']} (the cost model's)",
                         nt[f"{phase}_efficiency"] >= nt[f"{phase}_model"]))
        rows.append((f"null cross on 2 threads, {nt['shape']}", "draws: the same bits; products: max rel. difference",
                     f"{nt['draws_same_bits']}; {nt['products_max_rel_diff']:.1e}", "True; ≤ 1e-13",
                     nt["draws_same_bits"] and nt["products_max_rel_diff"] <= 1e-13))
    f = results.get("fetch")
    if f:
        rows.append(("fetch, loopback hub", "bytes transferred / bytes of the needed tensors", f"{f['ratio_transferred_over_needed']:.4f}", "–", None))
        rows.append(("fetch, loopback hub", "bytes transferred / checkpoint size", f"{100 * f['share_of_checkpoint']:.1f}%", "–", None))
    rows += capacity_rows(results.get("capacity"))
    o = results.get("overhead")
    if o:
        j = o["snakemake"]["job_imports"]
        rows.append(("per-job overhead", f"a job that does no work, with a per-layer job's imports, in its own process (as under "
                     f"SLURM; snakemake -c1, {o['jobs']} jobs): CPU s per job",
                     f"{j['per_job_cpu_s']:.2f} s (wall {j['per_job_wall_s']:.2f} s)", "–", None))
        sv = o["snakemake"].get("served")
        if sv:
            rows.append(("per-job overhead", f"the same job as a local run runs it: its command handed to the job server "
                         f"(the server's start spread over the {o['jobs']} jobs): CPU s per job / in its own process",
                         f"{sv['per_job_cpu_s']:.2f} s (wall {sv['per_job_wall_s']:.2f} s)",
                         "< 0.5×", sv["per_job_cpu_s"] < 0.5 * j["per_job_cpu_s"]))
    e = results.get("e2e")
    if e:
        rows.append(("end to end", f"cold `make run` wall time (snakemake -c{e['cores']}, {e['jobs']} jobs)", f"{e['wall_s']:.0f} s" + ("" if e["returncode"] == 0 else f" (FAILED rc {e['returncode']})"), f"≤ {RUN_WALL_TARGET_S} s", e["returncode"] == 0 and e["wall_s"] <= RUN_WALL_TARGET_S))
        total = _total_row(e)
        if total and total["overhead_s"] is not None and total["timed_wall_s"] > 0:
            rows.append(("end to end", "summed job wall time: start-up (wall - job function) / wall, from the run's logs "
                         "(`headgeom timings`)", f"{100 * total['overhead_s'] / total['timed_wall_s']:.0f}% of "
                         f"{total['timed_wall_s']:.0f} s", "–", None))
        pp = e.get("paper")
        if pp:
            rows.append(("end to end", f"`--configfile config/paper.yaml` after it, wall time (snakemake -c{e['cores']}, "
                         f"{pp['jobs']} jobs, choice_sensitivity included)", f"{pp['wall_s']:.0f} s"
                         + ("" if pp["returncode"] == 0 else f" (FAILED rc {pp['returncode']})"), f"≤ {PAPER_WALL_TARGET_S} s",
                         pp["returncode"] == 0 and pp["wall_s"] <= PAPER_WALL_TARGET_S))
            ptotal = _total_row(pp)
            if ptotal and ptotal.get("wall_s"):
                # the jobs' own time spread over the cores: no schedule of these jobs ends sooner
                rows.append(("end to end", f"the same run's summed job wall time / {e['cores']} cores (its jobs' "
                             "`headgeom timings`): the wall time's floor with these jobs on these cores",
                             f"{ptotal['wall_s'] / e['cores']:.0f} s", "–", None))
        if o and e.get("jobs"):
            local = o["snakemake"].get("served") or o["snakemake"]["job_imports"]  # what `make run`'s jobs pay
            share = e["jobs"] * local["per_job_cpu_s"] / e["cores"] / e["wall_s"]
            rows.append(("end to end", "jobs x per-job overhead CPU / cores / `make run` wall time (the share startup takes)", f"{100 * share:.0f}%", "–", None))

    def mark(ok):
        return "–" if ok is None else ("PASS" if ok else "FAIL")

    lines = ["| stage | measure | value | target | |", "|---|---|---|---|---|"]
    lines += [f"| {a} | {b} | {v} | {t} | {mark(ok)} |" for a, b, v, t, ok in rows]
    rt = env.get("numpy_openblas_runtime") or {}
    thr = (f"BLAS threads {rt.get('threads')} (OpenBLAS {rt.get('corename')}, numpy {env['numpy']}, scipy {env['scipy']}); "
           f"OMP_NUM_THREADS={env['env']['OMP_NUM_THREADS']} OPENBLAS_NUM_THREADS={env['env']['OPENBLAS_NUM_THREADS']}; "
           f"{env['affinity_cpus']} CPUs, load {env['loadavg_1m']:.2f} at start"
           + (f", {st['loadavg_1m_end']:.2f} after the stages" if st and "loadavg_1m_end" in st else "")
           + (f"; stages and PK shares timed by {st['clock']} time" if st and "clock" in st else "") + "; float64")
    notes = []
    if st:
        for k, v in st["stages"].items():
            notes.append(f"{k}: {st['notes'][k]}; FLOPs " + ", ".join(f"{a} {b / 1e9:.2f} G" for a, b in v["flops"].items()) + ".")
            if "share_with_M_at_matmul_rate" in v:
                notes.append(f"{k} by part (best, s): " + ", ".join(f"{a} {b:.3f}" for a, b in v["parts_seconds"].items())
                             + f"; with its M products at the matmul rate and the other parts as timed, the share would be "
                             f"{100 * v['share_with_M_at_matmul_rate']:.0f}%.")
            if "share_with_rest_at_matmul_rate" in v:
                notes.append(f"{k}: its draws alone (the Gaussians, the Householder QR and its application) "
                             f"{v['parts_seconds']['draws']:.2f} s, {100 * v['draws_share_of_matmul']:.0f}% of the matmul "
                             f"rate on haar_qr + rotate; with the bases and the pairs at the matmul rate and the draws as "
                             f"timed, the share would be {100 * v['share_with_rest_at_matmul_rate']:.0f}%.")
    if c:
        notes.append(f"closure: naive timed on {len(c['naive_sample'])} (head, V) evaluations and FactoredMatrix on "
                     f"{len(c['factored_heads'])} heads x (own, wrong V), both extrapolated to all {2 * c['shape']['n_heads']} evaluations; "
                     f"Gram core {c['stage_s']['gram_core']:.2f} s, closure_layer {c['stage_s']['closure_layer']:.2f} s, "
                     f"naive {c['stage_s']['naive_extrapolated']:.0f} s, FactoredMatrix {c['stage_s']['factored_extrapolated']:.0f} s per layer.")
    if p:
        notes.append(f"PK: {p['layer_pairs_timed']} of {p['layer_pairs_model']} layer pairs timed "
                     f"({p['pairs_per_layer_pair']} head pairs each, readers Q, K, V); cross_pairs {p['gflops']['cross_pairs']:.1f} GFLOP/s "
                     f"vs numpy matmul {p['gflops']['numpy_matmul']:.1f} GFLOP/s ({p['matmul_shape'][0]}x{p['matmul_shape'][1]} @ "
                     f"{p['matmul_shape'][1]}x{p['matmul_shape'][2]}); per head pair headgeom {1e3 * p['per_pair_s']['headgeom_rho_angle']:.2f} ms "
                     f"(rho + min angle, bases as pk_cross_job computes them) vs scipy {1e3 * p['per_pair_s']['scipy_subspace_angles']:.1f} ms "
                     f"(mean over {p['scipy_sample_pairs']} pairs); the whole model's cross stage ≈ "
                     f"{p['stage_extrapolated_full_model_s'] / 60:.0f} min on one thread.")
    if n:
        notes.append("nulls: " + n["what"] + ".")
    if nc:
        notes.append("null cross pairs: " + nc["what"] + ".")
    if results.get("capacity"):
        notes.append(results["capacity"]["what"] + ".")
    head = "# headgeom bench\n\n" + time.strftime("%Y-%m-%d %H:%M:%S") + "\n\n" + thr + "\n\n"
    return head + "\n".join(lines) + "\n\n" + "\n".join(f"* {x}" for x in notes) + "\n"
