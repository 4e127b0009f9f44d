"""Signal and image-block kernels (windows, MelWeightMatrix, DFT, STFT, Det, Col2Im, MaxUnpool)
against onnxruntime, or numpy where onnxruntime lacks the op."""
import numpy as np
import pytest

from opforge.errors import OpError
from tests.support.kernel_check import check, run_onnxruntime
from tests.support.kernel_check import check_reference

RNG = np.random.default_rng(11)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("periodic", [0, 1])
def test_windows(kernels, op, periodic):
    for size, dtype in ((10, 1), (7, 11), (1, 1)):
        if size == 1 and not periodic:
            continue   # N - 1 = 0: the formula divides by zero
        attrs = {"periodic": periodic, "output_datatype": dtype}
        check(kernels, op, [np.array(size, np.int64)], attrs, opset=17, rtol=1e-6, atol=1e-7)


def test_mel_weight_matrix(kernels):
    inputs = [np.array(8, np.int64), np.array(64, np.int64), np.array(16000, np.int64),
              np.array(0, np.float32), np.array(8000, np.float32)]
    check(kernels, "MelWeightMatrix", inputs, opset=17, rtol=1e-6, atol=1e-7)


def numpy_dft(x, n, axis, inverse, onesided):
    """The DFT of [..., 1 or 2] data along ``axis`` in double, as the ONNX spec defines it."""
    signal = x[..., 0] + (1j * x[..., 1] if x.shape[-1] == 2 else 0)
    axis %= x.ndim   # an axis of x, whose last dim the signal does not have
    if inverse and onesided:
        return np.fft.irfft(signal, n=n, axis=axis)[..., None]
    y = (np.fft.ifft if inverse else np.fft.fft)(signal.astype(np.complex128), n=n, axis=axis)
    if onesided:
        y = np.take(y, range(n // 2 + 1), axis=axis)
    return np.stack([y.real, y.imag], axis=-1)


@pytest.mark.parametrize("inverse,onesided", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("n", [None, 12, 7, 30, 16, 97, 130])   # 7, 16, 97: lengths numpy's FFT plan here skips; 97, 130: long enough for Bluestein
def test_dft_matches_numpy(kernels, inverse, onesided, n):
    x = RNG.standard_normal((2, 9, 3, 2 if not (onesided and not inverse) else 1))
    for axis in (1, -3, 2):
        length = x.shape[axis] if n is None else n
        if inverse and onesided and n is None:
            length = 2 * (x.shape[axis] - 1)
        dft = kernels.op("DFT", domain="", version=20)
        inputs = [x, None if n is None else np.array(n, np.int64), np.array(axis, np.int64)]
        got = dft(*inputs, inverse=inverse, onesided=onesided)
        want = numpy_dft(x, length, axis, inverse, onesided)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        got32 = dft(x.astype(np.float32), *inputs[1:], inverse=inverse, onesided=onesided)
        assert got32.dtype == np.float32
        np.testing.assert_allclose(got32, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_dft_float32_inverse_rounds_as_numpy(kernels):
    """numpy's ifft computes complex64 in float; the kernel reproduces its rounding bit for bit."""
    x = RNG.standard_normal((3, 20, 2)).astype(np.float32)
    for n in (20, 10, 12, 15, 4, 6):
        got = kernels.op("DFT", domain="", version=17)(x, np.array(n, np.int64), axis=1, inverse=1)
        y = np.fft.ifft((x[..., 0] + 1j * x[..., 1]).astype(np.complex64), n=n, axis=1)
        np.testing.assert_array_equal(got, np.stack([y.real, y.imag], -1))


def test_dft_refuses_the_last_axis(kernels):
    with pytest.raises(OpError, match="must not be the last"):
        kernels.op("DFT", domain="", version=17)(np.zeros((4, 2), np.float32), axis=1)


@pytest.mark.parametrize("onesided", [0, 1])
def test_stft(kernels, onesided):
    signal = RNG.standard_normal((2, 64, 1)).astype(np.float32)
    window = np.hanning(16).astype(np.float32)
    got = kernels.op("STFT", domain="", version=17)(signal, np.array(8, np.int64), window, onesided=onesided)
    frames = np.stack([signal[:, f * 8:f * 8 + 16, 0] * window for f in range(7)], axis=1)
    spectrum = np.fft.fft(frames.astype(np.float64), axis=-1)[..., :9 if onesided else 16]
    want = np.stack([spectrum.real, spectrum.imag], -1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max())


def test_det(kernels):
    for shape in ((3, 3), (2, 4, 5, 5), (1, 1)):
        x = RNG.standard_normal(shape).astype(np.float32)
        check(kernels, "Det", [x], opset=11, rtol=1e-4, atol=1e-5)
    singular = np.array([[1, 2], [2, 4]], np.float64)
    assert kernels.op("Det", domain="", version=11)(singular) == 0


def test_col2im(kernels):
    for image, block, attrs in (([5, 5], [2, 2], {}),
                                ([6, 7], [3, 2], {"strides": [2, 1], "pads": [1, 0, 1, 1], "dilations": [1, 2]}),
                                ([4, 3, 5], [2, 1, 2], {})):
        positions = [(i + (attrs.get("pads", [0] * 6)[d] + attrs.get("pads", [0] * 6)[d + len(image)])
                      - attrs.get("dilations", [1] * 3)[d] * (b - 1) - 1) // attrs.get("strides", [1] * 3)[d] + 1
                     for d, (i, b) in enumerate(zip(image, block))]
        x = RNG.standard_normal((2, 3 * int(np.prod(block)), int(np.prod(positions)))).astype(np.float32)
        check_reference(kernels, "Col2Im", [x, np.array(image, np.int64), np.array(block, np.int64)], attrs, 18,
                        rtol=1e-5)


def test_max_unpool_inverts_max_pool(kernels):
    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    pooled, indices = run_onnxruntime("MaxPool", [x], {"kernel_shape": [2, 2], "strides": [2, 2]}, 12, 2)
    attrs = {"kernel_shape": [2, 2], "strides": [2, 2]}
    check(kernels, "MaxUnpool", [pooled, indices], attrs, opset=11, rtol=0, atol=0)
    # a larger output_shape: indices stay flat indices of the unpooled shape, which sits at the
    # start of each dim (the ONNX spec's example; onnxruntime reads them in output_shape instead)
    check_reference(kernels, "MaxUnpool", [pooled, indices, np.array([2, 3, 7, 8], np.int64)], attrs, 11)


def test_max_roi_pool(kernels):
    x = RNG.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = np.array([[0, 1, 1, 7, 5], [1, 0, 0, 11, 9], [1, 3.4, 2.6, 3.4, 2.6], [0, 8, 6, 30, 20]], np.float32)
    for attrs in ({"pooled_shape": [2, 3]}, {"pooled_shape": [4, 4], "spatial_scale": 0.5}):
        check(kernels, "MaxRoiPool", [x, rois], attrs, opset=1, rtol=0, atol=0)
