"""The rule files' helpers (headgeom.rules) where they hold logic: the command-line modes read
before Snakemake's settings exist, the shared wildcard patterns, the fetch's locating keys and
cache key, a bare --cache widened, the base/instruct pairs, the outputs' params under --report,
the alternatives' wildcard pattern, the ledger path, a model in two lineages."""

from __future__ import annotations

import json
import os
import re
from types import SimpleNamespace

import pytest

from headgeom import targets
from headgeom.core.errors import ConfigError
from headgeom.schedule.families import JOBS
from headgeom.core.config import load_config
from headgeom.core.config import shared_lineage_members
from headgeom.commands.check import check
from headgeom.outputs import OUTPUTS
from headgeom.rules import fetch, outputs, sensitivity, start
from headgeom.rules.claims import claims_ledger


@pytest.mark.parametrize("argv, keep_going, report", [
    (["snakemake", "-c1"], False, False),
    (["snakemake", "--keep-going"], True, False),
    (["snakemake", "-k", "-n"], True, False),
    (["snakemake", "-nk"], True, False),         # within a group of short flags
    (["snakemake", "--keep-incomplete"], False, False),
    (["snakemake", "--report"], False, True),
    (["snakemake", "--report=out.html", "-k"], True, True),
    (["snakemake", "--report-stylesheet", "x.css"], False, False),
    (["snakemake", "results/k.csv"], False, False),  # a target, not a flag
])
def test_the_command_line_modes(argv, keep_going, report):
    assert start.command_line(argv) == start.CommandLine(keep_going=keep_going, report=report)
    assert start.reporting(argv) is report


def test_lint_mode_is_snakemakes_setting():
    assert start.linting(SimpleNamespace(check_envvars=False))
    assert not start.linting(SimpleNamespace(check_envvars=True))


def test_wildcard_patterns_match_exactly_the_configured_names():
    p = start.wildcard_patterns({"models": {"a.b": {}, "c+d": {}}, "texts": {}})
    model = re.compile(f"(?:{p['model']})$")
    assert model.match("a.b") and model.match("c+d")
    assert not model.match("axb") and not model.match("ccd")
    assert p["corpus"] == "NO_CORPUS"
    assert re.fullmatch(p["layer"], "12") and not re.fullmatch(p["layer"], "1a")


def test_the_fetch_params_keep_only_the_locating_keys_and_key_a_local_checkpoint(tmp_path):
    ckpt = tmp_path / "ckpt"
    (ckpt / "sub").mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    (ckpt / "sub" / "w.safetensors").write_bytes(b"12345")
    cfg = {"models": {"m": {"source": "local", "path": str(ckpt), "notes": "x", "pair": "n"}}}
    wc = SimpleNamespace(model="m")
    assert fetch.checkpoint_entry(cfg)(wc) == {"source": "local", "path": str(ckpt)}
    key = fetch.source_key(cfg)(wc)
    st = os.stat(ckpt / "sub" / "w.safetensors")
    assert ["sub/w.safetensors", 5, st.st_mtime_ns] in key["files"] and len(key["files"]) == 2
    wf = SimpleNamespace(workflow_settings=SimpleNamespace(cache=None))
    assert list(fetch.fetch_params(wf, cfg)) == ["entry"]
    wf.workflow_settings.cache = []
    assert list(fetch.fetch_params(wf, cfg)) == ["cache_key", "entry"]


def test_a_bare_cache_names_the_cacheable_rules():
    wf = SimpleNamespace(workflow_settings=SimpleNamespace(cache=[]))
    fetch.widen_bare_cache(wf)
    assert wf.workflow_settings.cache[0] == "fetch"
    assert set(wf.workflow_settings.cache[1:]) == {n for n, j in JOBS.items() if j.cache}
    named = SimpleNamespace(workflow_settings=SimpleNamespace(cache=["fetch"]))
    fetch.widen_bare_cache(named)
    assert named.workflow_settings.cache == ["fetch"]
    off = SimpleNamespace(workflow_settings=SimpleNamespace(cache=None))
    fetch.widen_bare_cache(off)
    assert off.workflow_settings.cache is None


def test_base_instruct_pairs_need_both_sides_active_and_in_the_pk_stage():
    cfg = load_config()
    a, b, c = cfg["active_models"][:3]
    cfg["models"][b]["pair"] = a   # declared from one side only
    cfg["models"][c]["pair"] = "not-active"
    assert outputs.base_instruct_pairs(cfg) == [tuple(sorted((a, b)))]
    cfg["designs"] = {a: {"stages": ["paper1"]}}
    assert outputs.base_instruct_pairs(cfg) == []


def test_under_report_an_outputs_params_are_those_it_was_built_with(tmp_path, monkeypatch):
    cfg = load_config()
    out = next(o for o in OUTPUTS.values() if o.params and targets.builder_models(o, cfg))
    key = next(iter(out.params))
    monkeypatch.chdir(tmp_path)
    prov = tmp_path / out.paths()["prov"]
    prov.parent.mkdir(parents=True)
    prov.write_text(json.dumps({"params": {key: "as built"}}))
    monkeypatch.setattr("sys.argv", ["snakemake"])
    assert outputs.output_params(cfg, out)[key] != "as built"
    monkeypatch.setattr("sys.argv", ["snakemake", "--report", "r.html"])
    got = outputs.output_params(cfg, out)
    assert got[key] == "as built"
    assert got["output"] == [out.kind, out.name] and got["models"] == targets.builder_models(out, cfg)


def test_the_alternatives_pattern_names_only_its_kinds():
    alts = {"a.b=1": SimpleNamespace(kind="tables"), "c=x": SimpleNamespace(kind="shards")}
    assert sensitivity.alternative_pattern(alts, "tables") == re.escape("a.b=1")
    assert re.fullmatch(sensitivity.alternative_pattern(alts, "tables"), "a.b=1")
    assert not re.fullmatch(sensitivity.alternative_pattern(alts, "tables"), "axb=1")
    assert sensitivity.alternative_pattern(alts, "forward") == "NO_ALTERNATIVE"


def test_the_ledger_is_named_relative_to_the_work_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    wf = SimpleNamespace(basedir=str(tmp_path))
    assert claims_ledger(wf, {}) == os.path.join("config", "claims.yaml")
    assert claims_ledger(wf, {"claims": {"ledger": "/elsewhere/l.yaml"}}) == "/elsewhere/l.yaml"


def test_a_model_in_two_lineages_is_one_config_line_before_any_job():
    cfg = load_config()
    a, b = cfg["active_models"][:2]
    cfg["paper1"]["lineages"] = {"x": [a], "y": [b, a]}
    want = f"config: paper1.lineages: model {a!r} is in both 'x' and 'y'"
    assert shared_lineage_members(cfg) == [want]
    assert [p.line() for p in check(cfg) if p.what == "config"] == [want]
    with pytest.raises(ConfigError, match="is in both 'x' and 'y'"):
        targets.lineages(cfg)


def test_an_unknown_null_type_is_one_config_line_naming_its_key():
    cfg = load_config(overrides={"pk": {"nulls": {"types": ["rotation", "reasign"]}}})
    lines = [p.line() for p in check(cfg)]
    assert len(lines) == 1 and lines[0].startswith("config: pk.nulls.types names ['reasign']"), lines
