"""The targets of `snakemake all` come from one function (headgeom.targets.all_targets), and every
path pattern from headgeom.layout."""

from __future__ import annotations

from headgeom import layout, targets
from headgeom.schedule.families import SHARD_FAMILIES, STEPS
from headgeom.core.config import load_config
from headgeom.outputs import OUTPUTS


def test_all_targets_are_the_built_outputs_then_claims_then_macros_then_the_summary():
    cfg = load_config()
    got = targets.all_targets(cfg)
    outs = [o for o in OUTPUTS.values() if targets.builder_models(o, cfg)]
    n = sum(len(o.paths()) for o in outs)
    assert got[:n] == [p for o in outs for p in o.paths().values()]
    assert got[n:] == [f"results/tables/{t}.{e}" for t in ("claims", "choice_sensitivity")
                       for e in ("csv", "md", "tex", "html", "prov.json")] + [
        "results/tables/claims_macros.tex", "results/tables/cell_macros.tex", "results/summary.md"]
    assert len(set(got)) == len(got)


def test_outputs_of_a_stage_that_does_not_run_are_not_targets():
    on = load_config(overrides={"activation": {"enabled": True, "models": None}})
    off = load_config(overrides={"activation": {"enabled": False}})
    act = [o for o in OUTPUTS.values() if o.builder_models == "activation"]
    assert act and targets.output_models(off)["activation"] == []
    assert all(p in targets.all_targets(on) for o in act for p in o.paths().values())
    assert not any(p in targets.all_targets(off) for o in act for p in o.paths().values())
    pk_off = load_config(overrides={"designs": {m: {"stages": ["paper1"]} for m in on["active_models"]}})
    pk = [o for o in OUTPUTS.values() if o.paper == "PK paper" and o.builder_models == "active"]
    assert pk and not any(o.paths()["prov"] in targets.all_targets(pk_off) for o in pk)
    assert targets.built_tables(pk_off) < targets.built_tables(on)


def test_paths_are_the_layout_patterns():
    for fam in SHARD_FAMILIES.values():
        assert fam.path == layout.shard(fam.name, fam.grain)
    assert STEPS["fetch"].outputs == {"manifest": layout.MANIFEST, "tensors": layout.TENSORS}
    assert STEPS["activation_forward"].output(model="m", corpus="c", nwin=2, win=8) == "results/activations/m/c/2x8"
    assert layout.manifest("m") == "results/tensors/m/manifest.json"


def test_lineages_name_their_final_checkpoint_and_refuse_unknown_or_shared_models():
    import pytest

    from headgeom.core.errors import ConfigError

    cfg = load_config()
    a, b = cfg["active_models"][:2]
    cfg["paper1"]["lineages"] = {"run": [b, a]}
    assert targets.final_model(cfg, b) == a and targets.final_model(cfg, a) == a
    assert targets.output_models(cfg)["lineages"] == [b, a]
    cfg["paper1"]["lineages"] = {"run": [b, "nope"]}
    with pytest.raises(ConfigError, match=r"paper1\.lineages\.run names \['nope'\]"):
        targets.final_model(cfg, b)
    cfg["paper1"]["lineages"] = {"x": [a], "y": [a, b]}
    with pytest.raises(ConfigError, match="is in both 'x' and 'y'"):
        targets.lineages(cfg)
