"""Numeric comparisons that can be shown to fail: closeness, and proof that a small error is caught.

A comparison with loose tolerances passes whatever the kernel computes. `assert_would_catch` checks
the other side: had any element of at least a tenth of the tensor's largest magnitude been off by
1e-3 relative, in either direction, the same tolerances would have refused it.
"""
from __future__ import annotations

import numpy as np

# The relative error a comparison must be able to see.
PROVE_ERROR = 1e-3


def assert_close(got, want, rtol: float, atol: float, where: str) -> None:
    """Elementwise |got - want| <= atol + rtol * |want|, with shape and dtype equal."""
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{where}: got {got.dtype}{list(got.shape)}, want {want.dtype}{list(want.shape)}")
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=where)


def scaled_atol(want, atol: float) -> float:
    """``atol`` times the largest magnitude of ``want`` (for deep networks' outputs)."""
    want = np.asarray(want)
    finite = np.abs(want[np.isfinite(want)]) if want.size else want
    return atol * float(finite.max()) if finite.size else 0.0


def assert_would_catch(got, want, rtol: float, atol: float, where: str, error: float = PROVE_ERROR) -> None:
    """That ``assert_close(got, want, rtol, atol)`` fails once any element with |want| >= max|want|/10
    is moved by ``error`` relative: the margin the actual difference leaves must be smaller than
    that move. Non-finite elements are left out (they compare exactly)."""
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    finite = np.isfinite(want) & np.isfinite(got)
    got, want = got[finite], want[finite]
    if not want.size or not np.any(want):
        return
    big = np.abs(want) >= 0.1 * np.max(np.abs(want))
    allowed = atol + rtol * np.abs(want[big])
    moved = error * np.abs(got[big]) - np.abs(got[big] - want[big])
    worst = int(np.argmin(moved - allowed))
    assert moved[worst] > allowed[worst], (
        f"{where}: a {error:g} relative error at {want[big][worst]:.4g} would pass "
        f"(actual difference {abs(got[big][worst] - want[big][worst]):.3g}, allowed {allowed[worst]:.3g})")


def bump_one_element(values, seed: int = 0, error: float = PROVE_ERROR):
    """A copy of ``values`` with one element of at least a tenth of the largest magnitude
    multiplied by 1 + ``error`` (what a test of the tests feeds a comparison)."""
    values = np.array(values, copy=True)
    flat = values.reshape(-1)
    big = np.flatnonzero(np.abs(flat) >= 0.1 * np.abs(flat).max())
    flat[np.random.default_rng(seed).choice(big)] *= 1 + error
    return values
