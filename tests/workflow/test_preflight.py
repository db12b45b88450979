"""Errors where the user looks: the pre-flight check, the end-of-run error lines, the config lines.

* a config with a wrong local path, a checkpoint without config.json, a truncated safetensors
  file, an unknown architecture, a model without a tokenizer for the activation stage and a
  missing corpus: every problem is listed, one line each naming the model (or corpus) and the
  stage, before any job runs (`snakemake` and `headgeom check` alike; exit 2 for the latter);
* `headgeom check` passes the default config (`make run`'s);
* a job that fails (its checkpoint passes the header check but lacks a layer; or a fault
  injected into a per-layer job) ends the run with its own one-line error on the console;
* a target written after --configfile is named in one line, not a traceback;
* nested --config values are typed as YAML types them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from faults import fault_env
from synth import write_llama

SLOW = pytest.mark.slow


@pytest.fixture(scope="module")
def stub_bin(tmp_path_factory) -> Path:
    """An ``scontrol`` that fails at once (test_faults.py: the SLURM plugin asks it at startup)."""
    d = tmp_path_factory.mktemp("stub-bin")
    (d / "scontrol").write_text("#!/bin/sh\nexit 1\n")
    (d / "scontrol").chmod(0o755)
    return d


def _env(stub: Path, **extra) -> dict:
    return {**os.environ, "PATH": os.pathsep.join([str(stub), os.environ.get("PATH", "")]), **extra}


def _snake(snakemake_bin, root, workdir, *args, stub, env_extra=None, configfile="cfg.yaml", timeout=300):
    cmd = [snakemake_bin, *args, "-s", str(root / "Snakefile"), "-d", str(workdir), "-c2",
           "--configfile", str(workdir / configfile)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(stub, **(env_extra or {})))
    return r.returncode, r.stdout + r.stderr


def _headgeom(*args, cwd=None):
    exe = Path(sys.executable).parent / "headgeom"
    r = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=300, cwd=cwd)
    return r.returncode, r.stdout + r.stderr


# --------------------------------------------------------------------------- every problem at once


# model or corpus -> (stage in its line, what the line must say)
EXPECTED = {
    "model 'wrongpath'": ("(fetch)", "does not exist"),
    "model 'nocfg'": ("(fetch)", "has no config.json"),
    "model 'trunc'": ("(fetch)", "model.safetensors"),
    "model 'arch'": ("(fetch)", "unknown architecture 'mamba_hybrid_xl'"),
    "model 'notok'": ("(activation stage only: its weight stages would run)", "no usable tokenizer"),
    "corpus 'mine'": ("(activation stage, activation.paper1.corpus)", "missing.txt does not exist"),
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory) -> Path:
    w = tmp_path_factory.mktemp("preflight")
    for name in ("nocfg", "trunc", "arch", "notok"):
        write_llama(w / name)
    (w / "nocfg/config.json").unlink()
    f = w / "trunc/model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])  # header intact, data cut short
    cfg = json.loads((w / "arch/config.json").read_text())
    cfg["model_type"] = "mamba_hybrid_xl"
    (w / "arch/config.json").write_text(json.dumps(cfg))
    models = {"wrongpath": {"source": "local", "path": str(w / "no-such-dir")},
              **{n: {"source": "local", "path": str(w / n)} for n in ("nocfg", "trunc", "arch", "notok")}}
    (w / "cfg.yaml").write_text(yaml.safe_dump({
        "models": models, "active_models": list(models),
        "texts": {"mine": {"source": "local", "path": str(w / "missing.txt")}},
        "activation": {"models": ["notok"], "paper1": {"corpus": "mine"}}}))
    return w


def _problem_lines(out: str, prefix: str) -> dict[str, str]:
    found = {}
    for line in out.splitlines():
        for who in EXPECTED:
            if line.startswith(f"{prefix}: {who} "):
                assert who not in found, f"{who} listed twice:\n{out}"
                found[who] = line[len(prefix) + 2:]
    return found


def _assert_all_listed(out: str, prefix: str) -> dict[str, str]:
    found = _problem_lines(out, prefix)
    assert set(found) == set(EXPECTED), out[-6000:]
    for who, (stage, what) in EXPECTED.items():
        assert stage in found[who] and what in found[who], (who, found[who])
    assert f"{prefix}: {len(EXPECTED)} problems found before any job ran" in out, out[-3000:]
    return found


@SLOW
def test_every_problem_is_listed_before_any_job_runs(snakemake_bin, root, stub_bin, broken):
    rc, out = _snake(snakemake_bin, root, broken, stub=stub_bin)
    assert rc != 0, out[-3000:]
    _assert_all_listed(out, "headgeom")
    # no job was started and nothing was written
    assert not (broken / "results").exists() and not (broken / "logs").exists(), out[-3000:]
    assert "rule fetch:" not in out and "Job stats" not in out and "jobid:" not in out, out[-3000:]


@SLOW
def test_headgeom_check_lists_the_same_problems_and_exits_2(snakemake_bin, root, stub_bin, broken, tmp_path):
    rc, out = _headgeom("check", "--configfile", str(broken / "cfg.yaml"), "-d", str(broken), cwd=tmp_path)
    assert rc == 2, out
    from_check = _assert_all_listed(out, "headgeom check")
    rc2, out2 = _snake(snakemake_bin, root, broken, "-n", stub=stub_bin)
    assert rc2 != 0 and _problem_lines(out2, "headgeom") == from_check, out2[-3000:]


def test_headgeom_check_passes_the_default_config(tmp_path):
    rc, out = _headgeom("check", cwd=tmp_path)
    assert rc == 0, out
    assert out.startswith("headgeom check: no problems") and "minilm-l6" in out, out


def test_headgeom_check_of_one_good_model(tmp_path):
    write_llama(tmp_path / "ckpt")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "models": {"tiny": {"source": "local", "path": "ckpt"}}, "active_models": ["tiny"]}))
    rc, out = _headgeom("check", "--configfile", "cfg.yaml", cwd=tmp_path)
    assert rc == 0, out
    # a relative path is relative to the work directory (-d), as for snakemake -d
    rc, out = _headgeom("check", "--configfile", str(tmp_path / "cfg.yaml"), "-d", str(tmp_path / "ckpt"), cwd=tmp_path)
    assert rc == 2 and "model 'tiny' (fetch): local checkpoint path ckpt does not exist" in out, out


def test_hub_model_offline_without_a_cache_is_named(tmp_path, monkeypatch):
    from headgeom.commands.check import problems
    from headgeom.core.config import load_config

    cfg = load_config([], {"models": {"g": {"source": "hf", "repo_id": "org/none", "revision": "main"}},
                           "active_models": ["g"]})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr("headgeom.commands.check._offline", lambda: False)
    assert problems(cfg) == []  # online: the hub is asked at fetch, never when the workflow loads
    monkeypatch.setattr("headgeom.commands.check._offline", lambda: True)
    [p] = problems(cfg)
    assert p.name == "g" and "HF_HUB_OFFLINE is set" in p.line() and str(tmp_path / "hub") in p.line()


# --------------------------------------------------------------------------- a failing job's own error


@pytest.fixture
def tiny(tmp_path) -> Path:
    write_llama(tmp_path / "ckpt")
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump({
        "models": {"tiny": {"source": "local", "path": str(tmp_path / "ckpt")}}, "active_models": ["tiny"]}))
    return tmp_path


def _end_lines(out: str) -> list[str]:
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("headgeom: failed jobs"))
    return [ln.strip() for ln in lines[start + 1:] if ln.startswith("  ")]


@SLOW
def test_failing_fetch_prints_its_error_at_the_end(snakemake_bin, root, stub_bin, tiny):
    """The checkpoint's headers are sound (the pre-flight check passes) but its config claims a
    third layer: the fetch job fails with a CheckpointError, whose line ends the console output."""
    cfg = json.loads((tiny / "ckpt/config.json").read_text())
    cfg["num_hidden_layers"] = 3
    (tiny / "ckpt/config.json").write_text(json.dumps(cfg))
    rc, out = _snake(snakemake_bin, root, tiny, "results/tables/p1_table2_strong_tail.csv", stub=stub_bin)
    assert rc != 0, out[-3000:]
    want = ("fetch (model=tiny): tiny: checkpoint lacks tensors the adapter needs: layer 2: "
            "model.layers.2.self_attn.q_proj.weight  [log: logs/fetch/tiny.log]")
    assert _end_lines(out) == [want], out[-3000:]
    assert "headgeom error: tiny: checkpoint lacks tensors" in (tiny / "logs/fetch/tiny.log").read_text()


@SLOW
def test_failing_layer_jobs_print_their_errors_at_the_end(snakemake_bin, root, stub_bin, tiny):
    rc, out = _snake(snakemake_bin, root, tiny, "results/tables/p1_table2_strong_tail.csv", stub=stub_bin,
                     env_extra=fault_env(HEADGEOM_TEST_FAIL_FIRST_ATTEMPT="paper1_heads"))
    assert rc != 0, out[-3000:]
    msg = "RuntimeError: paper1_heads: attempt 1 failed on purpose (HEADGEOM_TEST_FAIL_FIRST_ATTEMPT)"
    assert sorted(_end_lines(out)) == [
        f"paper1_heads (model=tiny, layer={layer}): {msg}  [log: logs/paper1/heads/tiny/layer{layer}.log]"
        for layer in (0, 1)], out[-3000:]


def test_failed_jobs_read_from_snakemake_log():
    from headgeom.core.logs import failed_jobs

    text = "\n".join([
        "localrule paper1_heads:", "    log: logs/a/0.log", "    jobid: 4", "    wildcards: model=m, layer=0",
        "rule pk_within_layer:", "    log: logs/b/0.log", "    jobid: 7", "    wildcards: model=m, layer=0",
        "Error in rule pk_within_layer:", "    message: None", "    jobid: 7",
        "    log: logs/b/0.log (check log file(s) for error details)",
        "Trying to restart job 7.", "Finished jobid: 7 (Rule: pk_within_layer)",  # a retry that succeeded
        "Error in rule paper1_heads:", "    message: None", "    jobid: 4",
        "    log: logs/a/0.log (check log file(s) for error details)",
        "Shutting down, this might take some time."])
    assert failed_jobs(text) == [{"rule": "paper1_heads", "jobid": "4", "wildcards": "model=m, layer=0",
                                  "log": ["logs/a/0.log"]}]


# --------------------------------------------------------------------------- config lines


@SLOW
def test_target_after_configfile_is_one_line(snakemake_bin, root, stub_bin, tiny):
    from headgeom.core.cliguard import PTH_LINE

    import sysconfig

    pth = Path(sysconfig.get_paths()["purelib"]) / "headgeom-cliguard.pth"
    assert pth.is_file() and pth.read_text() == PTH_LINE, "run `make .venv/.installed` (it writes the .pth file)"
    (tiny / "results/tables").mkdir(parents=True)
    (tiny / "results/tables/p1_table2_strong_tail.csv").write_text("model,heads\ntiny,8\n")
    (tiny / "results/fig.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff")
    for target in ("results/tables/p1_table2_strong_tail.csv", "results/fig.png", "results/tables/not_built_yet.csv"):
        cmd = [snakemake_bin, "-s", str(root / "Snakefile"), "-c2", "--configfile", "cfg.yaml", target]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tiny, env=_env(stub_bin))
        out = (r.stdout + r.stderr).strip()
        assert r.returncode != 0 and out == (
            f"headgeom: {target} is not a config file: a target after --configfile is read as one; "
            "put targets before --configfile"), out[-3000:]
    rc, out = _headgeom("check", "--configfile", "cfg.yaml", "results/fig.png", cwd=tiny)
    assert rc == 2 and "results/fig.png is not a config file" in out and "Traceback" not in out, out


def test_configfile_words_and_verdicts(tmp_path):
    from headgeom.core.cliguard import configfile_words, not_a_config_file

    assert configfile_words(["-c2", "--configfile", "a.yaml", "b.csv", "-n", "t"]) == ["a.yaml", "b.csv"]
    assert configfile_words(["--configfile=a.yaml", "t.csv"]) == ["a.yaml"]
    (tmp_path / "ok.yaml").write_text("active_models: [x]\n")
    (tmp_path / "list.yaml").write_text("- x\n")
    (tmp_path / "notes").write_text("just words\n")
    assert not_a_config_file(str(tmp_path / "ok.yaml")) is None
    assert not_a_config_file(str(tmp_path / "missing.yaml")) is None  # Snakemake names a missing config file
    assert "not a mapping" in not_a_config_file(str(tmp_path / "list.yaml"))
    assert "put targets before --configfile" in not_a_config_file(str(tmp_path / "notes"))
    assert "put targets before --configfile" in not_a_config_file("results/tensors/m/manifest.json")


def test_nested_config_values_are_typed_as_yaml():
    from snakemake.cli import parse_config

    from headgeom.core.config import typed_cli_config
    from headgeom.core.errors import ConfigError
    from headgeom.core.config import load_config

    cli = parse_config(["pk={nulls: {types: [rotation], within_samples: 4}}", "active_models=[minilm-l6]",
                        "activation={enabled: false}", "rank_rtol=1e-7"])
    assert cli["pk"]["nulls"]["within_samples"] == "4"  # what Snakemake hands over
    cfg = load_config([], cli)
    typed_cli_config(cfg, cli)
    assert cfg["pk"]["nulls"] == {**load_config()["pk"]["nulls"], "types": ["rotation"], "within_samples": 4}
    assert cfg["activation"]["enabled"] is False and cfg["active_models"] == ["minilm-l6"]
    assert cfg["rank_rtol"] == 1e-7 and cfg["pk"]["kinds"] == ["O", "Q", "K", "V"]
    with pytest.raises(ConfigError, match="not valid YAML"):
        typed_cli_config({}, parse_config(["pk={nulls: {types: [rotation]}"]))


@SLOW
def test_nested_config_value_passes_the_schema(snakemake_bin, root, stub_bin, tiny):
    rc, out = _snake(snakemake_bin, root, tiny, "-n", "results/tables/p1_table2_strong_tail.csv", stub=stub_bin)
    assert rc == 0, out[-3000:]
    cmd = [snakemake_bin, "-n", "-s", str(root / "Snakefile"), "-d", str(tiny), "-c2", "results/tables/p1_table2_strong_tail.csv",
           "--config", "pk={nulls: {within_samples: 4}}", "activation={enabled: false}",
           "--configfile", str(tiny / "cfg.yaml")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(stub_bin))
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]


@SLOW
def test_keep_going_lists_the_problems_and_runs_the_rest(snakemake_bin, root, stub_bin, broken):
    """--keep-going: the list is printed and the dry run schedules the models without problems."""
    cmd = [snakemake_bin, "-n", "-k", "-s", str(root / "Snakefile"), "-d", str(broken), "-c2",
           "--config", "active_models=[wrongpath,notok]", "--configfile", str(broken / "cfg.yaml")]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=_env(stub_bin))
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "headgeom: model 'wrongpath' (fetch): local checkpoint path" in out, out[-3000:]
    assert "headgeom: model 'notok' (activation stage only: its weight stages would run)" in out, out[-3000:]
    assert "found before any job ran; --keep-going: running what does not need them" in out, out[-3000:]
    assert "wildcards: model=notok" in out, out[-3000:]  # its fetch is scheduled


def test_a_job_that_failed_every_attempt_is_one_end_line(tmp_path):
    """Under a profile with retries a job fails once per attempt (a new jobid each time, as the
    SLURM executor reports it): the console gets its error once."""
    from headgeom.core.logs import MARKER, end_of_run_errors

    (tmp_path / "logs").mkdir()
    (tmp_path / "logs/f.log").write_text(f"Traceback ...\n{MARKER}bad checkpoint\n")
    block = ["Error in rule fetch:", "    message: None", "    jobid: {}", "    wildcards: model=m",
             f"    log: {tmp_path}/logs/f.log (check log file(s) for error details)"]
    text = "\n".join([*(ln.format(1) for ln in block), *(ln.format(9) for ln in block)])
    (tmp_path / "run.log").write_text(text)
    assert end_of_run_errors(str(tmp_path / "run.log")) == [
        f"fetch (model=m): bad checkpoint  [log: {tmp_path}/logs/f.log]"]
