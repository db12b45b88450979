"""Where the big products of the heavy kernels run: numpy (default) or torch on CPU or CUDA
(config keys ``backend`` and ``device``).

Through the backend go the GEMMs (LayerGrams' Gram products, the stacked-basis products of
pk.cross_blocks / pk.upper_blocks, the products of pk.orthonormal_bases) and the Haar rotation of
the rotation null (``haar_apply``: the QR of the Gaussian and its product with the layer matrix);
the small d x d LAPACK steps (eigh, Cholesky) stay in numpy. Inputs and outputs are numpy arrays,
so results are compared with the numpy path directly: float64 torch on CPU agrees with numpy to
1e-12 relative (tests)."""

from __future__ import annotations

import numpy as np

from headgeom.core.errors import ConfigError

BACKENDS = ("numpy", "torch")
HAAR_NB = 128  # block size of the compact-WY Householder QR of the rotation null (dgeqrt / dgemqrt)
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

    def haar_apply(self, C: np.ndarray, Z: np.ndarray, transpose: bool = False) -> np.ndarray:
        """C @ Q (``transpose``: C @ Q^T) for Q the sign-fixed Q factor of the Gaussian Z (m x r,
        m >= r; Q m x r with R's diagonal made positive, nulls.haar_stiefel's matrix), without
        forming Q on numpy: Z = Q R by LAPACK's blocked Householder QR in compact WY form
        (dgeqrt, block HAAR_NB) and C @ Q as Q^T C^T by dgemqrt, the reflectors applied in
        blocks with GEMMs (Q is never formed: dorgqr + a GEMM cost twice the LAPACK work).
        Not transposed: C is D x m with Z square. Transposed: C is D x r (r = D < m).
        On torch: torch.linalg.qr (LAPACK/MKL on CPU, cuSOLVER on CUDA) and a matmul."""
        m, r = Z.shape
        if m < r or (not transpose and m != r) or C.shape[1] != (m if not transpose else r):
            raise ValueError(f"haar_apply: C {C.shape} and Z {Z.shape} do not fit (transpose={transpose})")
        if self.name == "torch":
            t = self._torch
            Q, R = t.linalg.qr(t.as_tensor(np.asarray(Z), device=self.device))
            dR = t.diagonal(R)
            Q = Q * t.sign(t.where(dR == 0, t.ones_like(dR), dR))
            Ct = t.as_tensor(np.asarray(C), device=self.device)
            return (Ct @ (Q.T if transpose else Q)).cpu().numpy()
        from headgeom.core import lapack  # scipy's LAPACK, called with the GIL released (worker threads)

        a, T, info = lapack.geqrt(max(1, min(HAAR_NB, r)), np.array(Z, order="F"))
        if info != 0:
            raise RuntimeError(f"LAPACK geqrt failed (info {info}) on a {m} x {r} {Z.dtype} Gaussian")
        dR = np.diag(a)
        sgn = np.sign(np.where(dR == 0, 1.0, dR)).astype(C.dtype, copy=False)
        if not transpose:  # (C Q)^T = Q^T C^T, C^T Fortran-ordered: C's bytes, no transposed copy
            W = np.array(C.T, order="F")
            trans = "T"
        else:  # (C diag(s) Q^T)^T = Q_full [diag(s) C^T; 0]
            W = np.zeros((m, r), dtype=C.dtype, order="F")
            W[:r] = sgn[:, None] * C.T
            trans = "N"
        out, info = lapack.gemqrt(a, T, W, side="L", trans=trans)
        if info != 0:
            raise RuntimeError(f"LAPACK gemqrt failed (info {info})")
        out = out.T  # C-ordered D x m
        if not transpose:
            out *= sgn  # C Q diag(s)
        return out

    def __repr__(self):
        return f"Backend({self.name!r}, {self.device!r})"


NUMPY = Backend()


def backend_from(params: dict | None) -> Backend:
    """The backend a job's params ask for (keys ``backend``, ``device``; default numpy on CPU)."""
    params = params or {}
    return Backend(params.get("backend", "numpy"), params.get("device", "cpu"))
