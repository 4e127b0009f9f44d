"""The inputs of onnxruntime's quantizer that tests and benchmarks share: squeezenet from the light
zoo at the quantizer's opset, and a calibration reader."""
from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper, version_converter
from onnxruntime import quantization

from tests.support.zoo import light_model


def squeezenet(size: int = 64) -> onnx.ModelProto:
    """light_squeezenet with seeded weights, its bias inputs made initializers, at opset 13 (the
    quantizer's minimum) and a size x size input."""
    model = light_model("light_squeezenet")
    rng = np.random.default_rng(1)
    constants = {t.name for t in model.graph.initializer}
    data = [i for i in model.graph.input if len(i.type.tensor_type.shape.dim) == 4 and i.name not in constants]
    for value in model.graph.input:
        if value not in data and value.name not in constants:
            shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
            model.graph.initializer.append(numpy_helper.from_array(
                (rng.standard_normal(shape) * 0.05).astype(np.float32), value.name))
    del model.graph.input[:]
    model.graph.input.extend(data)
    for dim in model.graph.input[0].type.tensor_type.shape.dim[2:]:
        dim.dim_value = size
    del model.graph.value_info[:]
    model.ir_version = 7  # the converter wants initializers that need not be graph inputs
    return version_converter.convert_version(model, 13)


class Calibration(quantization.CalibrationDataReader):
    """A fixed list of feeds for quantize_static."""

    def __init__(self, feeds):
        self.feeds = iter(feeds)

    def get_next(self):
        return next(self.feeds, None)
