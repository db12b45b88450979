"""The job functions: what a workflow script runs for one shard family's job (the registry,
headgeom.schedule.families, imports them: nothing here imports headgeom.schedule); the math is in
headgeom.methods."""
