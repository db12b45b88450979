"""A shard family added through the registry alone (tests/helpers/toy_family.py, named in
HEADGEOM_PLUGINS): the registry, the scopes and `headgeom plan` pick it up with no package edit.
Run in a subprocess, so that the toy job never joins this session's registry."""

from __future__ import annotations

import json
import subprocess
import sys

from plugins import plugin_env

SHAPE = {"n_layers": 3, "d_model": 48, "n_heads": 4, "n_kv_heads": 2, "d_head": 12}


def test_plugin_job_is_registered_scheduled_and_planned(tmp_path):
    code = ("import json, sys; from headgeom.schedule import families as F, designs; F.load_plugins(); "
            "from headgeom.core.config import load_config; c = load_config([sys.argv[1]]); "
            "print(json.dumps({'job': F.family('toy_wo_norm').job, "
            "'wc': designs.job_wildcards('toy_wo_norm', c, 'm', json.loads(sys.argv[2])), "
            "'paths': designs.shard_paths('toy_wo_norm', c, 'm', json.loads(sys.argv[2]))}))")
    cfg = tmp_path / "cfg.yaml"
    cfg.write_text(json.dumps({"models": {"m": {"source": "local", "path": "x", "shape": SHAPE}}, "active_models": ["m"]}))
    r = subprocess.run([sys.executable, "-c", code, str(cfg), json.dumps(SHAPE)], env=plugin_env(),
                       capture_output=True, text=True, check=True)
    got = json.loads(r.stdout)
    assert got["job"] == "toy_wo_norm" and got["wc"] == [{"layer": 0}, {"layer": 1}, {"layer": 2}]
    assert got["paths"] == [f"results/shards/toy_wo_norm/m/layer{l}.parquet" for l in range(3)]

    plan = subprocess.run([sys.executable, "-m", "headgeom.cli", "plan", "--configfile", str(cfg), "-d", str(tmp_path)],
                          env=plugin_env(), capture_output=True, text=True, check=True).stdout
    row = next(line for line in plan.splitlines() if line.startswith("toy_wo_norm"))
    # 3 jobs of the toy cost model (600 MiB, 5 min each): 0.25 core-hours requested, printed 0.2; a cost
    # model that states no work (work_s) is expected to use what it requests
    assert row.split()[:5] == ["toy_wo_norm", "3", "0.2", "0.2", "600"], row
    assert "results/shards/toy_wo_norm/m/layer0.parquet" in row

    # a stage the model's design turns off drops the plugin's jobs, as it drops the built-in ones
    cfg.write_text(json.dumps({"models": {"m": {"source": "local", "path": "x", "shape": SHAPE}}, "active_models": ["m"],
                               "designs": {"m": {"stages": ["pk"]}}}))
    r = subprocess.run([sys.executable, "-c", code, str(cfg), json.dumps(SHAPE)], env=plugin_env(),
                       capture_output=True, text=True, check=True)
    assert json.loads(r.stdout)["wc"] == []


def test_a_plugin_clashing_with_a_registered_name_is_refused(tmp_path):
    (tmp_path / "clash.py").write_text(
        "from headgeom.schedule.families import JOBS, Job, register\n"
        "j = JOBS['pk_within_layer']\n"
        "register(Job('pk_within_layer2', j.run, {'shard': ('pk_within', 'layer')}, {}, j.cost_model, 'none', 'logs/x.log'))\n")
    r = subprocess.run([sys.executable, "-c", "from headgeom.schedule.families import load_plugins; load_plugins()"],
                       env=plugin_env("clash", tmp_path), capture_output=True, text=True)
    assert r.returncode != 0 and "already registered" in r.stderr


def test_plugins_load_where_an_entry_point_loads_them_not_on_import(tmp_path):
    """Importing the registry registers no plugin; ``load_plugins`` does (once, however often it is
    called), and so do the entry points: the command line (a module it cannot import is one line of
    the project's error) and ``headgeom.api.load``, before it reads anything."""
    code = ("import json, sys; from headgeom.schedule import families as F; before = 'toy_wo_norm' in F.JOBS; "
            "mods = F.load_plugins(); F.load_plugins(); "
            "print(json.dumps([before, 'toy_wo_norm' in F.JOBS, 'toy_family' in sys.modules, mods]))")
    r = subprocess.run([sys.executable, "-c", code], env=plugin_env(), capture_output=True, text=True, check=True)
    assert json.loads(r.stdout) == [False, True, True, ["toy_family"]]
    # a module that does not exist: one line of the project's own error, naming the variable
    r = subprocess.run([sys.executable, "-m", "headgeom.cli", "plan", "--models", "none"],
                       env=plugin_env("no_such_plugin_module"), capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        "headgeom: HEADGEOM_PLUGINS names the module 'no_such_plugin_module', which is not importable (PYTHONPATH?)"], r.stderr
    # the API's entry point loads them before it reads the registry
    code = ("import json, sys\nimport headgeom.api as hg\nfrom headgeom.schedule import families as F\n"
            "try:\n    hg.load(sys.argv[1])\nexcept Exception:\n    pass\nprint(json.dumps('toy_wo_norm' in F.JOBS))")
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "none")], env=plugin_env(), capture_output=True,
                       text=True, check=True)
    assert json.loads(r.stdout) is True
