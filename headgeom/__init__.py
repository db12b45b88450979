"""headgeom: weight geometry of transformer attention heads.

The pipeline, left to right (docs/methods.md section in brackets):
  core      errors, config checks, seeds, provenance, per-head factors LayerFactors [§0], stats
  io        checkpoints, the hub, sources, the tensor store, Parquet shards, atomic files
  architectures  one description per architecture (every stage reads it)
  adapters  checkpoint -> per-head factors, from the architecture descriptions [§0]
  methods   closure [§1], pk (reading/writing spaces, projection-kernel overlap) [§2], nulls, paper1/
  jobs      the per-layer job functions
  schedule  schedule/families.py, the shard-family registry (it imports the job functions), designs, costs
  reports   tables and figures; outputs.py is the output registry; claims, audit, generated docs
"""

__version__ = "0.1.0"
