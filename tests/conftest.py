import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# Tests never reach the hub; hub tests set their own endpoint.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
# The forward-pass oracle's verdicts (headgeom.adapters.oracle) go to a cache of this session's
# own, shared with the workflows it starts, never the user's ~/.cache/headgeom.
os.environ["HEADGEOM_CACHE"] = tempfile.mkdtemp(prefix="headgeom-test-cache-")
atexit.register(shutil.rmtree, os.environ["HEADGEOM_CACHE"], ignore_errors=True)


# The longest test files, started first: under `make test`'s two workers (pytest-xdist, file by
# file) the SLURM tests, mostly waiting on the scheduler, then run beside the CPU-bound rest
# instead of after it.
LONG_FIRST = ("workflow/test_slurm.py", "workflow/test_architectures_e2e.py", "workflow/test_activation_workflow.py",
              "workflow/test_api_pipeline.py")


def pytest_collection_modifyitems(config, items):
    def rank(item):
        path = item.path.as_posix()
        return next((i for i, name in enumerate(LONG_FIRST) if path.endswith(name)), len(LONG_FIRST))

    items.sort(key=rank)  # stable: the order within a file and among the rest is kept


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def snakemake_bin() -> str:
    exe = Path(sys.executable).parent / "snakemake"
    assert exe.exists(), f"snakemake not found beside {sys.executable}"
    return str(exe)
