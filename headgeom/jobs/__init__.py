"""The job entry points: what a workflow script runs for one shard family's job (the registry,
headgeom.schedule.families, names them); the math is in headgeom.methods."""
