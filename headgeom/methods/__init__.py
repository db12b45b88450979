"""The math of docs/methods.md: closure (§1), projection-kernel overlap (§2), nulls (§2.8), paper 1 (§1)."""
