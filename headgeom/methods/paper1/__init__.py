"""Paper 1 suite (docs/methods.md §1 beyond closure.py): perturbation split, orientation scrambles and
the Haar audit, factorial D x K, feasible capacity, shared-value algebra and value anchors; and
the statistics paper 1's tables report over those shards' columns (``tail``: strong tail, latent
AUROCs and their bootstrap; ``orientation``; ``gaps``: strong minus matched capacity gaps;
``siblings``: the sibling law's layers and the left-zero band; ``activations``: natural return).

Everything is float64 and built from d_head x d_head Grams of one layer:
  A_h = O_h^T O_h,  B_g = V_g^T V_g,  M[h, g] = V_g^T O_h,  C[g, g'] = V_g^T V_g'.
Every random draw comes from ``headgeom.core.seeds.rng_for(model, layer, head, draw, purpose)``, so a
head's numbers do not depend on which other heads, layers or jobs run, nor in which order.

Assertions here guard identities (a failure is a bug in this code, never a property of the
weights): the perturbation split reproduces P_D(K); scrambles, Haar draws and capacity iterates
keep the singular values of K; the gamma_ij bound holds."""

# The suite by topic; the names below are its public API (tests, jobs, reports).
from headgeom.methods.paper1.common import BOOTSTRAP, CAPACITY, EXCLUDING_FLAGS, HAAR, MATCHED, SAMPLE, SCRAMBLE, coords, valid_heads  # noqa: F401
from headgeom.methods.paper1.split import perturbation_split, split_relerr  # noqa: F401
from headgeom.methods.paper1.scramble import haar_orthogonal, scramble_draws, signed_permutation, sv_relerr  # noqa: F401
from headgeom.methods.paper1.factorial import donor_sets, factorial_S, factorial_layer, interaction  # noqa: F401
from headgeom.methods.paper1.capacity import attainment, capacity_layer, capacity_selection, capacity_starts, feasible_capacity, feasible_capacity_batch, hash_order, logP, logP_and_grad, projected_ascent, retract  # noqa: F401
from headgeom.methods.paper1.anchors import anchor_scores, oblique_share, retrieval_rank  # noqa: F401
from headgeom.methods.paper1.siblings import gamma_bound, pair_rows  # noqa: F401
from headgeom.methods.paper1.heads import heads_layer  # noqa: F401
from headgeom.methods.closure import product_law_general  # noqa: F401  (shared-V and cross-group products)
