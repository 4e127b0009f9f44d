// data_movement_pad.cpp: Pad (constant, reflect, edge, wrap) and Trilu, row by row.
#include <algorithm>
#include <string>

#include "data_movement/data_movement.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

enum class PadMode { Constant, Reflect, Edge, Wrap };

/// Pads before and after each dim; negative entries crop.
struct PadSpec {
  Shape begin, end;
  PadMode mode;
};

template <class Ctx> PadMode pad_mode(const Ctx& ctx) {
  const std::string m = ctx.template attr<std::string>("mode");
  if (m == "constant") return PadMode::Constant;
  if (m == "reflect") return PadMode::Reflect;
  if (m == "edge") return PadMode::Edge;
  if (m == "wrap") return PadMode::Wrap;
  throw opforge::Error("attribute 'mode' must be constant, reflect, edge or wrap, got '" + m + "'");
}

/// Pad-2 reads 'pads' from an attribute; Pad-11 from input 1, Pad-18 also 'axes' from input 3.
template <class Ctx> PadSpec pad_spec(const Ctx& ctx, int version) {
  const int64_t rank = ctx.input(0).ndim();
  Shape pads, axes;
  if (version < 11) {
    pads = ctx.template attr<Shape>("pads");
  } else {
    if (!ctx.input(1).has_data()) throw needs_value("Pad", "pads");
    pads = read_ints(ctx.input(1));
  }
  if (version >= 18 && ctx.has_input(3)) {
    if (!ctx.input(3).has_data()) throw needs_value("Pad", "axes");
    axes = read_ints(ctx.input(3));
  } else {
    for (int64_t d = 0; d < rank; ++d) axes.push_back(d);
  }
  OPFORGE_CHECK(pads.size() == 2 * axes.size(), "'pads' has ", pads.size(), " entries; expected ",
                2 * axes.size(), " (2 per axis)");
  PadSpec spec{Shape(size_t(rank), 0), Shape(size_t(rank), 0), pad_mode(ctx)};
  for (size_t i = 0; i < axes.size(); ++i) {
    const size_t d = size_t(normalize_axis(axes[i], rank));
    spec.begin[d] = pads[i];
    spec.end[d] = pads[i + axes.size()];
  }
  return spec;
}

Shape padded_shape(const Shape& in, const PadSpec& spec) {
  Shape out(in.size());
  for (size_t d = 0; d < in.size(); ++d) {
    out[d] = in[d] < 0 ? -1 : size_add(size_add(in[d], spec.begin[d]), spec.end[d]);
    OPFORGE_CHECK(in[d] < 0 || out[d] >= 0, "'pads' crop axis ", d, " of size ", in[d], " below zero");
  }
  return out;
}

template <int V> void pad_infer(InferContext& ctx) {
  ctx.set_output(0, ctx.input(0).dtype(), padded_shape(ctx.input(0).sizes(), pad_spec(ctx, V)));
}

/// The input index that padding position i (outside [0, n)) reads; -1 for the constant value.
int64_t pad_source(int64_t i, int64_t n, PadMode mode) {
  switch (mode) {
    case PadMode::Constant: return -1;
    case PadMode::Edge: return std::clamp<int64_t>(i, 0, n - 1);
    case PadMode::Wrap: return ((i % n) + n) % n;
    case PadMode::Reflect: break;
  }
  const int64_t period = 2 * (n - 1);
  if (period == 0) return 0;
  i = ((i % period) + period) % period;
  return i < n ? i : period - i;
}

/// For each output index of dim d, the input index it reads (-1: the constant value). Like
/// onnxruntime, negative pads crop first and positive pads then extend what is left.
Shape index_map(const PadSpec& spec, size_t d, int64_t out, int64_t n) {
  const int64_t crop = std::max<int64_t>(0, -spec.begin[d]), before = std::max<int64_t>(0, spec.begin[d]);
  const int64_t kept = n - crop - std::max<int64_t>(0, -spec.end[d]);
  OPFORGE_CHECK(kept > 0 || spec.mode == PadMode::Constant || out == 0, "cannot pad axis ", d,
                " with no elements left in this mode");
  Shape map(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    const int64_t i = o - before;
    const int64_t src = i >= 0 && i < kept ? i : pad_source(i, kept, spec.mode);
    map[size_t(o)] = src < 0 ? -1 : crop + src;
  }
  return map;
}

/// Writes one output row: the input row (null: all padding) through the last dim's map; the
/// run [lo, hi) is a plain copy from s + crop.
template <class U>
void pad_row(U* d, const U* s, const Shape& map, int64_t lo, int64_t hi, int64_t crop, U value) {
  const int64_t out = int64_t(map.size());
  if (s == nullptr) {
    std::fill(d, d + out, value);
    return;
  }
  for (int64_t j = 0; j < lo; ++j) d[j] = map[size_t(j)] < 0 ? value : s[map[size_t(j)]];
  if (hi > lo) std::memcpy(d + lo, s + crop, size_t(hi - lo) * sizeof(U));
  for (int64_t j = hi; j < out; ++j) d[j] = map[size_t(j)] < 0 ? value : s[map[size_t(j)]];
}

/// The padding value as bits of the data's dtype.
template <int V> uint64_t pad_value(const KernelContext& ctx, int64_t es) {
  if (V < 11) return scalar_bits(ctx.input(0).dtype(), ctx.attr<float>("value"));
  uint64_t bits = 0;
  if (ctx.has_input(2) && ctx.input(2).numel() > 0) {
    OPFORGE_CHECK(ctx.input(2).dtype() == ctx.input(0).dtype(), "input 'constant_value' must have the data's dtype");
    std::memcpy(&bits, ctx.input(2).raw(), size_t(es));
  }
  return bits;
}

template <int V> void pad_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const PadSpec spec = pad_spec(ctx, V);
  const Shape in = x.sizes(), out = y.sizes(), in_strides = contiguous_strides(in);
  const int64_t es = elem_size(x);
  if (numel(out) == 0) return;
  if (out.empty()) return copy_bytes(ctx, y.raw(), x.raw(), es);
  std::vector<Shape> maps;
  for (size_t d = 0; d < in.size(); ++d) maps.push_back(index_map(spec, d, out[d], in[d]));
  const size_t last = in.size() - 1;
  const int64_t rows = numel(out) / out[last];
  const int64_t crop = std::max<int64_t>(0, -spec.begin[last]);
  const int64_t lo = std::min(std::max<int64_t>(0, spec.begin[last]), out[last]);
  const int64_t hi = std::min(lo + in[last] - crop - std::max<int64_t>(0, -spec.end[last]), out[last]);
  const uint64_t value = pad_value<V>(ctx, es);
  dispatch_bytes(es, [&](auto tag) {
    using U = typename decltype(tag)::type;
    const U* src = static_cast<const U*>(x.raw());
    U* dst = static_cast<U*>(y.raw());
    ctx.parallel_for(rows, std::max<int64_t>(1, 32768 / out[last]), [&](int64_t b, int64_t e) {
      for (int64_t row = b; row < e; ++row) {
        int64_t rest = row, off = 0;
        for (size_t d = last; d-- > 0 && off >= 0;) {
          const int64_t i = maps[d][size_t(rest % out[d])];
          off = i < 0 ? -1 : off + i * in_strides[d];
          rest /= out[d];
        }
        pad_row(dst + row * out[last], off < 0 ? nullptr : src + off, maps[last], lo, std::max(lo, hi), crop,
                U(value));
      }
    });
  });
}

void trilu_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  OPFORGE_CHECK(x.ndim() >= 2, "Trilu needs an input of rank >= 2, got rank ", x.ndim());
  int64_t k = 0;
  if (ctx.has_input(1)) {
    const Shape kv = read_ints(ctx.input(1));
    OPFORGE_CHECK(kv.size() == 1, "input 'k' must hold one value, got ", kv.size());
    k = kv[0];
  }
  const bool upper = ctx.attr<int64_t>("upper") != 0;
  const int64_t n = x.size(-2), m = x.size(-1), es = elem_size(x), rows = x.numel() / std::max<int64_t>(m, 1);
  if (x.numel() == 0) return;
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  ctx.parallel_for(rows, std::max<int64_t>(1, 32768 / m), [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      const int64_t i = row % n, off = row * m * es;
      // Upper keeps columns j >= i + k, lower keeps j <= i + k: one zeroed run, one copied run.
      const int64_t split = std::clamp<int64_t>(upper ? i + k : i + k + 1, 0, m) * es;
      const int64_t keep_lo = upper ? split : 0, keep_hi = upper ? m * es : split;
      const int64_t zero_lo = upper ? 0 : split, zero_hi = upper ? split : m * es;
      std::memcpy(dst + off + keep_lo, src + off + keep_lo, size_t(keep_hi - keep_lo));
      std::memset(dst + off + zero_lo, 0, size_t(zero_hi - zero_lo));
    }
  });
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Pad)
    .since(2)
    .input("data", OPFORGE_ALL_DTYPES)
    .output("output")
    .required_attr("pads", opforge::AttrType::Ints)
    .attr("mode", "constant")
    .attr("value", 0.0f)
    .infer(pad_infer<2>)
    .compute(pad_compute<2>);

OPFORGE_OP(Pad)
    .since(11)
    .input("data", OPFORGE_ALL_DTYPES)
    .input("pads", {opforge::i64})
    .optional_input("constant_value", OPFORGE_ALL_DTYPES)
    .output("output")
    .attr("mode", "constant")
    .infer(pad_infer<11>)
    .compute(pad_compute<11>);

OPFORGE_OP(Pad)
    .since(18)
    .input("data", OPFORGE_ALL_DTYPES)
    .input("pads", {opforge::i64})
    .optional_input("constant_value", OPFORGE_ALL_DTYPES)
    .optional_input("axes", {opforge::i32, opforge::i64})
    .output("output")
    .attr("mode", "constant")
    .infer(pad_infer<18>)
    .compute(pad_compute<18>);

OPFORGE_OP(Trilu)
    .since(14)
    .input("input", OPFORGE_ALL_DTYPES)
    .optional_input("k", {opforge::i64})
    .output("output")
    .attr("upper", int64_t(1))
    .infer(opforge::same_as_input0)
    .compute(trilu_compute);

// onnxruntime's contrib Trilu, from before opset 14: the same op.
OPFORGE_OP(Trilu)
    .domain("com.microsoft")
    .since(1)
    .input("input", OPFORGE_ALL_DTYPES)
    .optional_input("k", {opforge::i64})
    .output("output")
    .attr("upper", int64_t(1))
    .infer(opforge::same_as_input0)
    .compute(trilu_compute);
