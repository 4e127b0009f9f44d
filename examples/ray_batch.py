"""Batch inference on Ray Data with custom C++ ops: the demo's model, over a dataset, on a local
cluster. The ops in examples/ops are built once here, on the driver; workers get the built
library through Ray's object store and build nothing.

    pip install -e ".[ray]" && python examples/ray_batch.py
"""
import sys
from pathlib import Path

import numpy as np

import ray

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from demo import build_model, numpy_reference  # noqa: E402

import opforge.ray  # noqa: E402


def main() -> None:
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    model = build_model()
    x = np.random.default_rng(0).standard_normal((1000, 8)).astype(np.float32)
    dataset = ray.data.from_numpy(x)                       # one column, "data", fed to input "x"
    out = opforge.ray.predict(dataset, model, custom_ops=[HERE / "ops"], batch_size=100, concurrency=2)
    y = np.stack([row["y"] for row in out.take_all()])
    np.testing.assert_allclose(y, numpy_reference(model, x), rtol=1e-5, atol=1e-6)
    print(f"{len(y)} rows through 2 workers, equal to numpy's result; first row {np.round(y[0], 4)}")
    ray.shutdown()


if __name__ == "__main__":
    main()
