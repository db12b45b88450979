"""What the rule files call: every input function, param, resource, target and cache key of the
workflow, as plain functions of ``config`` (and of the Snakemake object a function needs, passed in:
``workflow``, ``checkpoints``).

The Snakefile calls ``start.start(workflow, config)`` once and includes one rule file per stage;
each rule file imports by name what it uses from here and reads no name another rule file or the
Snakefile defines (tests/unit/rules/test_rule_files.py). One module per stage:

* ``start``       what runs once when the workflow loads: the config checks (headgeom.commands.check),
                  schema defaults, damaged shards to rebuild, the Snakemake/SLURM patches, the
                  ``--cache`` and ``--report`` modes; and the wildcard patterns every stage shares
* ``fetch``       the fetch checkpoint: the model entry's locating keys, cost, cache key
* ``jobs``        the per-layer jobs (one rule per shard-family job): inputs, params, resources,
                  and the shards one family has for the active models (``family_shards``)
* ``outputs``     the tables and figures (one rule per output): inputs, files, params
* ``activation``  the forward pass (activation_forward, sensitivity_forward)
* ``claims``      the claims ledger, the LaTeX macros and the run summary
* ``sensitivity`` the choice-sensitivity alternatives (one job each)
"""
