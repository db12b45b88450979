"""Peak RSS of one pk_null_cross job holding many writer layers (issue 14: flat in the layer count).

    .venv/bin/python bench/null_cross_rss.py STORE N_LAYERS OUT.parquet

STORE: a tensor store with at least N_LAYERS layers (e.g. a synthetic Qwen2.5-7B-shaped one built
with tests/helpers/synth.py write_llama + headgeom.io.fetch.fetch_model). The job pairs every
writer layer 0..N-2 with reader layer N-1 (reassignment null, K readers, sample 0): all writer
draws are made and held, as in the full job, for few pairs. Prints seconds and ru_maxrss in MB."""

import json
import resource
import sys
import time

from headgeom.jobs import pk_paper as jobs

store, n, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
p = {"rank_rtol": 1e-6, "cross_kinds": ["K"], "types": ["reassign"]}
t = time.perf_counter()
jobs.pk_null_cross_job(store, [0], out, p, segments=[(w, n - 1, n) for w in range(n - 1)], log=lambda *a: None)
print(json.dumps({"layers": n, "writers": n - 1, "seconds": round(time.perf_counter() - t, 1),
                  "max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)}))
