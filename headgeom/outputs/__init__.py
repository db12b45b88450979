"""Every table and figure of the two papers: the output registry and the builders.

  registry.py  the ``Output`` entry, the ``table`` / ``figure`` decorators, OUTPUTS / TABLES / FIGURES
  formats.py   the formats: ``Table`` (CSV, Markdown, LaTeX, HTML + provenance), figure saving
  choices.py   the ``choices:`` switches of paper 1 (column selection in the paper1_heads shards)
  paper1.py    every builder of paper 1 (weight-space tables and figures, the natural return)
  pk/          every builder of the PK paper, one module per topic (Tables 1-9, Figures 2-9, appendices,
               read paths)
  build.py     one output from its shards: read, select, build, write (``build_output``)

Importing the package registers every builder (the paper modules). The checking tools
(headgeom.verify) and what the run publishes from the tables (headgeom.publish: claims, sensitivity,
docs) import this package, never the reverse."""

from headgeom.outputs import paper1, pk  # noqa: F401  (registers every builder)
from headgeom.outputs.build import build_output, prepare, traced
from headgeom.outputs.registry import FIGURES, OUTPUTS, TABLES, Output, output, register

__all__ = ["FIGURES", "OUTPUTS", "TABLES", "Output", "build_output", "output", "prepare", "register", "traced"]
