"""What runs where and what it costs: the shard-family registry (families: each job with the
function of headgeom.jobs it imports), the per-model
designs (designs), the fan-out of the cross-layer stages (fanout), the cost models (costs,
activation_costs) and model shapes before any fetch (shapes)."""
