"""Detection ops (NonMaxSuppression, RoiAlign, MaxRoiPool, CropAndResize, DeformConv) checked against
onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import opforge
from tests.support.kernel_check import run_onnxruntime
from tests.support.numeric import assert_close, assert_would_catch
from opforge.runtime import InferenceSession, SessionOptions

RNG = np.random.default_rng(0)


# NonMaxSuppression ------------------------------------------------------------------------------

def nms_inputs(batches=2, classes=3, boxes=60, max_out=7, iou=0.4, score=0.2, center=False, seed=0):
    """Random boxes clustered so that many overlap, with (y1, x1, y2, x2) corners in either order."""
    rng = np.random.default_rng(seed)
    if center:
        xy = rng.uniform(0, 20, (batches, boxes, 2))
        wh = rng.uniform(1, 8, (batches, boxes, 2))
        data = np.concatenate([xy, wh], -1)
    else:
        data = rng.uniform(0, 20, (batches, boxes, 4))
    scores = rng.uniform(0, 1, (batches, classes, boxes))
    optional = [None if v is None else np.array([v], dt)
                for v, dt in ((max_out, np.int64), (iou, np.float32), (score, np.float32))]
    return [data.astype(np.float32), scores.astype(np.float32), *optional]


def nms_check(kernels, inputs, center=0, opset=11):
    """Opforge's selected_indices equal onnxruntime's, row for row."""
    while inputs[-1] is None:
        inputs = inputs[:-1]
    want = run_onnxruntime("NonMaxSuppression", inputs, {"center_point_box": center}, opset)[0]
    got = kernels.op("NonMaxSuppression", domain="", version=opset)(*inputs, center_point_box=center)
    assert got.dtype == np.int64 and got.shape == want.shape, f"got {got.shape}, onnxruntime {want.shape}"
    np.testing.assert_array_equal(got, want)
    return got


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize("iou", [0.0, 0.3, 0.7, 1.0])
@pytest.mark.parametrize("opset", [10, 11])
def test_nms_matches_onnxruntime(kernels, center, iou, opset):
    got = nms_check(kernels, nms_inputs(iou=iou, center=bool(center)), center, opset)
    assert len(got) > 0


@pytest.mark.parametrize("max_out,score", [(None, None), (1000, None), (3, 0.9), (-2, 0.1), (0, 0.1)])
def test_nms_optional_inputs(kernels, max_out, score):
    inputs = nms_inputs(max_out=max_out, score=score)
    nms_check(kernels, inputs)


def test_nms_absent_iou_and_score_threshold_inputs(kernels):
    boxes, scores, max_out, _, _ = nms_inputs()
    nms_check(kernels, [boxes, scores, max_out])
    nms_check(kernels, [boxes, scores, max_out, None, np.array([0.5], np.float32)])


def test_nms_flipped_corners_select_as_unflipped(kernels):
    boxes, scores, *rest = nms_inputs()
    flipped = boxes[..., [2, 3, 0, 1]]          # (y2, x2, y1, x1)
    flipped[..., [1, 3]] = boxes[..., [1, 3]]   # only y flipped
    got = nms_check(kernels, [flipped, scores, *rest])
    np.testing.assert_array_equal(got, nms_check(kernels, [boxes, scores, *rest]))


def test_nms_ties_keep_the_lower_box_index_first(kernels):
    boxes, scores, *rest = nms_inputs(boxes=80)
    scores = np.round(scores * 4) / 4            # five score levels: many ties
    boxes[0, 10:20] = boxes[0, 10]               # identical boxes too
    scores = np.ascontiguousarray(scores, np.float32)
    nms_check(kernels, [boxes, scores, np.array([40], np.int64), *rest[1:]])
    # a score equal to score_threshold is not above it
    nms_check(kernels, [boxes, scores, np.array([40], np.int64), rest[1], np.array([0.5], np.float32)])


def test_nms_empty_results(kernels):
    boxes, scores, max_out, iou, _ = nms_inputs()
    got = nms_check(kernels, [boxes, scores, max_out, iou, np.array([1.0], np.float32)])   # all below
    assert got.shape == (0, 3)
    nms_check(kernels, [np.zeros((2, 0, 4), np.float32), np.zeros((2, 3, 0), np.float32), max_out, iou])
    nms_check(kernels, [boxes, np.zeros((2, 0, 60), np.float32), max_out, iou])
    degenerate = np.zeros_like(boxes)            # zero-area boxes never suppress each other
    got = nms_check(kernels, [degenerate, scores, np.array([100], np.int64), iou])
    assert got.shape == (2 * 3 * 60, 3)


def test_nms_infinite_and_nan_coordinates(kernels):
    """Boxes reaching infinity, or with a NaN corner, decide as onnxruntime's checks decide."""
    boxes, scores, *rest = nms_inputs(boxes=40)
    boxes[0, :6, 2] = np.inf
    boxes[0, 6:10, 0] = -np.inf
    boxes[1, :4, 3] = np.nan
    boxes[1, 4:12] = boxes[1, 4]                 # identical to a neighbour of the NaN boxes
    nms_check(kernels, [boxes, scores, np.array([30], np.int64), *rest[1:]])
    nms_check(kernels, [boxes, scores, np.array([30], np.int64), *rest[1:]], center=1)


def test_nms_detection_sized(kernels):
    """A detector's post-processing: 1000 boxes x 80 classes, as YOLO/SSD exports emit it."""
    centers = RNG.uniform(0, 600, (1, 1000, 2))
    sizes = RNG.uniform(10, 120, (1, 1000, 2))
    boxes = np.concatenate([centers - sizes / 2, centers + sizes / 2], -1).astype(np.float32)
    scores = RNG.uniform(0, 1, (1, 80, 1000)).astype(np.float32) ** 4
    got = nms_check(kernels, [boxes, scores, np.array([100], np.int64), np.array([0.5], np.float32),
                              np.array([0.05], np.float32)])
    assert len(got) > 1000


def test_nms_torchvision_batched_single_class(kernels):
    """torchvision's export: every class's boxes offset apart, one NMS over them with
    max_output_boxes_per_class = sys.maxsize and no score threshold."""
    classes = RNG.integers(0, 20, 2000)
    corner = RNG.uniform(0, 600, (2000, 2))
    boxes = np.concatenate([corner, corner + RNG.uniform(5, 150, (2000, 2))], 1) + classes[:, None] * 1000.0
    scores = RNG.uniform(0, 1, (1, 1, 2000)).astype(np.float32)
    got = nms_check(kernels, [boxes[None].astype(np.float32), scores, np.array([2 ** 63 - 1], np.int64),
                              np.array([0.7], np.float32)])
    assert 200 < len(got) < 2000


def test_nms_bad_inputs_name_the_input(kernels):
    boxes, scores, max_out, _, _ = nms_inputs()
    nms = kernels.op("NonMaxSuppression", domain="", version=11)
    with pytest.raises(opforge.OpError, match="iou_threshold"):
        nms(boxes, scores, max_out, np.array([1.5], np.float32))
    with pytest.raises(opforge.OpError, match="spatial_dimension"):
        nms(boxes, scores[..., :-1], max_out)
    with pytest.raises(opforge.OpError, match="'boxes'"):
        nms(boxes[..., :3], scores, max_out)
    with pytest.raises(opforge.OpError, match="center_point_box"):
        nms(boxes, scores, max_out, center_point_box=2)


def nms_model():
    inputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, None, 4]),
              helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 2, None])]
    consts = [helper.make_tensor("max_out", TensorProto.INT64, [1], [5]),
              helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.3])]
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou"], ["selected"])
    graph = helper.make_graph([node], "nms", inputs,
                              [helper.make_tensor_value_info("selected", TensorProto.INT64, None)], consts)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])


def test_nms_session_runs_natively_with_data_dependent_rows():
    """A planned session's rows follow each run's data: the selection infer made for one run is
    never reused by a run with other boxes."""
    import onnxruntime as ort

    model = nms_model()
    ours = InferenceSession(model.SerializeToString(), SessionOptions(disable_reference_fallback=True),
                            providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    counts = set()
    for seed in range(6):
        boxes, scores, *_ = nms_inputs(batches=1, classes=2, boxes=40, seed=seed)
        if seed % 2:
            scores[:, 1] = 0   # class 1 still selects (no score threshold) but in another order
            boxes[:, seed:] = boxes[:, :1]
        feeds = {"boxes": boxes, "scores": scores}
        got, = ours.run(None, feeds)
        want, = theirs.run(None, feeds)
        np.testing.assert_array_equal(got, want)
        counts.add(len(got))
    assert len(counts) > 1


# RoiAlign ---------------------------------------------------------------------------------------

X = RNG.standard_normal((2, 5, 12, 15)).astype(np.float32)


def roi_boxes(n=24, seed=1):
    """(x1, y1, x2, y2) rois: inside, partly and wholly outside the image, and zero-sized."""
    rng = np.random.default_rng(seed)
    start = rng.uniform(-6, 16, (n, 2))
    size = rng.uniform(0, 9, (n, 2))
    size[:3] = 0                                 # zero-sized
    start[3] = [-20, -20]                        # wholly outside
    return np.concatenate([start, start + size], 1).astype(np.float32)


def roi_check(kernels, x, rois, indices, attrs, opset, rtol=1e-5, atol=1e-5):
    want = run_onnxruntime("RoiAlign", [x, rois, indices], attrs, opset)[0]
    got = kernels.op("RoiAlign", domain="", version=opset)(x, rois, indices, **attrs)
    assert_close(got, want, rtol, atol, f"RoiAlign {attrs}")
    assert_would_catch(got, want, rtol, atol, f"RoiAlign {attrs}")
    return got


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel", None])
@pytest.mark.parametrize("sampling_ratio", [0, 1, 2])
@pytest.mark.parametrize("num_rois", [24, 2])   # pooled from a channels-last copy of X, and from X
def test_roi_align_matches_onnxruntime(kernels, mode, transform, sampling_ratio, num_rois):
    rois = roi_boxes()[-num_rois:]
    indices = RNG.integers(0, 2, len(rois)).astype(np.int64)
    attrs = {"mode": mode, "output_height": 3, "output_width": 4, "sampling_ratio": sampling_ratio,
             "spatial_scale": 0.8}
    opset = 10 if transform is None else 16
    if transform:
        attrs["coordinate_transformation_mode"] = transform
    roi_check(kernels, X, rois, indices, attrs, opset)


def test_roi_align_swapped_corners(kernels):
    """x2 < x1 and y2 < y1: onnxruntime samples backwards with a fixed sampling_ratio, and takes no
    samples (zeros) with an adaptive one; with only one axis swapped its adaptive count overflows,
    so that case is checked against onnx's reference."""
    rois = roi_boxes()[:, [2, 3, 0, 1]]
    indices = np.zeros(len(rois), np.int64)
    for ratio in (0, 2):
        attrs = {"output_height": 2, "output_width": 3, "sampling_ratio": ratio}
        roi_check(kernels, X, rois, indices, attrs, 16)
    one_axis = roi_boxes()[:, [2, 1, 0, 3]]
    node = helper.make_node("RoiAlign", ["x", "rois", "i"], ["y"], output_height=2, output_width=3)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    want = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])).run(
        None, {"x": X, "rois": one_axis, "i": indices})[0]
    got = kernels.op("RoiAlign", domain="", version=16)(X, one_axis, indices, output_height=2, output_width=3)
    assert_close(got, want, 1e-5, 1e-5, "RoiAlign one axis swapped")


def test_roi_align_double_and_mask_rcnn_shape(kernels):
    x = RNG.standard_normal((1, 16, 50, 68))
    rois = np.abs(RNG.standard_normal((40, 4))) * 300
    rois[:, 2:] += rois[:, :2]
    attrs = {"output_height": 7, "output_width": 7, "sampling_ratio": 2, "spatial_scale": 1 / 16}
    roi_check(kernels, x, rois, np.zeros(40, np.int64), attrs, 16, rtol=1e-10, atol=1e-12)
    roi_check(kernels, x.astype(np.float32), rois.astype(np.float32), np.zeros(40, np.int64), attrs, 16)


def low_float(name):
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(np.float16)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_roi_align_16_bit_floats(kernels, dtype):
    """16-bit inputs compute in float: onnxruntime's float result rounded to the 16-bit type,
    exactly (onnxruntime's CPU kernels take no 16-bit floats)."""
    low = low_float(dtype)
    x, rois = X.astype(low), roi_boxes().astype(low)
    indices = RNG.integers(0, 2, len(rois)).astype(np.int64)
    attrs = {"output_height": 3, "output_width": 2, "sampling_ratio": 2}
    want = run_onnxruntime("RoiAlign", [x.astype(np.float32), rois.astype(np.float32), indices], attrs, 16)[0]
    got = kernels.op("RoiAlign", domain="", version=16)(x, rois, indices, **attrs)
    assert got.dtype == low
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(low).astype(np.float32))


def test_roi_align_empty_and_bad_inputs(kernels):
    roi_align = kernels.op("RoiAlign", domain="", version=16)
    got = roi_align(X, np.zeros((0, 4), np.float32), np.zeros(0, np.int64), output_height=2, output_width=2)
    assert got.shape == (0, 5, 2, 2)
    rois = roi_boxes(4)
    with pytest.raises(opforge.OpError, match="batch_indices"):
        roi_align(X, rois, np.array([0, 1, 2, 0], np.int64))
    with pytest.raises(opforge.OpError, match="num_rois"):
        roi_align(X, rois, np.zeros(3, np.int64))
    with pytest.raises(opforge.OpError, match="'rois'"):
        roi_align(X, rois[:, :3], np.zeros(4, np.int64))
    with pytest.raises(opforge.OpError, match="mode"):
        roi_align(X, rois, np.zeros(4, np.int64), mode="min")


def test_roi_align_corrupt_rois_are_refused_or_sample_nothing(kernels):
    """Rois onnxruntime cannot take (a huge adaptive grid overflows its sizes; NaN corners are
    undefined behaviour there) give an error naming the fix, or zeros, never a crash."""
    roi_align = kernels.op("RoiAlign", domain="", version=16)
    indices = np.zeros(1, np.int64)
    for huge in ([0, 0, 1e12, 1e12], [0, 0, np.inf, 3]):
        with pytest.raises(opforge.OpError, match="sampling_ratio"):
            roi_align(X, np.array([huge], np.float32), indices)
    for corrupt, ratio in (([np.nan, 0, 3, 3], 0), ([np.nan, 0, 3, 3], 2), ([0, 0, np.inf, 3], 2)):
        got = roi_align(X, np.array([corrupt], np.float32), indices, sampling_ratio=ratio)
        np.testing.assert_array_equal(got, np.zeros((1, 5, 1, 1), np.float32))
    got = roi_align(np.zeros((1, 3, 0, 4), np.float32), roi_boxes()[:2], np.zeros(2, np.int64))
    np.testing.assert_array_equal(got, np.zeros((2, 3, 1, 1), np.float32))


# MaxRoiPool -------------------------------------------------------------------------------------

@pytest.fixture
def max_roi_pool(kernels):
    """MaxRoiPool's native kernel (image_blocks.cpp)."""
    assert "MaxRoiPool" in kernels.op_names, "the kernel library lost its native MaxRoiPool"
    return kernels.op("MaxRoiPool", domain="", version=1)


@pytest.mark.parametrize("pooled,scale", [([3, 2], 0.5), ([1, 1], 1.0), ([4, 5], 0.25)])
def test_max_roi_pool_matches_onnxruntime(max_roi_pool, pooled, scale):
    boxes = roi_boxes(seed=3) / scale
    boxes[5] = boxes[5, [2, 3, 0, 1]]             # malformed: pooled as 1x1
    rois = np.concatenate([RNG.integers(0, 2, (len(boxes), 1)), boxes], 1).astype(np.float32)
    attrs = {"pooled_shape": pooled, "spatial_scale": scale}
    want = run_onnxruntime("MaxRoiPool", [X, rois], attrs, 1)[0]
    got = max_roi_pool(X, rois, **attrs)
    assert_close(got, want, 0, 0, f"MaxRoiPool {attrs}")
    assert_would_catch(got, want, 0, 0, f"MaxRoiPool {attrs}")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_max_roi_pool_16_bit_floats(max_roi_pool, dtype):
    low = low_float(dtype)
    rois = np.concatenate([RNG.integers(0, 2, (24, 1)), roi_boxes()], 1).astype(low)
    want = run_onnxruntime("MaxRoiPool", [X.astype(low).astype(np.float32), rois.astype(np.float32)],
                           {"pooled_shape": [2, 3]}, 1)[0]
    got = max_roi_pool(X.astype(low), rois, pooled_shape=[2, 3])
    assert got.dtype == low
    np.testing.assert_array_equal(got.astype(np.float32), want)


def test_max_roi_pool_bad_batch_index(max_roi_pool):
    rois = np.array([[2, 0, 0, 4, 4]], np.float32)
    with pytest.raises(opforge.OpError, match="batch"):
        max_roi_pool(X, rois, pooled_shape=[2, 2])


# CropAndResize (com.microsoft) ------------------------------------------------------------------

def crop_check(kernels, x, rois, indices, size, attrs):
    inputs = [x, rois, indices, np.array(size, np.int32)]
    want = run_onnxruntime("CropAndResize", inputs, attrs, 1, domain="com.microsoft")[0]
    got = kernels.op("CropAndResize", domain="com.microsoft", version=1)(*inputs, **attrs)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
@pytest.mark.parametrize("size", [[5, 4], [1, 3], [7, 1], [1, 1]])
def test_crop_and_resize_matches_onnxruntime(kernels, mode, size):
    """TF-style normalised [y1, x1, y2, x2] boxes, some flipped, some reaching outside the image."""
    rois = RNG.uniform(-0.2, 1.2, (12, 4)).astype(np.float32)
    indices = RNG.integers(0, 2, 12).astype(np.int32)
    for extrapolation in (0.0, -1.5):
        crop_check(kernels, X, rois, indices, size, {"mode": mode, "extrapolation_value": extrapolation})


def test_crop_and_resize_float16_and_bad_inputs(kernels):
    rois = RNG.uniform(0, 1, (6, 4)).astype(np.float32)
    indices = np.zeros(6, np.int32)
    size = np.array([3, 4], np.int32)
    want = run_onnxruntime("CropAndResize", [X.astype(np.float16).astype(np.float32),
                                             rois.astype(np.float16).astype(np.float32), indices, size],
                           {}, 1, domain="com.microsoft")[0]
    crop = kernels.op("CropAndResize", domain="com.microsoft", version=1)
    got = crop(X.astype(np.float16), rois.astype(np.float16), indices, size)
    np.testing.assert_array_equal(got, want.astype(np.float16))
    with pytest.raises(opforge.OpError, match="batch_indices"):
        crop(X, rois, np.full(6, 2, np.int32), size)
    with pytest.raises(opforge.OpError, match="crop_size"):
        crop(X, rois, indices, np.array([0, 4], np.int32))
    with pytest.raises(opforge.OpError, match="mode"):
        crop(X, rois, indices, size, mode="bicubic")


# DeformConv -------------------------------------------------------------------------------------

def deform_inputs(n=2, c=4, h=9, w=10, oc=6, kernel=(3, 3), group=1, offset_group=1, pads=(1, 1, 1, 1),
                  strides=(1, 1), dilations=(1, 1), bias=True, mask=True, spread=2.0, dtype=np.float32):
    kh, kw = kernel
    oh = (h + pads[0] + pads[2] - (kh - 1) * dilations[0] - 1) // strides[0] + 1
    ow = (w + pads[1] + pads[3] - (kw - 1) * dilations[1] - 1) // strides[1] + 1
    inputs = [RNG.standard_normal((n, c, h, w)), RNG.standard_normal((oc, c // group, kh, kw)),
              RNG.standard_normal((n, offset_group * kh * kw * 2, oh, ow)) * spread,
              RNG.standard_normal(oc) if bias else None,
              RNG.uniform(0, 1, (n, offset_group * kh * kw, oh, ow)) if mask else None]
    attrs = {"kernel_shape": list(kernel), "group": group, "offset_group": offset_group, "pads": list(pads),
             "strides": list(strides), "dilations": list(dilations)}
    inputs = [None if v is None else v.astype(dtype) for v in inputs]
    while inputs[-1] is None:
        inputs.pop()
    return inputs, attrs


def deform_check(kernels, inputs, attrs, rtol=1e-5, atol=1e-5):
    want = run_onnxruntime("DeformConv", inputs, attrs, 19)[0]
    got = kernels.op("DeformConv", domain="", version=19)(*inputs, **attrs)
    assert_close(got, want, rtol, atol, f"DeformConv {attrs}")
    assert_would_catch(got, want, rtol, atol, f"DeformConv {attrs}")
    return got


@pytest.mark.parametrize("config", [
    {},
    {"bias": False, "mask": False},
    {"bias": False},                                             # mask without bias
    {"group": 2, "offset_group": 2, "oc": 4},
    {"offset_group": 4, "kernel": (3, 2), "pads": (0, 1, 2, 0)},
    {"strides": (2, 1), "dilations": (2, 3), "pads": (2, 3, 2, 3)},
    {"spread": 12.0},                                            # most taps fall outside X
    {"kernel": (1, 1), "pads": (0, 0, 0, 0), "spread": 0.0},     # a plain 1x1 conv
])
def test_deform_conv_matches_onnxruntime(kernels, config):
    deform_check(kernels, *deform_inputs(**config))


def test_deform_conv_double_and_resnet_sized(kernels):
    deform_check(kernels, *deform_inputs(dtype=np.float64), rtol=1e-10, atol=1e-10)
    inputs, attrs = deform_inputs(n=1, c=64, h=25, w=34, oc=64, offset_group=2)
    deform_check(kernels, inputs, attrs, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype,rtol", [("float16", 2 ** -10), ("bfloat16", 2 ** -7)])   # two 16-bit ulps
def test_deform_conv_16_bit_floats(kernels, dtype, rtol):
    """16-bit inputs compute in float: onnxruntime's float result within the 16-bit rounding."""
    low = low_float(dtype)
    inputs, attrs = deform_inputs(offset_group=2)
    inputs = [v.astype(low) for v in inputs]
    want = run_onnxruntime("DeformConv", [v.astype(np.float32) for v in inputs], attrs, 19)[0]
    got = kernels.op("DeformConv", domain="", version=22)(*inputs, **attrs)
    assert got.dtype == low
    atol = 1e-5 * float(np.abs(want).max())
    assert_close(got.astype(np.float32), want, rtol, atol, f"DeformConv {dtype}")
    assert_would_catch(got.astype(np.float32), want, rtol, atol, f"DeformConv {dtype}", error=0.02)


def test_deform_conv_agrees_with_onnx_reference(kernels):
    inputs, attrs = deform_inputs(n=1, c=2, h=5, w=6, oc=2, offset_group=2)
    names = ["X", "W", "offset", "B", "mask"]
    node = helper.make_node("DeformConv", names, ["Y"], **attrs)
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    want = ReferenceEvaluator(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)])).run(
        None, dict(zip(names, inputs)))[0]
    got = kernels.op("DeformConv", domain="", version=19)(*inputs, **attrs)
    assert_close(got, want, 1e-4, 1e-5, "DeformConv vs onnx reference")


def test_deform_conv_offsets_far_outside_read_zeros(kernels):
    inputs, attrs = deform_inputs(n=1, mask=False)
    bias = np.broadcast_to(inputs[3][None, :, None, None], (1, 6, 9, 10))
    deform = kernels.op("DeformConv", domain="", version=19)
    for value in (np.nan, 1e30, -np.inf):
        got = deform(inputs[0], inputs[1], np.full_like(inputs[2], value), inputs[3], **attrs)
        np.testing.assert_array_equal(got, bias)
    no_channels = deform(inputs[0][:, :0], inputs[1][:, :0], inputs[2], inputs[3], **attrs)
    np.testing.assert_array_equal(no_channels, bias)


def test_deform_conv_bad_inputs_name_the_input(kernels):
    inputs, attrs = deform_inputs(group=2, offset_group=2)
    deform = kernels.op("DeformConv", domain="", version=19)
    with pytest.raises(opforge.OpError, match="'offset'"):
        deform(inputs[0], inputs[1], inputs[2][:, :-1], **attrs)
    with pytest.raises(opforge.OpError, match="'mask'"):
        deform(*inputs[:4], inputs[4][:, :-1], **attrs)
    with pytest.raises(opforge.OpError, match="kernel_shape"):
        deform(*inputs, **{**attrs, "kernel_shape": [2, 2]})
    with pytest.raises(opforge.OpError, match="offset groups"):
        deform(*inputs, **{**attrs, "offset_group": 3})
    with pytest.raises(opforge.OpError, match="does not fit"):
        deform(inputs[0][:, :, :2], *inputs[1:], **{**attrs, "pads": [0, 0, 0, 0], "strides": [2, 1]})


# A detector's tail, end to end -----------------------------------------------------------------

def detection_head_model(num_classes=5, hidden=32, channels=8):
    """A two-stage detector's second stage as torchvision exports it: RoiAlign over the feature
    map, a box head (Gemm, Relu), class scores (Softmax) and box deltas, per-class NMS, and the
    kept boxes gathered by NMS's indices."""
    rng = np.random.default_rng(5)
    weights = {"w1": rng.standard_normal((channels * 49, hidden)) * 0.05, "b1": rng.standard_normal(hidden),
               "wc": rng.standard_normal((hidden, num_classes)), "wb": rng.standard_normal((hidden, 4)),
               "max_out": np.array([10]), "iou": np.array([0.5]), "score": np.array([0.1]),
               "axis0": np.array([0]), "col": np.array(2)}
    kinds = {"max_out": TensorProto.INT64, "axis0": TensorProto.INT64, "col": TensorProto.INT64}
    inits = [helper.make_tensor(n, kinds.get(n, TensorProto.FLOAT), v.shape, v.flatten().tolist())
             for n, v in weights.items()]
    nodes = [
        helper.make_node("Shape", ["rois"], ["rois_shape"]),
        helper.make_node("Gather", ["rois_shape", "axis0"], ["num_rois"], axis=0),
        helper.make_node("ConstantOfShape", ["num_rois"], ["batch_idx"],
                         value=helper.make_tensor("zero", TensorProto.INT64, [1], [0])),
        helper.make_node("RoiAlign", ["features", "rois", "batch_idx"], ["pooled"], output_height=7,
                         output_width=7, sampling_ratio=2, spatial_scale=0.25),
        helper.make_node("Flatten", ["pooled"], ["flat"], axis=1),
        helper.make_node("Gemm", ["flat", "w1", "b1"], ["h0"]),
        helper.make_node("Relu", ["h0"], ["h"]),
        helper.make_node("Gemm", ["h", "wc"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=1),
        helper.make_node("Gemm", ["h", "wb"], ["deltas"]),
        helper.make_node("Add", ["rois", "deltas"], ["boxes"]),
        helper.make_node("Unsqueeze", ["boxes", "axis0"], ["boxes3"]),
        helper.make_node("Transpose", ["probs"], ["probs_t"], perm=[1, 0]),
        helper.make_node("Unsqueeze", ["probs_t", "axis0"], ["scores3"]),
        helper.make_node("NonMaxSuppression", ["boxes3", "scores3", "max_out", "iou", "score"], ["selected"]),
        helper.make_node("Gather", ["selected", "col"], ["box_idx"], axis=1),
        helper.make_node("Gather", ["boxes", "box_idx"], ["detections"], axis=0),
    ]
    graph = helper.make_graph(
        nodes, "detector_tail",
        [helper.make_tensor_value_info("features", TensorProto.FLOAT, [1, channels, 20, 24]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [None, 4])],
        [helper.make_tensor_value_info("selected", TensorProto.INT64, None),
         helper.make_tensor_value_info("detections", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)])


def test_detection_head_runs_natively_and_matches_onnxruntime():
    import onnxruntime as ort

    model = detection_head_model().SerializeToString()
    ours = InferenceSession(model, SessionOptions(disable_reference_fallback=True),
                            providers=["CPUExecutionProvider"])
    theirs = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(6)
    features = rng.standard_normal((1, 8, 20, 24)).astype(np.float32)
    for num_rois in (60, 60, 25):   # the second run takes the compiled plan
        start = rng.uniform(0, 80, (num_rois, 2))
        rois = np.concatenate([start, start + rng.uniform(4, 30, (num_rois, 2))], 1).astype(np.float32)
        feeds = {"features": features, "rois": rois}
        (selected, detections), (want_selected, want_detections) = ours.run(None, feeds), theirs.run(None, feeds)
        np.testing.assert_array_equal(selected, want_selected)
        assert len(selected) > 5
        assert_close(detections, want_detections, 1e-4, 1e-4, "detections")


# The ops around them at detection sizes ---------------------------------------------------------

def test_topk_and_gathers_at_detection_sizes(kernels):
    """A detector's candidate selection: TopK over 120k anchor scores (with ties), per-class TopK,
    then the boxes and scores gathered by the chosen indices, as YOLO/RetinaNet exports run it."""
    from tests.support.kernel_check import check

    scores = RNG.uniform(0, 1, (1, 120000)).astype(np.float32)
    tied = (np.round(scores * 64) / 64).astype(np.float32)
    k = np.array([1000], np.int64)
    for data in (scores, tied):
        check(kernels, "TopK", [data, k], opset=11, num_outputs=2, rtol=0, atol=0)
    check(kernels, "TopK", [RNG.uniform(0, 1, (1, 80, 1000)).astype(np.float32), np.array([100], np.int64)],
          {"largest": 1, "sorted": 1}, opset=11, num_outputs=2, rtol=0, atol=0)
    boxes = RNG.uniform(0, 1, (120000, 4)).astype(np.float32)
    picked = RNG.integers(-120000, 120000, 1000).astype(np.int64)
    check(kernels, "Gather", [boxes, picked], {"axis": 0}, opset=13, rtol=0, atol=0)
    selected = np.stack([np.zeros(300, np.int64), RNG.integers(0, 80, 300), RNG.integers(0, 1000, 300)], 1)
    check(kernels, "GatherND", [RNG.uniform(0, 1, (1, 80, 1000)).astype(np.float32), selected], opset=13,
          rtol=0, atol=0)
    check(kernels, "Gather", [selected, np.array(2, np.int64)], {"axis": 1}, opset=13, rtol=0, atol=0)
