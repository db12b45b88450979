import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent / "helpers"))

# Tests never reach the hub; hub tests set their own endpoint.
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")


@pytest.fixture(scope="session")
def root() -> Path:
    return ROOT


@pytest.fixture(scope="session")
def snakemake_bin() -> str:
    exe = Path(sys.executable).parent / "snakemake"
    assert exe.exists(), f"snakemake not found beside {sys.executable}"
    return str(exe)
