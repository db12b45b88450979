"""Every config error before any job, in one place: each bad config below stops the workflow
with its one problem line before any job runs (nothing fetched, no results, no incomplete
marker), and ``headgeom check`` prints the same line (both call headgeom.commands.check.check)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from synth import write_llama
from tinyrun import CFG

pytestmark = pytest.mark.slow

# name -> (config text merged over the run's config, what its line must say)
CASES = {
    "rank_rtol": ("rank_rtol: 1e-6\n", "rank_rtol: '1e-6' is not of type 'number' (YAML reads 1e-6 as text"),
    "within_samples": ("pk:\n  nulls:\n    within_samples: -3\n", "pk.nulls.within_samples: -3 is less than"),
    "by_layer_null": ("pk:\n  nulls:\n    by_layer:\n      - layers: [0]\n        types: [rotaton]\n",
                      "pk.nulls.by_layer[0].types names ['rotaton'], which are not null models"),
    "types_null": ("pk:\n  nulls:\n    types: [rotation, reasign]\n",
                   "pk.nulls.types names ['reasign'], which are not null models"),
    "text_bin": ("models:\n  tiny:\n    source: local\n    path: {w}/model.bin\n",
                 "model.bin is named like a pickle checkpoint but is a 6-byte text file"),
    "safetensors_file": ("models:\n  tiny:\n    source: local\n    path: {w}/ckpt/model-00001-of-00002.safetensors\n",
                         "is a single .safetensors file"),
    "system_file": ("models:\n  tiny:\n    source: local\n    path: /etc/passwd\n", "/etc/passwd is a "),
    "layers": ("pk:\n  layers: [0, 99999]\n", "pk.layers of 'tiny': layer 99999 is outside the model (layers 0..1)"),
    "rho_layer_high": ("figures:\n  pk_rho_layer: 99999\n", "figures.pk_rho_layer: layer 99999 is outside the model"),
    "rho_layer_low": ("figures:\n  pk_rho_layer: -99999\n", "figures.pk_rho_layer: layer -99999 is outside the model"),
    "yaml_syntax": ("pk:\n  kinds: [O, Q\n", "is not valid YAML"),
    "typo_nested": ("pk:\n  nulls:\n    within_sampels: 2\n", "pk.nulls: Additional properties are not allowed"),
    "typo_top": ("bootsrap: 100\n", "(top level): Additional properties are not allowed ('bootsrap'"),
    "empty_active": ("active_models: []\n", "active_models: [] should be non-empty"),
    "shared_lineage": ("paper1:\n  lineages:\n    x: [tiny]\n    y: [tiny]\n",
                       "paper1.lineages: model 'tiny' is in both 'x' and 'y'"),
    "duplicate_key": ("pk:\n  kinds: [O]\n  self_permutations: 10\n  kinds: [Q]\n",
                      "duplicate_key.yaml: key 'pk.kinds' is written twice (lines 2 and 4); a YAML loader would "
                      "keep the value of line 4 silently: keep one"),
    "renamed_key": ("scopes:\n  tiny:\n    stages: [pk]\n",
                    "config: scopes: renamed to 'designs' (the same entries under the new key)"),
    "renamed_model_key": ("models:\n  tiny:\n    scope:\n      stages: [pk]\n",
                          "config: models.tiny.scope: renamed to 'models.tiny.design'"),
    "slash_name": ("models:\n  a/b:\n    source: local\n    path: {w}/ckpt\nactive_models: [a/b]\n",
                   "models: 'a/b' does not match"),
}


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    w = tmp_path_factory.mktemp("cfgerr")
    write_llama(w / "ckpt", closed=((0, 0, 1.5),), shards=2)
    (w / "model.bin").write_text("hello\n")
    cfg = {"models": {"tiny": {"source": "local", "path": str(w / "ckpt")}}, **CFG}
    (w / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    for name, (text, _) in CASES.items():
        (w / f"{name}.yaml").write_text(text.format(w=w))
    return w


def _problem_lines(text: str, prefix: str) -> list[str]:
    return [ln[len(prefix):] for ln in text.splitlines()
            if ln.startswith(prefix) and "found before any job ran" not in ln]


def _both(w: Path, name: str, snakemake_bin: str, root: Path):
    wf = subprocess.run([snakemake_bin, "-s", str(root / "Snakefile"), "-d", str(w), "-c1",
                         "--configfile", "cfg.yaml", f"{name}.yaml"], cwd=w, capture_output=True, text=True,
                        timeout=300)
    ck = subprocess.run([sys.executable, "-m", "headgeom.cli", "check", "-d", str(w),
                         "--configfile", "cfg.yaml", f"{name}.yaml"], cwd=w, capture_output=True, text=True,
                        timeout=300)
    return name, wf, ck


def test_each_config_error_is_one_line_before_any_job_and_the_same_from_check(workdir, snakemake_bin, root):
    with ThreadPoolExecutor(2) as ex:
        runs = list(ex.map(lambda n: _both(workdir, n, snakemake_bin, root), CASES))
    for name, wf, ck in runs:
        wf_out, ck_out = wf.stdout + wf.stderr, ck.stdout + ck.stderr
        wf_lines, ck_lines = _problem_lines(wf_out, "headgeom: "), _problem_lines(ck_out, "headgeom check: ")
        assert wf.returncode != 0 and ck.returncode != 0, (name, wf_out[-2000:], ck_out)
        assert len(wf_lines) == 1, (name, wf_out[-3000:])
        assert wf_lines == ck_lines, (name, wf_lines, ck_lines)
        assert CASES[name][1] in wf_lines[0], (name, wf_lines[0])
        assert "Traceback" not in wf_out and "rule fetch" not in wf_out and "localrule" not in wf_out, (name, wf_out)
    # nothing ran: no results, no incomplete marker
    assert not (workdir / "results").exists()
    assert not list((workdir / ".snakemake").glob("incomplete/*"))


def _copy_of_the_workflow(root: Path, d: Path) -> Path:
    """A work directory holding a copy of the workflow: its Snakefile reads d/config/config.yaml."""
    d.mkdir()
    shutil.copy(root / "Snakefile", d / "Snakefile")
    for sub in ("workflow", "config", "envs"):
        shutil.copytree(root / sub, d / sub)
    return d


def test_check_d_checks_the_config_the_workflow_in_that_directory_reads(tmp_path, snakemake_bin, root):
    d = _copy_of_the_workflow(root, tmp_path / "copy")
    cfg = d / "config" / "config.yaml"
    text = cfg.read_text()
    assert "rank_rtol: 1.0e-6" in text
    # two schema problems: each its own line, and the total counts both
    cfg.write_text(text.replace("rank_rtol: 1.0e-6", "rank_rtol: 1e-6") + "bootsrap: 100\n")
    for edit in ("two problems", "duplicate"):
        if edit == "duplicate":
            cfg.write_text(text + "backend: numpy\n")
        wf = subprocess.run([snakemake_bin, "-n", "-c1"], cwd=d, capture_output=True, text=True, timeout=300)
        ck = subprocess.run([sys.executable, "-m", "headgeom.cli", "check", "-d", str(d)], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
        wf_out, ck_out = wf.stdout + wf.stderr, ck.stdout + ck.stderr
        wf_lines, ck_lines = _problem_lines(wf_out, "headgeom: "), _problem_lines(ck_out, "headgeom check: ")
        assert wf.returncode != 0 and ck.returncode == 2, (edit, wf_out[-3000:], ck_out)
        assert wf_lines == ck_lines, (edit, wf_lines, ck_lines)
        n = 2 if edit == "two problems" else 1
        assert len(wf_lines) == n, (edit, wf_lines)
        total = f"{n} problem{'s' if n > 1 else ''} found before any job ran"
        assert f"headgeom: {total}" in wf_out and f"headgeom check: {total}" in ck_out, (wf_out[-2000:], ck_out)
        assert "more problem" not in wf_out + ck_out
        if edit == "duplicate":
            line = len(text.splitlines()) + 1
            assert wf_lines == [f"config: {cfg}: key 'backend' is written twice (lines "
                                f"{next(i for i, ln in enumerate(text.splitlines(), 1) if ln.startswith('backend:'))} "
                                f"and {line}); a YAML loader would keep the value of line {line} silently: keep one"]
        else:
            assert any("rank_rtol: '1e-6' is not of type 'number'" in ln for ln in wf_lines), wf_lines
            assert any("'bootsrap'" in ln for ln in wf_lines), wf_lines
