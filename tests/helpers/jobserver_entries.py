"""Job entries for tests/unit/rules/test_jobserver.py, registered as a plugin's (HEADGEOM_PLUGINS=jobserver_entries):
what a job handed to the job server (or run by its command without one) sees of its process."""

from __future__ import annotations

import json
import os
import sys
import time

from headgeom.rules.scripts import entry


@entry
def report(job) -> None:
    """Its process, directory, environment, values and BLAS threads; a line on its stdout."""
    numpy_loaded_before = "numpy" in sys.modules
    import numpy  # noqa: F401  (its BLAS, for threadpool_info)
    from threadpoolctl import threadpool_info

    print("stdout of the job")
    blas = [p["num_threads"] for p in threadpool_info() if p["user_api"] == "blas"]
    with open(job.output[0], "w") as fh:
        json.dump({"pid": os.getpid(), "ppid": os.getppid(), "cwd": os.getcwd(),
                   "marker": os.environ.get("JOBSERVER_TEST_MARKER"), "params": dict(job.params.items()),
                   "input": dict(job.input.items()), "wildcards": dict(job.wildcards.items()),
                   "resources": dict(job.resources.items()), "threads": job.threads, "rule": job.rule,
                   "log": job.log[0], "blas_threads": blas, "numpy_loaded_before": numpy_loaded_before}, fh)


@entry
def fails(job) -> None:
    """A job that raises, with the log every workflow job opens first."""
    from headgeom.core.logs import to_log

    to_log(job)
    raise ValueError("boom on purpose")


@entry
def exits_3(job) -> None:
    sys.exit(3)


@entry
def sleeps(job) -> None:
    """Writes its pid, then sleeps a minute."""
    with open(job.output[0], "w") as fh:
        fh.write(str(os.getpid()))
    time.sleep(60)
