// data_movement.cpp: the strided copy behind data movement; Transpose, DepthToSpace, SpaceToDepth.
#include "data_movement/data_movement.h"
#include "data_movement/data_movement_transpose.h"

#include <algorithm>
#include <string>

namespace opforge_cpu {
namespace data_movement {

uint64_t scalar_bits(int32_t dtype, double value) {
  uint64_t bits = 0;
  bool ok = opforge::dispatch<float, double, int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t,
                              uint32_t, uint64_t, bool>(dtype, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T v = T(value);
    std::memcpy(&bits, &v, sizeof(T));
  });
  if (dtype == OPF_FLOAT16) {
    bits = opforge::from_float(float(value), opforge::float16_t{}).bits;
  } else if (dtype == OPF_BFLOAT16) {
    bits = opforge::from_float(float(value), opforge::bfloat16_t{}).bits;
  } else if (!ok) {
    throw opforge::Error(opforge::str("no scalar of dtype ", opforge::dtype_name(dtype)));
  }
  return bits;
}

namespace {

/// Drops size-1 dims and merges neighbours that are contiguous in the source.
void coalesce(const Shape& shape, const Shape& strides, Shape& out_shape, Shape& out_strides) {
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1) continue;
    if (!out_shape.empty() && out_strides.back() == strides[i] * shape[i]) {
      out_shape.back() *= shape[i];
      out_strides.back() = strides[i];
    } else {
      out_shape.push_back(shape[i]);
      out_strides.push_back(strides[i]);
    }
  }
}

/// Source and destination offsets of flat index `flat` over `dims` (outermost first).
void offsets_of(int64_t flat, const Shape& dims, const Shape& src_st, const Shape& dst_st, int64_t& src,
                int64_t& dst) {
  src = 0;
  dst = 0;
  for (size_t i = dims.size(); i-- > 0;) {
    int64_t q = flat / dims[i], r = flat - q * dims[i];
    src += r * src_st[i];
    dst += r * dst_st[i];
    flat = q;
  }
}

/// Writes one row of `inner` elements from s with source step `step`: memcpy, fill or gather.
template <class U> inline void copy_row(U* d, const U* s, int64_t inner, int64_t step) {
  if (step == 1) {
    std::memcpy(d, s, size_t(inner) * sizeof(U));
  } else if (step == 0) {
    std::fill(d, d + inner, *s);
  } else {
    for (int64_t j = 0; j < inner; ++j) d[j] = s[j * step];
  }
}

/// Copies rows of the innermost dim. A contiguous row broadcast along the dim before it
/// (Tile, Expand) is written once and then doubled in place: log2(repeats) memcpys; long rows
/// stay separate so that threads can share them.
template <class U>
void copy_rows(const KernelContext& ctx, U* dst, const U* src, Shape shape, Shape strides) {
  int64_t repeat = 1;
  const size_t r = shape.size();
  if (r >= 2 && strides[r - 1] == 1 && strides[r - 2] == 0 && shape[r - 1] * shape[r - 2] <= 65536) {
    repeat = shape[r - 2];
    shape.erase(shape.end() - 2);
    strides.erase(strides.end() - 2);
  }
  const int64_t inner = shape.back(), step = strides.back(), row_len = inner * repeat;
  const Shape outer(shape.begin(), shape.end() - 1), outer_src(strides.begin(), strides.end() - 1);
  ctx.parallel_for(numel(outer), std::max<int64_t>(1, 32768 / row_len), [&](int64_t b, int64_t e) {
    std::vector<int64_t> index(outer.size());
    int64_t rest = b, off = 0;
    for (size_t i = outer.size(); i-- > 0;) {
      index[i] = rest % outer[i];
      rest /= outer[i];
      off += index[i] * outer_src[i];
    }
    for (int64_t row = b; row < e; ++row) {
      U* d = dst + row * row_len;
      copy_row(d, src + off, inner, step);
      for (int64_t done = inner; done < row_len; done *= 2)
        std::memcpy(d + done, d, size_t(std::min(done, row_len - done)) * sizeof(U));
      for (size_t i = outer.size(); i-- > 0;) {
        off += outer_src[i];
        if (++index[i] < outer[i]) break;
        off -= outer_src[i] * outer[i];
        index[i] = 0;
      }
    }
  });
}

/// One tile of a 2-D transpose: dst[a * dst_a + b] = src[a + b * src_b], in register blocks.
template <class U>
inline void transpose_tile(U* dst, const U* src, int64_t na, int64_t nb, int64_t dst_a, int64_t src_b) {
  constexpr int N = TransposeBlock<U>::N;
  const int64_t fa = na - na % N, fb = nb - nb % N;
  for (int64_t a = 0; a < fa; a += N)
    for (int64_t b = 0; b < fb; b += N) TransposeBlock<U>::run(src + a + b * src_b, src_b, dst + a * dst_a + b, dst_a);
  for (int64_t a = 0; a < na; ++a) {
    const int64_t b0 = a < fa ? fb : 0;
    for (int64_t b = b0; b < nb; ++b) dst[a * dst_a + b] = src[a + b * src_b];
  }
}

/// Copies where source dim k has stride 1 but the innermost does not: tiles the (k, last)
/// plane so both the reads and the writes of a tile stay in cache.
template <class U>
void copy_tiled(const KernelContext& ctx, U* dst, const U* src, const Shape& shape, const Shape& strides,
                size_t k) {
  const size_t last = shape.size() - 1;
  const Shape dst_all = contiguous_strides(shape);
  Shape outer, outer_src, outer_dst;
  for (size_t i = 0; i < last; ++i) {
    if (i == k) continue;
    outer.push_back(shape[i]);
    outer_src.push_back(strides[i]);
    outer_dst.push_back(dst_all[i]);
  }
  const int64_t A = shape[k], B = shape[last], dst_a = dst_all[k], src_b = strides[last];
  // A strip of 256 bytes of each source row, walked down all of B in tiles of 64 rows.
  constexpr int64_t kStrip = std::max<int64_t>(TransposeBlock<U>::N, 256 / int64_t(sizeof(U))), kTileB = 64;
  const int64_t strips = (A + kStrip - 1) / kStrip, items = numel(outer) * strips;
  ctx.parallel_for(items, std::max<int64_t>(1, 32768 / (kStrip * B)), [&](int64_t b, int64_t e) {
    for (int64_t w = b; w < e; ++w) {
      int64_t so, dof;
      offsets_of(w / strips, outer, outer_src, outer_dst, so, dof);
      const int64_t a0 = (w % strips) * kStrip, na = std::min(kStrip, A - a0);
      for (int64_t b0 = 0; b0 < B; b0 += kTileB)
        transpose_tile(dst + dof + a0 * dst_a + b0, src + so + a0 + b0 * src_b, na, std::min(kTileB, B - b0),
                       dst_a, src_b);
    }
  });
}

}  // namespace

void strided_copy(const KernelContext& ctx, void* dst, const void* src, int64_t es, const Shape& shape,
                  const Shape& strides) {
  if (numel(shape) == 0) return;
  Shape cs, cst;
  coalesce(shape, strides, cs, cst);
  dispatch_bytes(es, [&](auto tag) {
    using U = typename decltype(tag)::type;
    U* d = static_cast<U*>(dst);
    const U* s = static_cast<const U*>(src);
    if (cs.empty()) {
      *d = *s;
      return;
    }
    const size_t last = cs.size() - 1;
    if (cst[last] != 1 && cst[last] != 0) {
      // Tiling pays when the contiguous source dim is long enough to fill whole cache lines.
      for (size_t k = last; k-- > 0;)
        if (cst[k] == 1 && cs[k] >= 8) return copy_tiled(ctx, d, s, cs, cst, k);
    }
    copy_rows(ctx, d, s, cs, cst);
  });
}

}  // namespace data_movement

namespace {

using namespace data_movement;

/// Transpose's permutation: the attribute, or the reversed axes; validated against the rank.
template <class Ctx> Shape transpose_perm(const Ctx& ctx, int64_t rank) {
  Shape perm;
  if (ctx.has_attr("perm")) {
    perm = ctx.template attr<Shape>("perm");
  } else {
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  }
  OPFORGE_CHECK(int64_t(perm.size()) == rank, "attribute 'perm' has ", perm.size(),
                " entries for an input of rank ", rank);
  std::vector<bool> seen(size_t(rank), false);
  for (int64_t p : perm) {
    OPFORGE_CHECK(p >= 0 && p < rank && !seen[size_t(p)], "attribute 'perm' is not a permutation: bad entry ",
                  p);
    seen[size_t(p)] = true;
  }
  return perm;
}

void transpose_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  const Shape perm = transpose_perm(ctx, int64_t(in.size()));
  Shape out(in.size());
  for (size_t i = 0; i < in.size(); ++i) out[i] = in[size_t(perm[i])];
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void transpose_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Shape in = x.sizes(), in_strides = contiguous_strides(in);
  const Shape perm = transpose_perm(ctx, int64_t(in.size()));
  Shape shape(in.size()), strides(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    shape[i] = in[size_t(perm[i])];
    strides[i] = in_strides[size_t(perm[i])];
  }
  strided_copy(ctx, ctx.output(0).raw(), x.raw(), elem_size(x), shape, strides);
}

/// The blocksize attribute, checked against a 4-D NCHW input.
template <class Ctx> int64_t block_size(const Ctx& ctx, const Shape& in) {
  const int64_t b = ctx.template attr<int64_t>("blocksize");
  OPFORGE_CHECK(b > 0, "attribute 'blocksize' must be positive, got ", b);
  OPFORGE_CHECK(in.size() == 4, "input must be 4-D (N, C, H, W), got shape ", shape_str(in));
  return b;
}

/// DepthToSpace's mode: true for CRD, false for DCR.
template <class Ctx> bool crd_mode(const Ctx& ctx) {
  if (!ctx.has_attr("mode")) return false;
  const std::string mode = ctx.template attr<std::string>("mode");
  OPFORGE_CHECK(mode == "DCR" || mode == "CRD", "attribute 'mode' must be DCR or CRD, got '", mode, "'");
  return mode == "CRD";
}

void depth_to_space_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  const int64_t b = block_size(ctx, in);
  crd_mode(ctx);
  const int64_t bb = size_mul(b, b);
  OPFORGE_CHECK(in[1] < 0 || in[1] % bb == 0, "channels ", in[1], " are not divisible by blocksize^2 = ", bb);
  ctx.set_output(0, ctx.input(0).dtype(),
                 {in[0], in[1] < 0 ? -1 : in[1] / bb, in[2] < 0 ? -1 : size_mul(in[2], b),
                  in[3] < 0 ? -1 : size_mul(in[3], b)});
}

void depth_to_space_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Shape in = x.sizes();
  const int64_t b = block_size(ctx, in), c = in[1] / (b * b), H = in[2], W = in[3], hw = H * W;
  // (N, c, H, b1, W, b2) read from the input viewed as (N, b1, b2, c, H, W) or (N, c, b1, b2, H, W).
  const Shape shape{in[0], c, H, b, W, b};
  const Shape strides = crd_mode(ctx) ? Shape{in[1] * hw, b * b * hw, W, b * hw, 1, hw}
                                      : Shape{in[1] * hw, hw, W, b * c * hw, 1, c * hw};
  strided_copy(ctx, ctx.output(0).raw(), x.raw(), elem_size(x), shape, strides);
}

void space_to_depth_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  const int64_t b = block_size(ctx, in);
  crd_mode(ctx);
  OPFORGE_CHECK((in[2] < 0 || in[2] % b == 0) && (in[3] < 0 || in[3] % b == 0), "spatial dims ", in[2], "x",
                in[3], " are not divisible by blocksize ", b);
  ctx.set_output(0, ctx.input(0).dtype(),
                 {in[0], in[1] < 0 ? -1 : size_mul(in[1], size_mul(b, b)), in[2] < 0 ? -1 : in[2] / b,
                  in[3] < 0 ? -1 : in[3] / b});
}

void space_to_depth_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Shape in = x.sizes();
  const int64_t b = block_size(ctx, in), C = in[1], W = in[3], hw = in[2] * W;
  // (N, b1, b2, C, h, w) for DCR, (N, C, b1, b2, h, w) for CRD, read from the input viewed as
  // (N, C, h, b1, w, b2).
  const bool crd = crd_mode(ctx);
  const Shape shape = crd ? Shape{in[0], C, b, b, in[2] / b, W / b} : Shape{in[0], b, b, C, in[2] / b, W / b};
  const Shape strides = crd ? Shape{C * hw, hw, W, 1, b * W, b} : Shape{C * hw, W, 1, hw, b * W, b};
  strided_copy(ctx, ctx.output(0).raw(), x.raw(), elem_size(x), shape, strides);
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Transpose)
    .since(1)
    .input("data", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("transposed")
    .optional_attr("perm", opforge::AttrType::Ints)
    .infer(transpose_infer)
    .compute(transpose_compute);
// Opset 11 adds mode (DCR, the only arrangement before, or CRD).
OPFORGE_OP(DepthToSpace)
    .since(1)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .required_attr("blocksize", opforge::AttrType::Int)
    .attr("mode", "DCR").attr_versions(11)
    .infer(depth_to_space_infer)
    .compute(depth_to_space_compute);
// Opset 28 adds mode.
OPFORGE_OP(SpaceToDepth)
    .since(1)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("output")
    .required_attr("blocksize", opforge::AttrType::Int)
    .attr("mode", "DCR").attr_versions(28)
    .infer(space_to_depth_infer)
    .compute(space_to_depth_compute);
