"""Where the big products of the heavy kernels run: numpy (default) or torch on CPU or CUDA
(config keys ``backend`` and ``device``).

Only the GEMMs go through the backend (LayerGrams' Gram products, the stacked-basis products of
pk.cross_blocks, the products of pk.orthonormal_bases); the small d x d LAPACK steps (eigh,
Cholesky) stay in numpy. Inputs and outputs are numpy arrays, so results are compared with the
numpy path directly: float64 torch on CPU agrees with numpy to 1e-12 relative (tests)."""

from __future__ import annotations

import numpy as np

from headgeom.core.errors import ConfigError

BACKENDS = ("numpy", "torch")
DEVICES = ("cpu", "cuda")


class Backend:
    def __init__(self, name: str = "numpy", device: str = "cpu"):
        if name not in BACKENDS:
            raise ConfigError(f"backend {name!r} is not one of {BACKENDS}")
        dev = str(device)
        if dev.split(":")[0] not in DEVICES:
            raise ConfigError(f"device {device!r} is not one of {DEVICES} (cuda:N for one GPU)")
        if name == "numpy" and dev != "cpu":
            raise ConfigError(f"device {device!r} needs backend: torch (numpy runs on the CPU only)")
        self.name, self.device = name, dev
        if name == "torch":
            import torch

            if dev.startswith("cuda") and not torch.cuda.is_available():
                raise ConfigError(f"device {device!r} asked for, but torch sees no CUDA GPU on this machine "
                                  f"(torch {torch.__version__}, built {'with' if torch.version.cuda else 'without'} CUDA); "
                                  "set device: cpu or run the job where a GPU is")
            self._torch = torch

    def matmul(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """a @ b (numpy broadcasting rules), on this backend; a numpy array back."""
        if self.name == "numpy":
            return a @ b
        t = self._torch
        ta = t.as_tensor(np.asarray(a), device=self.device)
        tb = t.as_tensor(np.asarray(b), device=self.device)
        return (ta @ tb).cpu().numpy()

    def __repr__(self):
        return f"Backend({self.name!r}, {self.device!r})"


NUMPY = Backend()


def backend_from(params: dict | None) -> Backend:
    """The backend a job's params ask for (keys ``backend``, ``device``; default numpy on CPU)."""
    params = params or {}
    return Backend(params.get("backend", "numpy"), params.get("device", "cpu"))
