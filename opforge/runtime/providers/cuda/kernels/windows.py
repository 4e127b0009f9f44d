"""Sliding windows over the spatial dims of NCHW tensors (no copy), and ONNX's padding rules;
shared by Conv and the pooling ops."""


def pads_for(node, spatial: tuple, kernel: tuple, strides: tuple, dilations: tuple) -> tuple:
    """(top, left, bottom, right)-style pads: begins then ends, as ONNX's `pads` attribute,
    resolved from auto_pad (SAME_UPPER / SAME_LOWER / VALID) when it is set."""
    auto = node.attrs.get("auto_pad", "NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    rank = len(spatial)
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        begins, ends = [], []
        for size, k, s, d in zip(spatial, kernel, strides, dilations):
            out = -(-size // s)
            total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
            small, large = total // 2, total - total // 2
            begins.append(small if auto == "SAME_UPPER" else large)
            ends.append(large if auto == "SAME_UPPER" else small)
        return tuple(begins + ends)
    if auto == "VALID":
        return (0,) * (2 * rank)
    return tuple(int(p) for p in node.attrs.get("pads", [0] * (2 * rank)))


def padded(xp, x, pads: tuple, value: float = 0.0):
    """x with its two spatial dims padded (pads as ONNX orders them)."""
    if not any(pads):
        return x
    top, left, bottom, right = pads
    return xp.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=value)


def windows(xp, x, kernel: tuple, strides: tuple, dilations: tuple):
    """A view of shape (N, C, KH, KW, OH, OW) over a padded NCHW x: every window position."""
    n, c, h, w = x.shape
    (kh, kw), (sh, sw), (dh, dw) = kernel, strides, dilations
    oh, ow = (h - dh * (kh - 1) - 1) // sh + 1, (w - dw * (kw - 1) - 1) // sw + 1
    s = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, shape=(n, c, kh, kw, oh, ow),
        strides=(s[0], s[1], s[2] * dh, s[3] * dw, s[2] * sh, s[3] * sw))
