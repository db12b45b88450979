"""How a cross-layer null job runs on several cores (pk.nulls.cross_threads): the threads it may take,
and its null draws in worker threads with its products on that many BLAS threads
(headgeom.jobs.pk_paper.pk_null_cross_job; the cost model's THREAD_EFFICIENCY prices them)."""

from __future__ import annotations


BLAS_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "GOTO_NUM_THREADS")


def blas_threads_named(env) -> int | None:
    """The BLAS threads an environment names: the first of BLAS_THREAD_VARS set to a positive count (Snakemake
    sets them all to a job's threads); None where none is."""
    for var in BLAS_THREAD_VARS:
        value = env.get(var, "")
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def job_threads(asked) -> int:
    """The threads a job runs: ``asked`` (its config's cores, at least one), at most the cores this process
    may run on (SLURM binds a job to its cpus_per_task) and the threads its environment gives its BLAS where
    set (Snakemake sets them to the rule's threads, which a local run caps at --cores and which may be fewer
    than the config's: families.null_cross_threads). The draws' bits do not depend on it; the products'
    (BLAS's threaded GEMMs) may, by rounding."""
    import os

    n = max(1, int(asked or 1))
    given = blas_threads_named(os.environ)
    if given is not None:
        n = min(n, given)
    try:
        return min(n, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform
        return min(n, os.cpu_count() or 1)


class Draws:
    """A job's null draws, ``threads`` at a time: each draw in a worker thread on one BLAS thread (a
    draw's QR, bases and Gaussian release the GIL: headgeom.core.lapack), so that a part's layers are
    drawn side by side; a projector call's packing runs on the same workers (``run``), the products after
    them on ``threads`` BLAS threads (``products``).
    One thread: the draws one after another, the BLAS threads left as the job was started with.
    Every draw is seeded by its names and runs on one BLAS thread either way: the same bits. The
    products' GEMMs on several BLAS threads may round apart from one thread's (OpenBLAS splits a GEMM's
    rows between its threads and the split moves its edge kernels): 1e-16 relative, measured by
    `make bench` (null_cross_threads); the shard records the threads (provenance ``threads``)."""

    def __init__(self, threads: int):
        self.threads = max(1, int(threads))
        self._pool = None

    def __enter__(self):
        if self.threads > 1:
            from concurrent.futures import ThreadPoolExecutor

            self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="headgeom-draw")
        return self

    def __exit__(self, *exc):
        if self._pool is not None:
            self._pool.shutdown()

    def _limits(self, n: int):
        from contextlib import nullcontext

        if self._pool is None:
            return nullcontext()
        from threadpoolctl import threadpool_limits

        return threadpool_limits(limits=n)

    def each(self, tasks):
        """``(key, draw)`` pairs -> ``(key, draw())`` pairs in the tasks' order, ``threads`` draws running
        at a time and at most twice that many made and not yet taken (the job's memory model counts
        them)."""
        if self._pool is None:
            yield from ((k, fn()) for k, fn in tasks)
            return
        from collections import deque

        pending = deque()
        with self._limits(1):
            for k, fn in tasks:
                pending.append((k, self._pool.submit(fn)))
                if len(pending) >= 2 * self.threads:
                    k0, f0 = pending.popleft()
                    yield k0, f0.result()
            while pending:
                k0, f0 = pending.popleft()
                yield k0, f0.result()

    def run(self, tasks) -> None:
        """Zero-argument tasks ``threads`` at a time, each on one BLAS thread, returning when all are done
        (a projector_gram call's packing: methods.projectors.pack_tasks); one thread: one after another."""
        if self._pool is None:
            for fn in tasks:
                fn()
            return
        with self._limits(1):
            for f in [self._pool.submit(fn) for fn in tasks]:
                f.result()

    @property
    def tasks_runner(self):
        """``run`` where the job has several threads, else None: a projector_gram call's ``run_tasks`` (on one
        thread it packs each layer's heads in one batched call, in place)."""
        return self.run if self._pool is not None else None

    def products(self):
        """The context of the pair products: ``threads`` BLAS threads (one GEMM over many partners)."""
        return self._limits(self.threads)
