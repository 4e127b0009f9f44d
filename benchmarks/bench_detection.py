"""Detection ops, side by side in one run: onnxruntime and opforge's native kernels on one-node models.

    python -m benchmarks.bench_detection [--threads 2] [--repeat 20]

NonMaxSuppression on a detector's post-processing (1000 boxes x 80 classes, 100 per class, IoU
0.5, score threshold 0.05) and RoiAlign on Mask R-CNN's box head (1000 rois on a 256x50x68 FPN
level, 7x7 bins, sampling_ratio 2, spatial_scale 1/16; and 14x14 for the mask head); DeformConv as
DCNv2 runs in a ResNet stage (256 -> 256 channels, 3x3, on 50x68, with mask and bias). Prints the
load average, each runtime's median latency (runs interleaved, at least --repeat of them and about
two seconds' worth) and the ratio; outputs are checked first (NMS rows equal, floats within 1e-5,
DeformConv's long sums within 1e-4).
"""
import argparse
import os
import time
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

import onnxruntime as ort
import opforge

ROOT = Path(__file__).resolve().parent.parent
from benchmarks.bench_models import median_times, print_load

RNG = np.random.default_rng(0)


def one_node_model(op_type, feeds: dict, consts: dict, attrs: dict, opset: int) -> bytes:
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for n, v in feeds.items()]
    inits = [helper.make_tensor(n, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape, v.flatten().tolist())
             for n, v in consts.items()]
    node = helper.make_node(op_type, [*feeds, *consts], ["y"], **attrs)
    graph = helper.make_graph([node], op_type, inputs, [helper.make_empty_tensor_value_info("y")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]).SerializeToString()


def nms_case():
    centers = RNG.uniform(0, 800, (1, 1000, 2))
    sizes = RNG.uniform(10, 200, (1, 1000, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], -1).astype(np.float32)
    scores = (RNG.uniform(0, 1, (1, 80, 1000)) ** 4).astype(np.float32)   # most below the threshold
    consts = {"max_out": np.array([100], np.int64), "iou": np.array([0.5], np.float32),
              "score": np.array([0.05], np.float32)}
    return "NMS 1000 boxes x 80 classes", one_node_model(
        "NonMaxSuppression", {"boxes": boxes, "scores": scores}, consts, {}, 11), \
        {"boxes": boxes, "scores": scores}


def roi_align_case(bins: int):
    x = RNG.standard_normal((1, 256, 50, 68)).astype(np.float32)
    start = RNG.uniform(0, 1000, (1000, 2))
    rois = np.concatenate([start, start + RNG.uniform(16, 300, (1000, 2))], 1).astype(np.float32)
    indices = np.zeros(1000, np.int64)
    attrs = {"output_height": bins, "output_width": bins, "sampling_ratio": 2, "spatial_scale": 1 / 16}
    feeds = {"x": x, "rois": rois, "indices": indices}
    return f"RoiAlign 1000 rois, 256x50x68 -> {bins}x{bins}", one_node_model(
        "RoiAlign", feeds, {}, attrs, 16), feeds


def deform_conv_case():
    x = RNG.standard_normal((1, 256, 50, 68)).astype(np.float32)
    feeds = {"x": x, "offset": RNG.standard_normal((1, 18, 50, 68)).astype(np.float32)}
    consts = {"w": (RNG.standard_normal((256, 256, 3, 3)) * 0.05).astype(np.float32),
              "b": RNG.standard_normal(256).astype(np.float32),
              "mask": RNG.uniform(0, 1, (1, 9, 50, 68)).astype(np.float32)}
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, v.shape) for n, v in feeds.items()]
    inits = [helper.make_tensor(n, TensorProto.FLOAT, v.shape, v.flatten()) for n, v in consts.items()]
    node = helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], kernel_shape=[3, 3],
                            pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "DeformConv", inputs, [helper.make_empty_tensor_value_info("y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)]).SerializeToString()
    return "DeformConv 256->256 3x3 on 50x68", model, feeds


def compare(name, model, feeds, threads, repeat):
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    ref = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    options = opforge.SessionOptions()
    options.intra_op_num_threads = threads
    options.disable_reference_fallback = True
    sess = opforge.InferenceSession(model, options)
    want, = ref.run(None, feeds)
    got, = sess.run(None, feeds)
    tolerance = 1e-4 if name.startswith("DeformConv") else 1e-5
    ok = got.shape == want.shape and (np.array_equal(got, want) if got.dtype == np.int64
                                      else np.allclose(got, want, rtol=tolerance, atol=tolerance))
    start = time.perf_counter()
    ref.run(None, feeds)
    repeat = max(repeat, int(2.0 / (time.perf_counter() - start)))  # about 2 s each: short runs are noisy
    ort_time, ours_time = median_times([lambda: ref.run(None, feeds), lambda: sess.run(None, feeds)], repeat)
    print(f"{name:42s} onnxruntime {ort_time * 1e3:8.2f} ms  opforge {ours_time * 1e3:8.2f} ms  "
          f"ratio {ours_time / ort_time:5.2f}  {'match' if ok else 'MISMATCH'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    print_load("before")
    for case in (nms_case(), roi_align_case(7), roi_align_case(14), deform_conv_case()):
        compare(*case, args.threads, args.repeat)
    print_load("after")


if __name__ == "__main__":
    main()
