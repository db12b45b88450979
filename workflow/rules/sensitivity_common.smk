# Helpers of the choice-sensitivity rules (workflow/rules/claims.smk; headgeom.verify.sensitivity):
# the alternatives of this config, one job each (the switches: headgeom.outputs.choices).
from headgeom.verify import sensitivity as _sens

# every alternative of every switch, in the table's row order (alternative id -> what it rebuilds)
CHOICE_ALTS = {
    a.id: a for a in _sens.planned(config, targets.built_tables(config), ACT_MODELS)
}


def _alt_re(*kinds):
    """The wildcard pattern of the alternatives of these kinds (one rule per kind)."""
    ids = [i for i, a in CHOICE_ALTS.items() if a.kind in kinds]
    return "|".join(re.escape(i) for i in ids) or "NO_ALTERNATIVE"


def _alt_inputs(wc):
    """The ledger's tables (the claims are judged on them) and the sidecars of the tables the
    alternative rebuilds (which list their shards); for window cutting, its forward passes.
    """
    a = CHOICE_ALTS[wc.alt]
    return {
        "ledger": CLAIMS_LEDGER,
        "tables": [layout.table_files(t)["csv"] for t in CLAIMS_TABLES],
        "provs": [layout.table_files(t)["prov"] for t in a.tables],
        "forwards": [layout.sensitivity_activations(a.id, *f) for f in a.forwards],
        # the shapes behind the cost of recomputing shards (headgeom.verify.sensitivity.alternative_cost)
        "manifests": (
            [layout.manifest(m) for m in ACT_MODELS] if a.families and a.tables else []
        ),
    }


def _alt_res(wc, input, key):
    """The alternative job's cost model (headgeom.verify.sensitivity.alternative_cost)."""
    return _sens.alternative_cost(
        CHOICE_ALTS[wc.alt], dict(zip(ACT_MODELS, input.manifests)), config
    )[key]
