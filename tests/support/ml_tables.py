"""Tabular data with string columns for the scikit-learn pipelines of tests and benchmarks."""
import numpy as np


def table(rows=240, seed=0):
    """A frame of two string columns, an int64 one and two float ones, and string labels that
    depend on all of them."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    frame = pd.DataFrame({"color": rng.choice(["red", "green", "blue", "teal"], rows),
                          "size": rng.choice(["S", "M", "L"], rows),
                          "doors": rng.choice([2, 3, 5], rows).astype(np.int64),
                          "weight": rng.normal(size=rows).astype(np.float32),
                          "height": rng.normal(size=rows).astype(np.float32)})
    score = (frame["weight"] + (frame["color"] == "red") - 0.5 * (frame["size"] == "L") + 0.3 * frame["doors"]
             + rng.normal(scale=0.5, size=rows))
    labels = np.where(score > 1.5, "high", np.where(score > 0.8, "mid", "low")).astype(object)
    return frame, labels
