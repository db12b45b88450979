"""Every path pattern of a run, relative to the work directory: the rule files (Snakefile,
workflow/rules/*.smk) and the package format these, so a path is spelled once.

Patterns use Snakemake's ``{wildcard}`` syntax; ``str.format`` fills them."""

from __future__ import annotations

# the tensor store of one model (headgeom.io.store): the manifest is written last
TENSORS_ROOT = "results/tensors"
TENSORS_DIR = f"{TENSORS_ROOT}/{{model}}"
MANIFEST = f"{TENSORS_DIR}/manifest.json"
TENSORS = f"{TENSORS_DIR}/tensors.safetensors"

# the forward pass's per-layer activations of one model, corpus and window shape
ACTIVATIONS = "results/activations/{model}/{corpus}/{nwin}x{win}"

# shards of a family (headgeom.schedule.families), one pattern per grain (headgeom.schedule.families.GRAINS)
SHARDS_ROOT = "results/shards"
SHARD = {
    "layer": "layer{layer}.parquet",
    "layer_block": "layer{layer}/block{block}.parquet",
    "block": "block{block}.parquet",
    "block_part": "block{block}/part{part}.parquet",
    "part": "part{part}.parquet",
}

TABLES_DIR = "results/tables"
FIGURES_DIR = "figures"
TABLE_EXTS = ("csv", "md", "tex", "html")
FIGURE_EXTS = ("png", "pdf")
SUMMARY = "results/summary.md"
# the pipeline's numbers as LaTeX macros (headgeom.publish.macros): the ledger's, and the cells the config names
MACROS = {"claims": f"{TABLES_DIR}/claims_macros.tex", "cells": f"{TABLES_DIR}/cell_macros.tex"}
LOGS_DIR = "logs"

# the choice sensitivity (headgeom.verify.sensitivity): one directory per alternative of a switch
# ({alt}: <switch>=<value>), shaped like a work directory: the alternative's row, and the shards it
# recomputes and the forward passes it reruns at the run's own relative paths
SENSITIVITY_ROOT = "results/sensitivity"
SENSITIVITY_DIR = f"{SENSITIVITY_ROOT}/{{alt}}"
SENSITIVITY_ROW = f"{SENSITIVITY_DIR}/row.json"
SENSITIVITY_SHARDS = f"{SENSITIVITY_DIR}/{SHARDS_ROOT}"
SENSITIVITY_ACTIVATIONS = f"{SENSITIVITY_DIR}/{ACTIVATIONS}"
SENSITIVITY_LOG = f"{LOGS_DIR}/sensitivity/{{alt}}.log"
SENSITIVITY_FORWARD_LOG = f"{LOGS_DIR}/sensitivity/{{alt}}/forward/{{model}}/{{corpus}}/{{nwin}}x{{win}}.log"


def tensors_dir(model: str) -> str:
    return TENSORS_DIR.format(model=model)


def manifest(model: str) -> str:
    return MANIFEST.format(model=model)


def tensors(model: str) -> str:
    return TENSORS.format(model=model)


def shard(family: str, grain: str) -> str:
    """A family's shard pattern (wildcards: model and the grain's)."""
    return f"{SHARDS_ROOT}/{family}/{{model}}/{SHARD[grain]}"


def activations(model: str, corpus: str, n_windows, window) -> str:
    return ACTIVATIONS.format(model=model, corpus=corpus, nwin=n_windows, win=window)


def table_files(name: str, exts=TABLE_EXTS) -> dict[str, str]:
    """A table's files by extension, and its provenance sidecar (``prov``)."""
    return {ext: f"{TABLES_DIR}/{name}.{ext}" for ext in exts} | {"prov": f"{TABLES_DIR}/{name}.prov.json"}


def figure_files(name: str) -> dict[str, str]:
    return {ext: f"{FIGURES_DIR}/{name}.{ext}" for ext in FIGURE_EXTS} | {"prov": f"{FIGURES_DIR}/{name}.prov.json"}


def sensitivity_dir(alt: str) -> str:
    return SENSITIVITY_DIR.format(alt=alt)


def sensitivity_row(alt: str) -> str:
    return SENSITIVITY_ROW.format(alt=alt)


def sensitivity_activations(alt: str, model: str, corpus: str, n_windows, window) -> str:
    return SENSITIVITY_ACTIVATIONS.format(alt=alt, model=model, corpus=corpus, nwin=n_windows, win=window)


def output_log(kind: str, name: str) -> str:
    """The log of a table's / figure's rule (kind: table / figure)."""
    return f"{LOGS_DIR}/{kind}s/{name}.log"
