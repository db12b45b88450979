"""The activation stage inside the workflow, on a synthetic Llama checkpoint transformers runs
(tests/helpers/synth_hf.py) with a local corpus: one complete run (every rule), then Snakemake's
own dry runs after each activation edit list exactly the jobs that read what was edited (the
pattern of test_rebuild.py): a corpus edit (its config entry, or the text file itself) reruns
the forward passes, the activation jobs and their tables and figures, nothing of the weight-space
stages; a window edit reruns only the section it belongs to. Also: `activation.device: cuda`
asks the scheduler for a GPU for the forward rule alone, and `headgeom audit` recomputes an
activation table's number from its shards."""

from __future__ import annotations

import csv
import re

import pytest
import yaml

from headgeom.schedule.families import JOBS
from headgeom.verify.audit import audit, render_full
from headgeom.publish.claims import ledger_tables, load_ledger
from headgeom.outputs import OUTPUTS
from synth_hf import TEXT, write_synthetic_llama
from tinyrun import CFG, copy_run, dry_runs, merge, sensitivity_jobs, snakemake
from dryrun import dry_run_jobs

pytestmark = pytest.mark.slow

ALL = ("all", None)
CLAIMS = ("claims", "results/tables/claims.csv")
MACROS = ("macros", "results/tables/claims_macros.tex")  # reruns with the claims table
ACT_CFG = {
    "models": {"synth": {"source": "local", "path": "ckpt"}},
    "active_models": ["synth"],
    "texts": {"toy": {"source": "local", "path": "text.txt"}},
    "activation": {"enabled": True, "models": ["synth"],
                   "paper1": {"corpus": "toy", "n_windows": 2, "window": 24},
                   "read_paths": {"corpus": "toy", "n_windows": 3, "window": 24}},
}
LAYERS = (0, 1)


def out_job(kind, name):
    o = OUTPUTS[(kind, name)]  # a dry run names a job by its first output (a table's CSV, a figure's PNG)
    return (f"{kind}_{name}", next(iter(o.paths().values())))


def outputs_reading(family):
    return {out_job(k, n) for (k, n), o in OUTPUTS.items() if family in o.families}


def layer_jobs(job):
    return {(job, JOBS[job].families[0].path.format(model="synth", layer=l)) for l in LAYERS}


def forward(shape):
    return ("activation_forward", f"results/activations/synth/toy/{shape}")


NAT = layer_jobs("activation_natural_return") | outputs_reading("activation_natural_return")
RP = layer_jobs("activation_read_paths") | outputs_reading("activation_read_paths")


def with_claims(root, jobs: set, edit: dict | None = None) -> set:
    """``jobs`` and the claims, choice-sensitivity and summary jobs that rerun after them (the
    run's config with ``edit``)."""
    from headgeom.publish.summary import tables_read

    led = ledger_tables(load_ledger(root / "config/claims.yaml"))
    tables = {("table_" + t, f"results/tables/{t}.csv") for t in led}
    out = jobs | {CLAIMS, MACROS, ALL} if jobs & tables else jobs | {ALL}
    out |= sensitivity_jobs(merge(merge(CFG, ACT_CFG), edit or {}), jobs, led)
    # the end-of-run summary reads its headline tables and the claims table
    read = {("table_" + t, f"results/tables/{t}.csv") for t in tables_read()} | {CLAIMS}
    return out | {("summary", "results/summary.md")} if out & read else out


@pytest.fixture(scope="module")
def act_run(tmp_path_factory, snakemake_bin, root):
    w = tmp_path_factory.mktemp("actrun")
    (w / "ckpt").mkdir()
    write_synthetic_llama(w / "ckpt")
    (w / "text.txt").write_text(TEXT)
    (w / "text2.txt").write_text(TEXT.replace("parish", "county"))
    (w / "cfg.yaml").write_text(yaml.safe_dump(merge(CFG, ACT_CFG)))
    snakemake(snakemake_bin, root, w, timeout=1500)  # every rule: about a minute or two on 2 idle cores
    return w


EDITS = {
    "unchanged": {},
    "corpus_entry": {"texts": {"toy": {"path": "text2.txt"}}},
    "p1_window": {"activation": {"paper1": {"window": 20}}},
    "rp_windows": {"activation": {"read_paths": {"n_windows": 4}}},
    "device": {"activation": {"device": "cuda"}},
    "model_notes": {"models": {"synth": {"notes": "edited"}}},
}


@pytest.fixture(scope="module")
def plans(act_run, snakemake_bin, root):
    return dry_runs(snakemake_bin, root, act_run, EDITS)


def _assert_plan(got_list, expected, name):
    got = set(got_list)
    assert len(got) == len(got_list), f"{name}: a job listed twice: {got_list}"
    missing, extra = sorted(expected - got, key=str), sorted(got - expected, key=str)
    assert not missing and not extra, f"{name}: missing {missing}, unexpected {extra}"


def test_the_run_built_the_activation_outputs(act_run):
    for o in OUTPUTS.values():
        if o.shard_models == "activation":
            assert (act_run / o.main).stat().st_size > 0, o.main
    csv = (act_run / "results/tables/p1_activations_natural_return.csv").read_text()
    assert "synth" in csv


def test_the_summary_shows_the_natural_return_headlines(act_run):
    """Each headline the natural-return table declares is read from its CSV (a renamed table or
    column would read "not built")."""
    from headgeom.publish.summary import model_headlines

    got = {src: value for _, value, src in model_headlines(act_run / "results/tables", "synth")}
    with open(act_run / "results/tables/p1_activations_natural_return.csv", newline="") as fh:
        row = next(r for r in csv.DictReader(fh) if r["model"] == "synth")
    declared = OUTPUTS[("table", "p1_activations_natural_return")].headlines
    assert declared
    for column, _ in declared:
        value = got[f"p1_activations_natural_return:{column}"]
        assert value != "not built" and float(value) == pytest.approx(float(row[column]), rel=5e-4, nan_ok=True)


def test_nothing_to_do_without_an_edit(plans):
    assert plans["unchanged"][0] == []


def test_model_notes_edit_reruns_nothing(plans):
    """The forward pass and the sensitivity table get only the keys that locate a checkpoint."""
    assert plans["model_notes"][0] == []


def test_corpus_entry_edit_reruns_the_activation_stage_only(plans, root):
    expected = {forward("2x24"), forward("3x24")} | NAT | RP
    _assert_plan(plans["corpus_entry"][0], with_claims(root, expected, EDITS["corpus_entry"]), "corpus_entry")


def test_paper1_window_edit_reruns_the_natural_return_only(plans, root):
    _assert_plan(plans["p1_window"][0], with_claims(root, {forward("2x20")} | NAT, EDITS["p1_window"]), "p1_window")


def test_read_paths_window_count_edit_reruns_the_passes_of_that_window_length(plans, root):
    """paper1's 2 windows of 24 are the first 2 of read_paths' pass of 24-token windows
    (headgeom.schedule.families.forward_source): a new read-paths window count makes a new longer pass,
    which paper1's pass is taken from again, so both sections rerun."""
    expected = {forward("4x24"), forward("2x24")} | RP | NAT
    _assert_plan(plans["rp_windows"][0], with_claims(root, expected, EDITS["rp_windows"]), "rp_windows")


def test_corpus_file_edit_reruns_the_activation_stage_only(act_run, snakemake_bin, root, tmp_path):
    c = copy_run(act_run, tmp_path / "run")
    (c / "text.txt").write_text(TEXT + " An edited closing sentence.")
    r = snakemake(snakemake_bin, root, c, "-n")
    expected = {forward("2x24"), forward("3x24")} | NAT | RP
    _assert_plan(dry_run_jobs(r.stdout + r.stderr), with_claims(root, expected), "corpus_file")


def test_cuda_device_asks_a_gpu_for_the_forward_rule_alone(plans, root):
    """The resources each job of the dry run would be submitted with (the SLURM plugin turns
    `gpu` into sbatch --gpus): gpu=1 on the forward passes that run the model (activation_forward,
    and the choice sensitivity's reruns of them, sensitivity_forward), no gpu anywhere else: not on
    the 2 x 24 passes, taken from the first windows of the 3 x 24 ones."""
    jobs, text = plans["device"]
    _assert_plan(jobs, with_claims(root, {forward("2x24"), forward("3x24")} | NAT | RP, EDITS["device"]), "device")
    blocks = re.split(r"\n(?=(?:local)?(?:rule|checkpoint) )", text)
    seen = 0
    for b in blocks:
        m = re.match(r"(?:local)?(?:rule|checkpoint) (\S+):", b)
        if not m:
            continue
        res = re.search(r"^    resources: (.*)$", b, re.M)
        gpu = re.search(r"\bgpu=(\d+)", res.group(1)).group(1) if res and "gpu=" in res.group(1) else "0"
        if m.group(1) in ("activation_forward", "sensitivity_forward") and re.search(r"^    output: .*/3x24$", b, re.M):
            assert gpu == "1", b
            seen += 1
        else:
            assert gpu == "0", b
    assert seen == 2  # the 3 x 24 pass and its rerun without the BOS


def test_audit_recomputes_an_activation_number(act_run):
    res = audit(act_run, "pk_sec5_4_read_paths", {"model": "synth", "kind": "V"}, "share_rho_spearman",
                find_rows=False)
    text = "\n".join(render_full(res))
    assert res.ok and not res.integrity, text
    assert "MATCH" in text and "MISMATCH" not in text
    assert "results/shards/activation_read_paths/synth/layer0.parquet" in text


def test_missing_corpus_is_one_error_naming_it(act_run, snakemake_bin, root, tmp_path):
    c = copy_run(act_run, tmp_path / "run")
    (c / "cfg_missing.yaml").write_text(yaml.safe_dump(merge(yaml.safe_load((c / "cfg.yaml").read_text()),
                                                             {"texts": {"toy": {"path": "gone.txt"}}})))
    r = snakemake(snakemake_bin, root, c, "--keep-going", "--show-failed-logs", configfiles=("cfg_missing.yaml",),
                  ok=False, timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert re.search(r"CorpusError: corpus 'toy'.*gone\.txt.*does not exist", out), out[-3000:]
    # the weight-space stages had nothing to redo and are untouched
    assert "rule paper1_heads" not in out and "rule pk_within_layer" not in out


def test_architecture_the_stage_cannot_run_is_named_and_weight_space_still_runs(snakemake_bin, root, tmp_path):
    """A GPT-2 checkpoint saved without tokenizer files: the weight-space adapters read it, the
    activation stage (which has GPT-2's hooks) cannot load it offline. With --keep-going the forward job fails with an error naming the model and its
    architecture, and the weight-space tables are still built."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    GPT2LMHeadModel(GPT2Config(vocab_size=64, n_positions=64, n_embd=32, n_layer=2, n_head=4)).save_pretrained(
        tmp_path / "g2", safe_serialization=True)
    (tmp_path / "text.txt").write_text(TEXT)
    cfg = merge(CFG, {**ACT_CFG, "models": {"g2": {"source": "local", "path": "g2"}}, "active_models": ["g2"],
                      "activation": {**ACT_CFG["activation"], "models": ["g2"]}})
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    r = snakemake(snakemake_bin, root, tmp_path, "results/tables/p1_table2_strong_tail.csv", "results/tables/p1_table2_strong_tail.csv",
                  "results/tables/p1_activations_natural_return.csv", "--keep-going", "--show-failed-logs", ok=False,
                  timeout=1200)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert re.search(r"ModelRunError: model 'g2'.*model_type 'gpt2'.*weight-space stages still run", out), out[-3000:]
    for t in ("p1_table2_strong_tail", "p1_table2_strong_tail"):
        assert "g2" in (tmp_path / f"results/tables/{t}.csv").read_text()
    assert not (tmp_path / "results/tables/p1_activations_natural_return.csv").exists()


def test_plan_lists_the_activation_jobs_the_workflow_runs(act_run, snakemake_bin, root):
    """`headgeom plan` (no Snakemake) and a dry run that forces the activation rules agree on
    the activation jobs (--forceall would rerun fetch, a checkpoint, and hide the per-layer jobs)."""
    from headgeom.commands.plan import plan
    from headgeom.core.config import load_config

    cfg = load_config([act_run / "cfg.yaml"])
    planned = {(j.rule, j.output) for j in plan(cfg, workdir=act_run)["jobs"] if j.rule.startswith("activation")}
    r = snakemake(snakemake_bin, root, act_run, "-n", "--forcerun", "activation_forward", "activation_natural_return",
                  "activation_read_paths")
    ran = {(r_, o) for r_, o in dry_run_jobs(r.stdout + r.stderr) if r_.startswith("activation")}
    assert planned == ran == layer_jobs("activation_natural_return") | layer_jobs("activation_read_paths") | {
        forward("2x24"), forward("3x24")}


def _swap_claims(default_run, alt_run, table: str, row: dict, sw: str, tag: str = "") -> list[dict]:
    """Two ledger claims on the table cell the switch moves most: one stating the default run's
    value, one the alternative run's (12 significant digits)."""
    import csv

    pick = lambda rows: next(r for r in rows if all(r[k] == v for k, v in row.items()))  # noqa: E731
    a = _numeric(pick(csv.DictReader(open(default_run / f"results/tables/{table}.csv"))))
    b = _numeric(pick(csv.DictReader(open(alt_run / f"results/tables/{table}.csv"))))
    rel = {k: abs(a[k] - b[k]) / max(abs(a[k]), 1e-300) for k in a if k in b and a[k] == a[k] and b[k] == b[k]}
    col = max(rel, key=rel.get)
    assert rel[col] > 1e-9, f"{table}: the switch changes nothing the test can see ({rel})"
    return [{"id": f"{sw}{tag}.default", "model": "synth", "table": table, "row": row, "column": col,
             "value": f"{a[col]:.12g}"},
            {"id": f"{sw}{tag}.alternative", "model": "synth", "table": table, "row": row, "column": col,
             "value": f"{b[col]:.12g}"}]


def _numeric(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        try:
            out[k] = float(v)
        except (TypeError, ValueError):
            pass
    return out


def test_sensitivity_evaluates_the_activation_switches_as_a_rerun_would(act_run, snakemake_bin, root, tmp_path):
    """choice_sensitivity recomputes the natural-return and read-path shards from the stored
    activations with each alternative (endpoint median_cos2, eps_exact false). Reference: the
    pipeline itself rerun with those switches on a copy of the run. Claims stating the default
    and the rerun's values swap status, at 12 significant digits, and nothing else moves."""
    from headgeom.verify import sensitivity as CH

    c = copy_run(act_run, tmp_path / "run")
    alt = merge(yaml.safe_load((c / "cfg.yaml").read_text()),
                {"activation": {"paper1": {"endpoint": "median_cos2"}, "read_paths": {"eps_exact": False}}})
    (c / "cfg_alt.yaml").write_text(yaml.safe_dump(alt))
    snakemake(snakemake_bin, root, c, "results/tables/p1_activations_natural_return.csv",
              "results/tables/pk_sec5_4_read_paths.csv", configfiles=("cfg_alt.yaml",), timeout=1200)
    claims = [*_swap_claims(act_run, c, "p1_activations_natural_return", {"model": "synth"}, "activation.paper1.endpoint"),
              *_swap_claims(act_run, c, "pk_sec5_4_read_paths", {"kind": "V"}, "activation.read_paths.eps_exact")]
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump({"claims": {"p1": claims}}))
    t = CH.sensitivity(act_run, load_ledger(tmp_path / "claims.yaml"), ["synth"])
    rows = {(r["switch"], r["alternative"]): r for r in t.rows}
    for key in (("activation.paper1.endpoint", "median_cos2"), ("activation.read_paths.eps_exact", "false")):
        r = rows[key]
        assert r["tables"] == 1 and r["changed"] == 2, r
        assert f"{key[0]}.default: agrees → differs" in r["claims"] and f"{key[0]}.alternative: differs → agrees" in r["claims"]
    assert rows[("choices.return_gain", "fitted")]["changed"] == 0
    # the run itself is untouched (the recomputed shards live in a temporary directory)
    assert "median_cos2" not in (act_run / "results/tables/p1_activations_natural_return.md").read_text()


def test_sensitivity_reruns_the_forward_pass_for_window_cutting(act_run, snakemake_bin, root, tmp_path, monkeypatch):
    """The window-cutting switch (activation.bos false: no BOS prepended) changes the forward pass:
    choice_sensitivity reruns it into a temporary directory and recomputes every activation shard.
    Reference: the pipeline rerun with activation.bos false on a copy of the run; claims stating
    the default and the rerun's values (both activation tables) swap status, nothing else moves."""
    from headgeom.verify import sensitivity as CH

    c = copy_run(act_run, tmp_path / "run")
    cfg = yaml.safe_load((c / "cfg.yaml").read_text())
    (c / "cfg_alt.yaml").write_text(yaml.safe_dump(merge(cfg, {"activation": {"bos": False}})))
    snakemake(snakemake_bin, root, c, "results/tables/p1_activations_natural_return.csv",
              "results/tables/pk_sec5_4_read_paths.csv", configfiles=("cfg_alt.yaml",), timeout=1200)
    claims = [*_swap_claims(act_run, c, "p1_activations_natural_return", {"model": "synth"}, "activation.bos", ".nr"),
              *_swap_claims(act_run, c, "pk_sec5_4_read_paths", {"kind": "V"}, "activation.bos", ".rp")]
    (tmp_path / "claims.yaml").write_text(yaml.safe_dump({"claims": {"p1": claims}}))
    monkeypatch.chdir(act_run)  # the config's relative model and corpus paths, as in the rule's job
    before = sorted(p.relative_to(act_run) for p in act_run.rglob("*") if p.is_file())
    t = CH.sensitivity(act_run, load_ledger(tmp_path / "claims.yaml"), ["synth"],
                       sources={"models": cfg["models"], "texts": cfg["texts"]})
    r = next(r for r in t.rows if r["switch"] == "activation.bos")
    assert (r["default"], r["alternative"], r["tables"], r["changed"]) == ("true", "false", 2, 4), r
    for tag in (".nr", ".rp"):
        assert (f"activation.bos{tag}.default: agrees → differs" in r["claims"]
                and f"activation.bos{tag}.alternative: differs → agrees" in r["claims"]), r["claims"]
    # the run is untouched: the new forward passes and shards lived in a temporary directory
    assert sorted(p.relative_to(act_run) for p in act_run.rglob("*") if p.is_file()) == before

    # the workflow (one job per alternative, the forward reruns jobs of their own, then the
    # aggregate) makes the same table with this ledger, byte for byte
    w = copy_run(act_run, tmp_path / "wf")
    (w / "cfg_ledger.yaml").write_text(yaml.safe_dump({"claims": {"ledger": str(tmp_path / "claims.yaml")}}))
    r = snakemake(snakemake_bin, root, w, "results/tables/choice_sensitivity.csv",
                  configfiles=("cfg.yaml", "cfg_ledger.yaml"), timeout=1200)
    assert (w / "results/tables/choice_sensitivity.csv").read_text() == t.csv()
    ran = re.findall(r"^(?:local)?rule (\S+):$", r.stdout + r.stderr, flags=re.M)
    assert ran.count("sensitivity_shards") == 3 and "sensitivity_forward" not in ran, ran  # forward passes kept
    assert sorted((w / "results/sensitivity/activation.bos=false/results/activations/synth/toy").iterdir()) == [
        w / "results/sensitivity/activation.bos=false/results/activations/synth/toy" / s for s in ("2x24", "3x24")]


def test_a_run_of_another_model_in_the_same_directory_keeps_choice_sensitivity_working(act_run, snakemake_bin,
                                                                                       root, tmp_path):
    """A second run with other active models in a directory that still holds the first run's
    activation tables: choice_sensitivity evaluates the switches for the models of this run (the
    tables it builds), not for the tables an earlier run left behind, and the run succeeds."""
    from synth import write_llama

    c = copy_run(act_run, tmp_path / "run")
    write_llama(c / "other", closed=((0, 1, 1.2),))
    cfg = merge(yaml.safe_load((c / "cfg.yaml").read_text()),
                {"models": {"other": {"source": "local", "path": "other"}}, "active_models": ["other"]})
    (c / "cfg_other.yaml").write_text(yaml.safe_dump(cfg))
    snakemake(snakemake_bin, root, c, configfiles=("cfg_other.yaml",), timeout=1500)
    rows = list(csv.DictReader(open(c / "results/tables/choice_sensitivity.csv")))
    act = [r for r in rows if r["switch"].startswith("activation.")]
    assert act and all(r["tables"] == "0" for r in act), act  # synth's stale activation tables: not rebuilt
    assert all(r["tables"] != "0" for r in rows if r["switch"].startswith("choices.")), rows
    assert "Run models: other." in (c / "results/tables/choice_sensitivity.md").read_text()


def test_a_forward_switch_without_the_model_entries_is_a_row_saying_so(act_run, tmp_path):
    from headgeom.verify import sensitivity as CH

    (tmp_path / "claims.yaml").write_text(yaml.safe_dump({"claims": {"p1": []}}))
    t = CH.sensitivity(act_run, load_ledger(tmp_path / "claims.yaml"), ["synth"], sources={"models": {}, "texts": {}},
                       tables=["p1_activations_natural_return"])
    r = next(r for r in t.rows if r["switch"] == "activation.bos")
    assert r["changed"] is None and r["claims"].startswith("not evaluated: the config entries of model 'synth'"), r
    # only the table named is rebuilt (the paper 1 switches would rebuild every paper1_heads table)
    assert all(r["tables"] <= 1 for r in t.rows), t.rows


def test_damaged_forward_passes_with_old_time_stamps_are_rebuilt_before_their_readers(act_run, snakemake_bin, root,
                                                                                      tmp_path):
    """A forward pass's layer file cut short and a choice-sensitivity forward pass's layer file with a
    flipped byte, both with their time stamps kept: ``headgeom verify`` lists both, and the next run
    names both and reruns their forward passes before any job reads them (no job fails, so nothing
    intact is deleted); every table ends as before."""
    import os
    import subprocess
    import sys

    w = copy_run(act_run, tmp_path / "w")
    own = w / "results/activations/synth/toy/3x24/layer1.safetensors"
    alt = sorted((w / "results/sensitivity").glob("*/results/activations/synth/toy/*/layer0.safetensors"))[0]
    for p, cut in ((own, True), (alt, False)):
        st = p.stat()
        b = bytearray(p.read_bytes())
        if cut:
            b = b[: len(b) // 2]
        else:
            b[int(len(b) * 0.8)] ^= 0x01
        p.write_bytes(bytes(b))
        os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))
    dirs = sorted(str(p.parent.relative_to(w)) for p in (own, alt))
    v = subprocess.run([sys.executable, "-m", "headgeom.cli", "verify", "-d", str(w), "--configfile",
                        str(w / "cfg.yaml")], capture_output=True, text=True)
    assert v.returncode == 1 and "2 problems" in v.stdout, v.stdout + v.stderr
    assert sorted(ln.split(": ")[1] for ln in v.stderr.splitlines() if ln.startswith("damaged: ")) == dirs, v.stderr
    before = {p.name: p.read_text() for p in (w / "results/tables").glob("*.csv")}
    r = snakemake(snakemake_bin, root, w, timeout=1500)
    out = r.stdout + r.stderr
    for d in dirs:
        assert f"headgeom: {d} is damaged" in out, out[-4000:]
    assert "Error in rule" not in out and "Removing output files of failed job" not in out, out[-4000:]
    assert {p.name: p.read_text() for p in (w / "results/tables").glob("*.csv")} == before
    v = subprocess.run([sys.executable, "-m", "headgeom.cli", "verify", "-d", str(w), "--configfile",
                        str(w / "cfg.yaml")], capture_output=True, text=True)
    assert v.returncode == 0, v.stdout + v.stderr
