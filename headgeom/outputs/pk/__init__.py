"""The PK paper (reading and writing spaces of heads and their projection-kernel overlap): every
table and figure, each builder registered by the decorator above it (headgeom.outputs.registry;
its docstring is the caption), from the PK shards (``pk_within``, ``pk_cross``, ``pk_self``,
``pk_null_within``, ``pk_null_cross``) and the activation stage's ``activation_read_paths``.
One module per topic:

  within_layer.py   Tables 1, 3, 5, 7, §5.1 ranks, §5.3 spectrum of W_O, Figure 6, one layer's ρ CCDF
  nulls.py          Tables 4, 6, 8, the conditions behind Figures 3 and 9, the null samples (§5.3),
                    Figure 2 and its counts, Figures 3, 7, 8
  cross_layer.py    Tables 2, 9, Figure 9, Appendices F and G (per layer and layer pair, by distance)
  self_overlap.py   Appendix H (self-head overlap, over layers and per layer)
  base_instruct.py  Appendix E and §5.5 (base against instruct checkpoints)
  read_paths.py     §5.4 read paths on real text, Figures 4 and 5
  common.py         the decorators, families, params and cell texts the modules share

The statistics they summarise the shards with are in headgeom.methods.pk_conditions (conditions and
their null comparison, the random-subspace reference), headgeom.methods.read_paths (the read-path
rows grouped) and headgeom.core.stats (correlations, CCDFs, ranks). Importing the package registers
every builder."""

# registered in this order (the run summary's headlines, docs/outputs.md): Table 5's before Table 4's
from headgeom.outputs.pk import within_layer  # noqa: F401
from headgeom.outputs.pk import cross_layer, nulls, self_overlap, base_instruct, read_paths  # noqa: F401
