"""The quickstart demo: build C++ ops from examples/ops and call them on numpy arrays.

    python examples/demo.py
"""
from pathlib import Path

import numpy as np

import opforge

HERE = Path(__file__).resolve().parent


def main() -> None:
    lib = opforge.load_dir(HERE / "ops")          # every .cpp in the folder, one cached library
    print(lib)
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    y = lib.leaky_relu(x, alpha=0.1)
    np.testing.assert_allclose(y, np.where(x > 0, x, 0.1 * x), rtol=1e-6)
    print("leaky_relu(x, alpha=0.1) matches numpy:", y[0, :3])
    s = lib.softmax_rows(x, temperature=0.5)
    e = np.exp((x - x.max(-1, keepdims=True)) / 0.5)
    np.testing.assert_allclose(s, e / e.sum(-1, keepdims=True), rtol=1e-5)
    print("softmax_rows(x) rows sum to", s.sum(-1))
    print()
    print(type(lib.leaky_relu).__doc__)   # what help(lib.leaky_relu) shows


if __name__ == "__main__":
    main()
