"""Minimal rebuilds: after each kind of config edit, Snakemake's own dry run (rerun triggers:
mtime, params, input, code, software-env) lists exactly the jobs that use what was edited.

Every rule gets only the config values it uses, as params (README "Configuration"); these tests
hold the workflow to that on the shared tiny run (tests/tinyrun.py: model `tiny`, 2 layers,
null samples 2 per block)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
import yaml

from headgeom.outputs import FIGURES, TABLES
from headgeom.publish.claims import ledger_tables, load_ledger
from synth import write_llama
from tinyrun import copy_run, merge, sensitivity_jobs, snakemake, tiny_run
from dryrun import dry_run_jobs

pytestmark = pytest.mark.slow

ALL = ("all", None)
CLAIMS = ("claims", "results/tables/claims.csv")
MACROS = ("macros", "results/tables/claims_macros.tex")  # reruns with the claims table
CHOICE = ("choice_sensitivity", "results/tables/choice_sensitivity.csv")
SUMMARY = ("summary", "results/summary.md")


def T(name):
    """The job that writes table <name> (identified by its CSV)."""
    return (f"table_{name}", f"results/tables/{name}.csv")


def F(name):
    return (f"figure_{name}", f"figures/{name}.png")


def pk_reports_reading(family):
    return {T(n) for n, o in TABLES.items() if family in o.families and o.shard_models != "activation"} | {
        F(n) for n, o in FIGURES.items() if family in o.families and o.shard_models != "activation"}


# the tiny run has no activation stage (activation.models names none of its models): its outputs
# are not targets there (their own job lists: test_activation_workflow.py)
AGGREGATES = {T(n) for n, o in TABLES.items() if o.shard_models != "activation"} | {
    F(n) for n, o in FIGURES.items() if o.shard_models != "activation"}


def with_claims(jobs: set, edit: dict | None = None) -> set:
    """The claims table reruns when a table the ledger reads reruns; the choice-sensitivity
    alternatives when one they read or rebuild reruns, and their table after them."""
    from headgeom.publish.summary import tables_read

    led = ledger_tables(load_ledger(ROOT_LEDGER))
    ledger = {T(t) for t in led}
    out = jobs | {CLAIMS, MACROS, ALL} if jobs & ledger else jobs | {ALL}
    out |= sensitivity_jobs(merge(RUN_CFG, edit or {}), jobs, led)
    # the end-of-run summary reads its headline tables and the claims table
    return out | {SUMMARY} if out & ({T(t) for t in tables_read()} | {CLAIMS}) else out


ROOT_LEDGER = None  # set by the fixture (the repo's config/claims.yaml)
RUN_CFG: dict = {}  # and the shared run's config file

EDITS = {
    "unchanged": {},
    "figure_layer": {"figures": {"pk_rho_layer": 0}},
    "figure_kind": {"figures": {"pk_rho_kind": "Q"}},
    "within_grow": {"pk": {"nulls": {"within_samples": 4}}},
    "cross_grow": {"pk": {"nulls": {"cross_samples": 3}}},
    "null_types": {"pk": {"nulls": {"types": ["rotation"]}}},
    "strong_threshold": {"tables": {"strong_threshold": 0.8}},
    "small_angle": {"tables": {"small_angle_deg": 5.0}},
    "model_notes": {"models": {"tiny": {"notes": "edited", "tables": ["pk:table3"], "lineage": "tinyline"}}},
    "model_pair": {"models": {"tiny": {"pair": "tiny"}}},
}


@pytest.fixture(scope="module")
def plans(tmp_path_factory, snakemake_bin, root):
    """{edit: sorted (rule, first output) list} from dry runs of the shared run (in parallel:
    each Snakemake start costs seconds of fixed overhead), plus the add-a-model plans, which
    work on a copy because the new model's fetch has to run first."""
    global ROOT_LEDGER
    ROOT_LEDGER = root / "config" / "claims.yaml"
    w = tiny_run(tmp_path_factory, snakemake_bin, root)
    base = yaml.safe_load((w / "cfg.yaml").read_text())
    RUN_CFG.update(base)

    def edit(name):
        cfg = w / f"cfg_{name}.yaml"
        cfg.write_text(yaml.safe_dump(merge(base, EDITS[name])))
        r = snakemake(snakemake_bin, root, w, "-n", configfiles=(cfg.name,))
        return name, dry_run_jobs(r.stdout + r.stderr)

    def add_model():
        c = copy_run(w, tmp_path_factory.mktemp("addmodel") / "run")
        write_llama(c / "ckpt2", seed=1, n_layers=3, closed=((2, 1, 0.7),))
        cfg = merge(base, {"models": {"tiny2": {"source": "local", "path": str(c / "ckpt2")}},
                           "active_models": ["tiny", "tiny2"]})
        (c / "cfg_add.yaml").write_text(yaml.safe_dump(cfg))
        before = snakemake(snakemake_bin, root, c, "-n", configfiles=("cfg_add.yaml",))
        snakemake(snakemake_bin, root, c, "results/tensors/tiny2/manifest.json", configfiles=("cfg_add.yaml",))
        after = snakemake(snakemake_bin, root, c, "-n", configfiles=("cfg_add.yaml",))
        return [("add_before_fetch", dry_run_jobs(before.stdout + before.stderr)),
                ("add_after_fetch", dry_run_jobs(after.stdout + after.stderr))]

    with ThreadPoolExecutor(max_workers=4) as ex:
        futs = [ex.submit(add_model)] + [ex.submit(edit, n) for n in EDITS]
        out = {}
        for f in futs:
            r = f.result()
            out.update(r if isinstance(r, list) else [r])
    return out


def _assert_plan(plans, name, expected):
    got = set(plans[name])
    assert len(got) == len(plans[name]), f"{name}: a job listed twice: {plans[name]}"
    missing, extra = sorted(expected - got, key=str), sorted(got - expected, key=str)
    assert not missing and not extra, f"{name}: missing {missing}, unexpected {extra}"


def test_nothing_to_do_without_an_edit(plans):
    assert plans["unchanged"] == []


@pytest.mark.parametrize("name", ["figure_layer", "figure_kind"])
def test_figure_only_key_reruns_that_figure_alone(plans, name):
    _assert_plan(plans, name, {F("pk_fig_rho_ccdf_layer"), ALL})


def test_growing_within_null_samples_adds_blocks_only(plans):
    """2 -> 4 samples at 2 per block: block1 (samples 2, 3) of each layer is new; block0
    (samples 0, 1, its params unchanged) is left alone; the reports that read those nulls rerun."""
    new_blocks = {("pk_null_within", f"results/shards/pk_null_within/tiny/layer{l}/block1.parquet") for l in (0, 1)}
    _assert_plan(plans, "within_grow", with_claims(new_blocks | pk_reports_reading("pk_null_within")))


def test_growing_cross_null_samples_adds_a_block_only(plans):
    new = {("pk_null_cross", "results/shards/pk_null_cross/tiny/block1/part0.parquet")}
    _assert_plan(plans, "cross_grow", with_claims(new | pk_reports_reading("pk_null_cross")))


def test_null_types_rerun_the_null_jobs_and_their_readers_only(plans):
    nulls = {("pk_null_within", f"results/shards/pk_null_within/tiny/layer{l}/block0.parquet") for l in (0, 1)} | {
        ("pk_null_cross", "results/shards/pk_null_cross/tiny/block0/part0.parquet")}
    readers = pk_reports_reading("pk_null_within") | pk_reports_reading("pk_null_cross")
    _assert_plan(plans, "null_types", with_claims(nulls | readers))


def test_strong_threshold_reruns_its_tables_and_figures(plans):
    """No closure, PK or paper1_heads job reruns. The paper1_capacity job does: it uses the threshold to
    pick the strong heads (and their matched controls) whose capacity it optimizes."""
    uses = {T("p1_table2_strong_tail"), F("p1_fig_closure_ccdf")}
    uses |= {T(n) for n in ("p1_table2_strong_tail", "p1_table3_trajectories", "p1_table4_sibling_law", "p1_orientation_scramble", "p1_orientation_layers",
                            "p1_capacity", "p1_latent_closure", "p1_anchors")}
    uses |= {F(n) for n in ("p1_fig_closure_ccdf", "p1_fig_orientation_scramble", "p1_fig_capacity", "p1_fig_sibling_law")}
    capacity = {("paper1_capacity", f"results/shards/paper1_capacity/tiny/layer{l}.parquet") for l in (0, 1)}
    _assert_plan(plans, "strong_threshold", with_claims(uses | capacity))
    per_layer = {r for r, o in plans["strong_threshold"] if o and o.startswith("results/shards/")}
    assert per_layer == {"paper1_capacity"}


def test_model_metadata_does_not_refetch(plans):
    """fetch gets only the keys that locate a checkpoint (source, path, repo_id, revision, package)."""
    assert plans["model_notes"] == []
    # `pair` is read by the base/instruct table alone
    _assert_plan(plans, "model_pair", with_claims({T("pk_appendix_e_base_instruct"), T("pk_sec5_5_base_instruct_pairs")}))


def test_small_angle_reruns_pk_writing_only(plans):
    _assert_plan(plans, "small_angle", with_claims({T("pk_table5_writing")}))


def test_adding_a_model_runs_its_jobs_and_the_aggregates(plans):
    # before its fetch (a checkpoint) the layer count is unknown: fetch + every aggregate
    two = {"models": {"tiny2": {"source": "local", "path": "ckpt2"}}, "active_models": ["tiny", "tiny2"]}
    choice = sensitivity_jobs(merge(RUN_CFG, two), AGGREGATES, ledger_tables(load_ledger(ROOT_LEDGER)))
    assert CHOICE in choice
    _assert_plan(plans, "add_before_fetch",
                 {("fetch", "results/tensors/tiny2/manifest.json"), CLAIMS, MACROS, SUMMARY, ALL} | AGGREGATES | choice)
    # after it: the new model's per-layer jobs (3 layers), nothing of `tiny`, and the aggregates
    L = range(3)
    new = (
        {("pk_within_layer", f"results/shards/pk_within/tiny2/layer{l}.parquet") for l in L}
        | {("pk_cross_layer", "results/shards/pk_cross/tiny2/part0.parquet")}  # 3 pairs, one part
        | {("pk_null_within", f"results/shards/pk_null_within/tiny2/layer{l}/block0.parquet") for l in L}
        | {("pk_null_cross", "results/shards/pk_null_cross/tiny2/block0/part0.parquet")}
        | {("paper1_heads", f"results/shards/paper1_heads/tiny2/layer{l}.parquet") for l in L}
        | {("paper1_capacity", f"results/shards/paper1_capacity/tiny2/layer{l}.parquet") for l in L}
    )
    _assert_plan(plans, "add_after_fetch", new | AGGREGATES | choice | {CLAIMS, MACROS, SUMMARY, ALL})
    assert not [o for _, o in plans["add_after_fetch"] if o and "/tiny/" in o]


def test_cuda_device_asks_a_gpu_for_the_backend_null_jobs_alone(tmp_path_factory, snakemake_bin, root):
    """`device: cuda` (with `backend: torch`) reruns the null jobs, which read it, and only they ask
    for a GPU (resource `gpu`, which the SLURM plugin turns into sbatch --gpus); every other job of
    the dry run asks for none."""
    import re

    from headgeom.schedule.families import JOBS

    # every per-layer job rerun (--forcerun), so that the ones that must not ask for a GPU are listed too
    r = snakemake(snakemake_bin, root, tiny_run(tmp_path_factory, snakemake_bin, root), "-n",
                  "--forcerun", *JOBS, "--config", "device=cuda", "backend=torch")
    text = r.stdout + r.stderr
    seen = set()
    for b in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) )", text):
        m = re.match(r"(?:local)?(?:rule|checkpoint) (\S+):", b)
        if not m:
            continue
        res = re.search(r"^    resources: (.*)$", b, re.M)
        gpu = re.search(r"\bgpu=(\d+)", res.group(1)).group(1) if res and "gpu=" in res.group(1) else "0"
        if m.group(1) in ("pk_null_within", "pk_null_cross"):
            assert gpu == "1", b
            seen.add(m.group(1))
        else:
            assert gpu == "0", b
    assert seen == {"pk_null_within", "pk_null_cross"}, text[-3000:]
    assert {"pk_within_layer", "paper1_heads"} <= set(re.findall(r"^rule (\S+):", text, re.M))  # listed, gpu=0


def test_forward_jobs_hold_the_cores_activation_threads_names(tmp_path, snakemake_bin, root):
    """The forward jobs (the run's and the window-cutting alternative's) hold activation.threads
    cores, locally (threads) and on a cluster (cpus_per_task): one by default (their time is mostly
    a one-thread load), more where the config asks. A dry run of the embedded MiniLM-L6."""
    import re

    for threads in (None, 2):  # (a local run caps threads at its cores: -c2)
        cfg = {"active_models": ["minilm-l6"]}
        if threads is not None:
            cfg["activation"] = {"threads": threads}
        (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
        r = snakemake(snakemake_bin, root, tmp_path, "-n", "choice_sensitivity")
        text = r.stdout + r.stderr
        want, seen = threads or 1, set()
        for b in re.split(r"\n(?=(?:local)?(?:rule|checkpoint) )", text):
            m = re.match(r"rule (activation_forward|sensitivity_forward):", b)
            if not m:
                continue
            seen.add(m.group(1))
            held = re.search(r"^    threads: (\d+)$", b, re.M)  # a dry run lists threads above one
            assert (int(held.group(1)) if held else 1) == want, b
            assert f"cpus_per_task={want}," in b, b
        assert seen == {"activation_forward", "sensitivity_forward"}, text[-3000:]
