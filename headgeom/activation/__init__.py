"""Activation stage (docs/methods.md §3): forward passes on text through transformers' own modeling
code, paper 1's natural return and the PK paper's read paths.

  texts.py           named corpora (embedded / local / hf) and deterministic token windows
  forward.py         load a model with transformers, hooks for z_h and the layer input x
  natural_return.py  paper 1: alignment A_h, g_y, cyclic wrong-V (d_head x d_head math)
  read_paths.py      PK §4.2/§5.4: linear / normalization / total terms, energy share, composition
  jobs.py            family job functions (forward, natural return, read paths)
  report.py          output builders: tables and Figures 4, 5
"""

from ..core.errors import HeadgeomError


class CorpusError(HeadgeomError):
    """A text corpus that is missing, empty, too short for its windows, or not text."""


class ModelRunError(HeadgeomError):
    """A model transformers cannot run offline here (architecture, quantization, files)."""
