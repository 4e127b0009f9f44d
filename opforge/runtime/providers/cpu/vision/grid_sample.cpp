// grid_sample.cpp: GridSample (opsets 16, 20) samples an (N, C, spatial...) input at normalised
// grid points with nearest, linear or cubic taps and zeros/border/reflection padding; AffineGrid
// (20) builds such a grid from (N, 2, 3) or (N, 3, 4) affine matrices.
#include <cmath>
#include <string>

#include "data_movement/data_movement.h"
#include "common/float_io.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;

enum class Mode { Nearest, Linear, Cubic };
enum class Padding { Zeros, Border, Reflection };

struct Options {
  Mode mode = Mode::Linear;
  Padding padding = Padding::Zeros;
  bool align_corners = false;
};

template <class Ctx> Options read_options(const Ctx& ctx) {
  Options o;
  const std::string m = ctx.template attr<std::string>("mode"), p = ctx.template attr<std::string>("padding_mode");
  if (m == "nearest") o.mode = Mode::Nearest;
  else if (m == "linear" || m == "bilinear") o.mode = Mode::Linear;
  else if (m == "cubic" || m == "bicubic") o.mode = Mode::Cubic;
  else throw opforge::Error(opforge::str("attribute 'mode' must be nearest, linear or cubic, got '", m, "'"));
  if (p == "zeros") o.padding = Padding::Zeros;
  else if (p == "border") o.padding = Padding::Border;
  else if (p == "reflection") o.padding = Padding::Reflection;
  else throw opforge::Error(opforge::str("attribute 'padding_mode' must be zeros, border or reflection, got '", p, "'"));
  o.align_corners = ctx.template attr<int64_t>("align_corners") != 0;
  return o;
}

void infer(InferContext& ctx) {
  read_options(ctx);
  Tensor x = ctx.input(0), grid = ctx.input(1);
  const int spatial = x.ndim() - 2;
  OPFORGE_CHECK(spatial >= 1, "input X must be (N, C, spatial...), got rank ", x.ndim());
  OPFORGE_CHECK(grid.ndim() == x.ndim() && (grid.size(-1) < 0 || grid.size(-1) == spatial), "input 'grid' must be (N, ",
                "out spatial..., ", spatial, ") for a rank-", x.ndim(), " X");
  OPFORGE_CHECK(grid.size(0) < 0 || x.size(0) < 0 || grid.size(0) == x.size(0), "X and grid must share the batch size");
  Shape out = {x.size(0), x.size(1)};
  for (int d = 1; d < grid.ndim() - 1; ++d) out.push_back(grid.size(d));
  ctx.set_output(0, x.dtype(), out);
}

/// Folds v into [lo, hi] by reflecting at the borders (onnx's _gs_reflect).
double reflect(double v, double lo, double hi) {
  const double range = hi - lo;
  if (v < lo) {
    const double dx = lo - v;
    const int64_t n = int64_t(dx / range);
    const double r = dx - double(n) * range;
    return n % 2 == 0 ? lo + r : hi - r;
  }
  if (v > hi) {
    const double dx = v - hi;
    const int64_t n = int64_t(dx / range);
    const double r = dx - double(n) * range;
    return n % 2 == 0 ? hi - r : lo + r;
  }
  return v;
}

/// The taps of one spatial dim: input indices (-1 reads zero) and weights.
struct Taps {
  int count = 0;
  int64_t index[4];
  double weight[4];
};

double keys_cubic(double x) {
  constexpr double a = -0.75;
  x = std::abs(x);
  if (x <= 1) return ((a + 2) * x - (a + 3)) * x * x + 1;
  if (x < 2) return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
  return 0;
}

/// Index i of a dim of `len` after padding: -1 (zero) outside for zeros, clamped or reflected otherwise.
int64_t padded_index(int64_t i, int64_t len, const Options& o, double lo, double hi) {
  if (i >= 0 && i < len) return i;
  if (o.padding == Padding::Zeros) return -1;
  if (o.padding == Padding::Border) return std::min(len - 1, std::max<int64_t>(0, i));
  return std::min(len - 1, std::max<int64_t>(0, int64_t(reflect(double(i), lo, hi))));
}

Taps dim_taps(float normalized, int64_t len, const Options& o) {
  // The unnormalised coordinate in float, as the reference computes it.
  float x = o.align_corners ? (normalized + 1) / 2.0f * float(len - 1) : ((normalized + 1) * float(len) - 1) / 2.0f;
  const double lo = o.align_corners ? 0.0 : -0.5, hi = o.align_corners ? double(len - 1) : double(len) - 0.5;
  if (o.mode == Mode::Nearest) x = std::nearbyint(x);
  double v = x;
  if (v < lo || v > hi) {
    if (o.padding == Padding::Border) v = std::min(double(len - 1), std::max(0.0, v));
    else if (o.padding == Padding::Reflection) v = reflect(v, lo, hi);
  }
  Taps t;
  if (o.mode == Mode::Nearest) {
    t.count = 1;
    t.index[0] = padded_index(int64_t(v), len, o, lo, hi);
    t.weight[0] = 1;
    return t;
  }
  const double f = std::floor(v), r = v - f;
  const int64_t base = int64_t(f);
  t.count = o.mode == Mode::Linear ? 2 : 4;
  for (int k = 0; k < t.count; ++k) {
    const int64_t i = o.mode == Mode::Linear ? base + k : base - 1 + k;
    t.index[k] = padded_index(i, len, o, lo, hi);
    t.weight[k] = o.mode == Mode::Linear ? (k == 0 ? 1 - r : r) : keys_cubic(r + 1 - k);
  }
  return t;
}

/// Y[n, :, point] = sum over the tap combinations of the weight product times X at those indices.
template <class C>
void sample_point(const C* x, C* y, int64_t channels, int64_t plane, int64_t out_plane, const std::vector<Taps>& taps,
                  const Shape& in_strides) {
  const size_t dims = taps.size();
  int combos = 1;
  for (const Taps& t : taps) combos *= t.count;
  for (int64_t c = 0; c < channels; ++c) y[c * out_plane] = C(0);
  for (int k = 0; k < combos; ++k) {
    double w = 1;
    int64_t off = 0;
    bool zero = false;
    for (size_t d = 0, rest = size_t(k); d < dims; ++d) {
      const int tap = int(rest % size_t(taps[d].count));
      rest /= size_t(taps[d].count);
      w *= taps[d].weight[tap];
      zero = zero || taps[d].index[tap] < 0;
      off += taps[d].index[tap] * in_strides[d];
    }
    if (zero || w == 0) continue;
    for (int64_t c = 0; c < channels; ++c) y[c * out_plane] += C(w) * x[c * plane + off];
  }
}

void compute(KernelContext& ctx) {
  const Options o = read_options(ctx);
  Tensor x = ctx.input(0), grid = ctx.input(1), y = ctx.output(0);
  const size_t dims = size_t(x.ndim() - 2);
  const Shape in = x.sizes();
  Shape in_strides(dims, 1);
  for (size_t d = dims - 1; d > 0; --d) in_strides[d - 1] = in_strides[d] * in[d + 2];
  const int64_t batch = in[0], channels = in[1], plane = dims ? in_strides[0] * in[2] : 1;
  const int64_t points = batch ? grid.numel() / int64_t(dims) / batch : 0;
  const std::vector<float> g = read_floats<float>(grid, "grid");
  dispatch_compute(x, "X", [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<C> keep_x, keep_y;
    const C* src = floats_of<C>(x, keep_x, "X");
    const bool direct = y.dtype() == int32_t(opforge::dtype_of<C>::value);
    if (!direct) keep_y.resize(size_t(y.numel()));
    C* dst = direct ? y.data<C>() : keep_y.data();
    ctx.parallel_for(batch * points, reduction::grain_for(channels * 8), [&](int64_t b, int64_t e) {
      std::vector<Taps> taps(dims);
      for (int64_t u = b; u < e; ++u) {
        const int64_t n = u / points, p = u % points;
        const float* coords = g.data() + u * int64_t(dims);
        for (size_t d = 0; d < dims; ++d) taps[d] = dim_taps(coords[dims - 1 - d], in[d + 2], o);  // grid is (x, y, ...)
        sample_point(src + n * channels * plane, dst + n * channels * points + p, channels, plane, points, taps,
                     in_strides);
      }
    });
    if (!direct) write_floats(keep_y.data(), y);
  });
}

/// AffineGrid: size is (N, C, H, W) or (N, C, D, H, W); output (N, [D,] H, W, 2 or 3).
void affine_infer(InferContext& ctx) {
  Tensor theta = ctx.input(0);
  OPFORGE_CHECK(theta.ndim() == 3, "input 'theta' must be (N, 2, 3) or (N, 3, 4), got rank ", theta.ndim());
  const std::vector<int64_t> size = data_movement::input_ints(ctx, 1, "AffineGrid", "size");
  OPFORGE_CHECK(size.size() == 4 || size.size() == 5, "input 'size' must hold 4 or 5 values, got ", size.size());
  const int64_t k = int64_t(size.size()) - 2;
  OPFORGE_CHECK((theta.size(1) < 0 || theta.size(1) == k) && (theta.size(2) < 0 || theta.size(2) == k + 1),
                "input 'theta' must be (N, ", k, ", ", k + 1, ") for a ", k, "-D size");
  Shape out = {size[0]};
  out.insert(out.end(), size.begin() + 2, size.end());
  out.push_back(k);
  ctx.set_output(0, theta.dtype(), out);
}

/// The normalised coordinate of index i of a dim of `len`.
double base_coordinate(int64_t i, int64_t len, bool align) {
  if (align) return len == 1 ? -1.0 : -1.0 + 2.0 * double(i) / double(len - 1);
  return -1.0 + (2.0 * double(i) + 1) / double(len);
}

void affine_compute(KernelContext& ctx) {
  Tensor theta = ctx.input(0), y = ctx.output(0);
  const std::vector<int64_t> size = read_ints(ctx.input(1));
  const bool align = ctx.attr<int64_t>("align_corners") != 0;
  const int64_t k = int64_t(size.size()) - 2, batch = size[0];
  OPFORGE_CHECK(theta.size(0) == batch, "theta has ", theta.size(0), " matrices for a batch of ", batch);
  Shape spatial(size.begin() + 2, size.end());
  const int64_t points = numel(spatial);
  const std::vector<double> t = read_floats<double>(theta, "theta");
  std::vector<double> out(size_t(batch * points * k));
  for (int64_t n = 0; n < batch; ++n)
    for (int64_t p = 0; p < points; ++p) {
      double base[4] = {0, 0, 0, 1};  // (x, y[, z], 1): x runs along the last dim
      for (int64_t d = k - 1, rest = p; d >= 0; --d) {
        base[k - 1 - d] = base_coordinate(rest % spatial[size_t(d)], spatial[size_t(d)], align);
        rest /= spatial[size_t(d)];
      }
      base[k] = 1;
      for (int64_t r = 0; r < k; ++r) {
        double v = 0;
        for (int64_t c = 0; c <= k; ++c) v += t[size_t((n * k + r) * (k + 1) + c)] * base[c];
        out[size_t((n * points + p) * k + r)] = v;
      }
    }
  write_floats(out.data(), y);
}

}  // namespace

#define GRID_FLOATS {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}

OPFORGE_OP(GridSample)
    .since(16)
    .input("X", GRID_FLOATS)
    .input("grid", GRID_FLOATS)
    .output("Y")
    .attr("mode", "bilinear")
    .attr("padding_mode", "zeros")
    .attr("align_corners", int64_t(0))
    .infer(infer)
    .compute(compute);
OPFORGE_OP(GridSample)
    .since(20)
    .input("X", GRID_FLOATS)
    .input("grid", GRID_FLOATS)
    .output("Y")
    .attr("mode", "linear")
    .attr("padding_mode", "zeros")
    .attr("align_corners", int64_t(0))
    .infer(infer)
    .compute(compute);
OPFORGE_OP(AffineGrid)
    .since(20)
    .input("theta", GRID_FLOATS)
    .input("size", {opforge::i64})
    .output("grid")
    .attr("align_corners", int64_t(0))
    .infer(affine_infer)
    .compute(affine_compute);
