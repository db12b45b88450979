"""Getting tensors in and results out: checkpoints, the hub, sources, the tensor store,
Parquet shards and atomic file writes."""
