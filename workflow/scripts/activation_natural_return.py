import sys
from pathlib import Path

sys.path.insert(0, str(Path(snakemake.scriptdir)))
from _log import to_log  # noqa: E402

from headgeom.activation.jobs import natural_return_job  # noqa: E402

log = to_log(snakemake)
natural_return_job(Path(snakemake.input.manifest).parent, snakemake.input.acts, int(snakemake.wildcards.layer),
                   snakemake.output[0], {"endpoint": snakemake.params.endpoint}, log=log)
