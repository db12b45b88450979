"""Small batched matrix helpers shared by the math modules (every function broadcasts over
leading axes: heads, groups, samples)."""

from __future__ import annotations

import numpy as np


def mT(X):
    """Transpose of the last two axes."""
    return np.swapaxes(X, -1, -2)


def inner(X, Y):
    """Frobenius inner product <X, Y> = tr(X^T Y)."""
    return np.einsum("...ij,...ij->...", X, Y)


def fro2(X):
    """||X||_F^2."""
    return inner(X, X)


def trace(X):
    return np.einsum("...ii->...", X)


def tr_prod(X, Y):
    """tr(X Y) without forming the product."""
    return np.einsum("...ij,...ji->...", X, Y)
