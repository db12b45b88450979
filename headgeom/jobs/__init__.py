"""Per-layer job entry points (what a workflow script calls) and their cost models."""
