"""User tools behind ``headgeom`` subcommands: plan (what a config costs), check (pre-flight),
timings (measured job times) and efficiency (``headgeom costs``: SLURM use against the cost model)."""
