"""bench/gpu_check.py's CPU path (tiny shapes): the torch backend against numpy on the null, PK
and closure kernels, as the prepared GPU check runs them on CUDA."""

import pytest

pytest.importorskip("torch")


def _load():
    import gpu_check

    return gpu_check


def test_gpu_check_runs_on_cpu_and_agrees_with_numpy(capsys):
    assert _load().main(["--device", "cpu", "--tiny", "--reps", "1"]) == 0
    out = capsys.readouterr().out
    assert "GEMM" in out and "null sample" in out and "PK cross pairs" in out and "closure Grams" in out
    for dtype in ("float64", "float32", "tf32"):  # both routes of the cross-layer null pairs
        assert f"null cross pairs {dtype}: blocks" in out and "projector Gram" in out
        assert f"Qwen3-235B cross-layer null suite (30 samples x 2 nulls, 4371 layer pairs), {dtype}" in out
    assert out.strip().endswith("OK")


def test_gpu_check_fails_when_float32_exceeds_its_stated_bound(capsys, monkeypatch):
    from headgeom.methods import projectors

    monkeypatch.setattr(projectors, "FLOAT32_RHO_BOUND", 0.0)
    assert _load().main(["--device", "cpu", "--tiny", "--reps", "1"]) == 1
    lines = {ln.split(":")[0]: ln for ln in capsys.readouterr().out.splitlines()}
    assert lines["tiny null cross pairs float32"].endswith("FAILED")
    assert "FAILED" not in lines["tiny null cross pairs float64"]


def test_gpu_check_fails_when_torch_disagrees(capsys):
    # an impossible tolerance: every check reports its error, the exit status says so
    assert _load().main(["--device", "cpu", "--tiny", "--reps", "1", "--rtol", "-1"]) == 1
    assert "FAILED" in capsys.readouterr().out
