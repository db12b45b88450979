"""Backends that record the products going through them (headgeom.core.backend): how many, their
operands' shapes, and the FLOPs those shapes cost. The tests pass them where a kernel takes a backend;
``torch`` as the name routes every product of the kernels through ``matmul`` (on ``numpy`` some take
numpy's ``@`` directly)."""

from __future__ import annotations

import numpy as np

from headgeom.core.backend import Backend


class RecordingBackend(Backend):
    """The numpy backend, counting the products that go through it."""

    def __init__(self, name: str = "numpy"):
        super().__init__(name, "cpu")
        self.calls = 0

    def matmul(self, a, b):
        self.calls += 1
        return super().matmul(a, b)


class ShapeRecordingBackend(RecordingBackend):
    def __init__(self, name: str = "numpy"):
        super().__init__(name)
        self.shapes = []

    def matmul(self, a, b):
        self.shapes.append((a.shape, b.shape))
        return super().matmul(a, b)

    @property
    def flops(self) -> int:
        """2 m k n for each recorded (..., m, k) @ (..., k, n), times its batch."""
        return sum(2 * int(np.prod(np.broadcast_shapes(a[:-2], b[:-2]))) * a[-2] * a[-1] * b[-1]
                   for a, b in self.shapes)
