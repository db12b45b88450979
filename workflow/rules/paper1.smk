# Paper 1 suite (scramble/Haar nulls, factorial DxK, capacity, siblings, trajectories).
# Rule files extend ALL_TARGETS (defined in common.smk) with their tables and figures.
