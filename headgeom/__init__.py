"""headgeom: weight geometry of transformer attention heads.

Modules mirror ../shared/METHODS.md:
  factors    §0  per-head factors (LayerFactors) and their invariants
  adapters   §0  checkpoint -> per-head factors, one adapter per architecture
  closure    §1  OV closure, principal coordinates, controls
  pk         §2  reading/writing spaces and projection-kernel overlap
"""

__version__ = "0.1.0"
