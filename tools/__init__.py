"""Developer tools beside the package, shared by the tests and the benchmarks (neither imports the
other; both import these as ``tools.<module>`` from the repository root):

* ``synth``: synthetic checkpoints (safetensors and GGUF) with a model's attention shapes;
* ``hubserver``: a loopback Hugging Face hub serving checkpoints under a repo id and revision;
* ``dryrun``: parsers of ``snakemake -n`` output (jobs, their resource requests);
* ``capacity_ref``: the per-head capacity search the batched one replaced (a reference);
* ``baselines``: the benchmarks' baselines, FLOP counts, synthetic layers and interleaved timing;
* ``compare_runs.py``: every shard and table of two runs, value by value (a restructuring's check);
* ``standins.py`` (``make standins``): every paper model as a tiny stand-in through the hub path;
* ``gpu_check.py`` / ``gpu_check.sh``: the torch backend on a device against numpy, with its rates.
"""
