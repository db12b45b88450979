"""Config files as the workflow and ``headgeom check`` read them: a key written twice in one
mapping is an error naming the key and both lines (YAML alone keeps the last value silently);
``headgeom check -d DIR`` reads DIR's config/config.yaml where DIR holds one, as the workflow run
in DIR does; every problem is a line of its own, and the total counts them."""

from __future__ import annotations

import shutil

import pytest
import yaml

from headgeom.cli import main as cli
from headgeom.commands import check as C
from headgeom.core.config import ROOT, duplicate_keys, load_config, workflow_root
from headgeom.core.errors import ConfigError

DUP = """\
rank_rtol: 1.0e-6
pk:
  nulls:
    types: [rotation]
    within_samples: 2
    types: [reassign]
  by_layer:
    - layers: [0]
      types: [rotation]
      layers: [1]
base: &b {x: 1}
other:
  <<: *b
  x: 2
rank_rtol: 2.0e-6
"""


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """The 1-based line of the nth line of ``text`` that starts (after indentation) with ``needle``."""
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if ln.lstrip(" -").startswith(needle)]
    return hits[nth - 1]


def test_every_repeated_key_is_found_with_both_lines():
    want = [("pk.nulls.types", line_of(DUP, "types: [rotation]"), line_of(DUP, "types: [reassign]")),
            ("pk.by_layer[0].layers", line_of(DUP, "layers: [0]"), line_of(DUP, "layers: [1]")),
            ("rank_rtol", line_of(DUP, "rank_rtol"), line_of(DUP, "rank_rtol", 2))]
    assert duplicate_keys(DUP) == want
    # the file is valid YAML that a loader takes silently, the last value winning
    assert yaml.safe_load(DUP)["rank_rtol"] == 2.0e-6
    # merged keys (<<) are meant to be overridden; one key in one mapping is no repeat
    assert duplicate_keys("a: {x: 1}\nb: {x: 1}\nc:\n  <<: {x: 1}\n  x: 2\n") == []
    assert duplicate_keys("a: [1\n") == []  # not YAML: its reader says so


def test_load_config_refuses_a_repeated_key(tmp_path):
    f = tmp_path / "my.yaml"
    f.write_text(DUP)
    with pytest.raises(ConfigError) as e:
        load_config([f])
    msg = str(e.value)
    assert f"config: {f}: key 'rank_rtol' is written twice (lines 1 and {line_of(DUP, 'rank_rtol', 2)})" in msg
    assert "key 'pk.nulls.types' is written twice (lines 4 and 6)" in msg


def test_check_names_each_repeated_key_and_counts_them(tmp_path, capsys):
    f = tmp_path / "my.yaml"
    f.write_text(DUP)
    assert cli(["check", "--configfile", str(f)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err[:-1] == [f"headgeom check: config: {f}: key '{k}' is written twice (lines {a} and {b}); a YAML loader "
                        f"would keep the value of line {b} silently: keep one" for k, a, b in duplicate_keys(DUP)]
    assert err[-1] == "headgeom check: 3 problems found before any job ran; fix the config"


def test_the_total_counts_every_schema_problem(tmp_path, capsys):
    f = tmp_path / "two.yaml"
    f.write_text("bootsrap: 100\nrank_rtol: -1\n")
    found = C.check(load_config([f]))
    assert len(found) == 2 and all(p.what == "config" for p in found)
    assert not any("more problem" in p.line() for p in found)
    assert cli(["check", "--configfile", str(f)]) == 2
    err = capsys.readouterr().err.splitlines()
    problems = [ln for ln in err if "found before any job ran" not in ln]
    assert len(problems) == 2, err
    assert any("'bootsrap'" in ln for ln in problems) and any("rank_rtol: -1" in ln for ln in problems), err
    assert err[-1] == "headgeom check: 2 problems found before any job ran; fix the config"


@pytest.fixture
def other_dir(tmp_path):
    """A work directory with a workflow copy's config/config.yaml of its own."""
    d = tmp_path / "run"
    (d / "config").mkdir(parents=True)
    shutil.copy(ROOT / "config" / "config.yaml", d / "config" / "config.yaml")
    return d


def test_check_d_reads_the_directorys_config(other_dir, tmp_path, capsys, monkeypatch):
    cfg = other_dir / "config" / "config.yaml"
    cfg.write_text(cfg.read_text().replace("rank_rtol: 1.0e-6", "rank_rtol: 1e-6"))
    assert workflow_root(other_dir) == other_dir.resolve()
    assert workflow_root(tmp_path) == ROOT
    monkeypatch.chdir(tmp_path)
    assert cli(["check", "-d", str(other_dir)]) == 2
    err = capsys.readouterr().err
    assert "headgeom check: config: rank_rtol: '1e-6' is not of type 'number'" in err, err
    # a repeated key in that file is named with its path
    cfg.write_text(cfg.read_text() + "backend: numpy\n")
    assert cli(["check", "-d", str(other_dir)]) == 2
    err = capsys.readouterr().err
    assert f"config: {cfg}: key 'backend' is written twice (lines {line_of(cfg.read_text(), 'backend')} and " in err


def test_check_d_of_a_directory_without_a_config_reads_the_packages(tmp_path):
    cfg = load_config(root=workflow_root(tmp_path))
    assert cfg == load_config()


def test_a_missing_config_file_is_a_config_error_naming_it(tmp_path):
    from headgeom.core.config import load_config_file
    from headgeom.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"config file .*nope\.yaml: No such file"):
        load_config_file(tmp_path / "nope.yaml")


def test_an_option_is_not_taken_for_a_longer_one_it_begins(capsys):
    """`headgeom plan --config ...` is refused, not read as --configfile (a file named by the value)."""
    from headgeom.cli import main

    with pytest.raises(SystemExit) as e:
        main(["plan", "--config", "pk={nulls: {precision: float32}}"])
    assert e.value.code == 2 and "unrecognized arguments: --config" in capsys.readouterr().err
