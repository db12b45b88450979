# Helpers of the paper 1 rules (kept apart from the rules: snakemake --lint).

# paper1.lineages checked when the workflow is read (an unknown or doubly-listed model is an error)
targets.lineages(config)


def p1_final(model):
    """The checkpoint whose closure fixes a model's capacity groups (its lineage's last; else itself)."""
    return targets.final_model(config, model)
