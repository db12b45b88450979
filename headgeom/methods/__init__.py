"""The math of METHODS.md: closure (§1), projection-kernel overlap (§2), nulls, paper 1."""
