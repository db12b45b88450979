"""Paper 1 (Feng & Li, *Scaled Idempotence in Transformer Attention*): every table and figure, by
topic, each builder registered by the decorator above it (headgeom.outputs.registry; its
docstring is the caption), from the paper 1 shards (``paper1_heads``, ``paper1_pairs``,
``paper1_capacity``) and the activation stage's ``activation_natural_return``. The statistics
they report are computed in headgeom.methods.paper1 and headgeom.core.stats.

  strong_tail      p1_table2_strong_tail (Table 2: strong tail, threshold-sweep ends, g_T checks),
                   p1_threshold_sweep (tail, controls and the two AUROCs per threshold),
                   figure p1_fig_closure_ccdf
  latent_closure   p1_latent_closure (latent closure, I_D conditional on it, perturbation split)
  orientation      p1_orientation_scramble (scramble and Haar audit per model),
                   p1_orientation_layers (per layer, with the factorial endpoint),
                   p1_factorial (D x K per model, real minus wrong-V control),
                   p1_orientation_rank_audit (numerical rank of every O/V factor),
                   figure p1_fig_orientation_scramble
  capacity         p1_capacity (feasible capacity / attainment of strong, matched, sampled heads),
                   p1_table3_trajectories (Table 3: per checkpoint of each lineage),
                   figure p1_fig_capacity
  siblings         p1_table4_sibling_law (Table 4: shared-value sibling law with the next-group control),
                   p1_anchors (value anchors, retrieval rank, left-zero band),
                   figure p1_fig_sibling_law
  activations      p1_activations_natural_return (natural return on real text),
                   figure p1_fig_activations_natural_return
  common           the decorators, families, params, columns and pooled rows the modules share"""

# importing the modules registers their builders
from headgeom.outputs.paper1 import activations, capacity, latent_closure, orientation, siblings, strong_tail  # noqa: F401
