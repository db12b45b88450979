"""The cores a pk_null_cross job runs on: the config's (pk.nulls.cross_threads), within what its process may
use: its affinity and the BLAS threads its environment names (Snakemake sets them to the rule's threads, which
may be fewer than the config's: headgeom.schedule.families.null_cross_threads)."""

from __future__ import annotations

import os

import pytest

from headgeom.jobs.draws import BLAS_THREAD_VARS, job_threads


@pytest.fixture
def no_blas_env(monkeypatch):
    for v in BLAS_THREAD_VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def test_the_environment_caps_the_configs_cores(no_blas_env):
    cores = len(os.sched_getaffinity(0))
    assert job_threads(64) == cores and job_threads(None) == job_threads(0) == 1
    no_blas_env.setenv("OMP_NUM_THREADS", "1")
    assert job_threads(16) == 1
    no_blas_env.setenv("OMP_NUM_THREADS", "")  # empty or zero: not a count
    assert job_threads(64) == cores
    no_blas_env.setenv("OPENBLAS_NUM_THREADS", "0")
    assert job_threads(64) == cores
    no_blas_env.setenv("MKL_NUM_THREADS", "1")
    assert job_threads(64) == 1
