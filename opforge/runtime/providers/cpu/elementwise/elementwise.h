// elementwise.h: shared machinery of the elementwise kernels: broadcast plans, parallel maps, infer.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "common/common.h"

namespace opforge_cpu::ew {

/// Elements per parallel chunk for cheap elementwise work (a few ns each) and for costly work.
constexpr int64_t kCheapGrain = int64_t(1) << 15;
constexpr int64_t kCostlyGrain = int64_t(1) << 13;

/// Dtypes of the arithmetic kernels (everything but float16, bfloat16 and bool).
#define OPFORGE_EW_REAL_TYPES \
  float, double, int32_t, int64_t, int8_t, int16_t, uint8_t, uint16_t, uint32_t, uint64_t
#define OPFORGE_EW_FLOAT_DTYPES {opforge::f32, opforge::f64}
/// The dtypes ONNX binary arithmetic took up to opset 13, and those it took from opset 14.
#define OPFORGE_EW_ARITH7_DTYPES {opforge::f32, opforge::f64, opforge::i32, opforge::i64, \
                                  opforge::u32, opforge::u64}
#define OPFORGE_EW_ALLNUM_DTYPES {opforge::f32, opforge::f64, opforge::i32, opforge::i64, \
                                  opforge::i8, opforge::i16, opforge::u8, opforge::u16,   \
                                  opforge::u32, opforge::u64}
/// The same lists with float16 and bfloat16 (computed in float, rounded once per result).
#define OPFORGE_EW_FLOAT_HALF_DTYPES {opforge::f32, opforge::f64, opforge::f16, opforge::bf16}
#define OPFORGE_EW_ARITH7_HALF_DTYPES {opforge::f32, opforge::f64, opforge::i32, opforge::i64, \
                                       opforge::u32, opforge::u64, opforge::f16, opforge::bf16}
#define OPFORGE_EW_ALLNUM_HALF_DTYPES {opforge::f32, opforge::f64, opforge::i32, opforge::i64, \
                                       opforge::i8, opforge::i16, opforge::u8, opforge::u16,   \
                                       opforge::u32, opforge::u64, opforge::f16, opforge::bf16}

/// Numpy broadcast of shapes that may hold unknown (-1) dims, as graph shape inference has them.
inline Shape broadcast_known(const Shape& a, const Shape& b) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (da == db || db == 1 || (db < 0 && da != 1)) {
      out[i] = da;
    } else if (da == 1 || da < 0) {
      out[i] = db;
    } else {
      broadcast_shapes(a, b);  // throws, naming both shapes
    }
  }
  return out;
}

/// The broadcast shape of every defined input from `first` on.
inline Shape broadcast_inputs(const InferContext& ctx, int first) {
  Shape out;
  for (int i = first; i < ctx.num_inputs(); ++i)
    if (ctx.has_input(i)) out = broadcast_known(out, ctx.input(i).sizes());
  return out;
}

/// Checks that every input from `first` on has input `first`'s dtype.
inline void check_same_dtype(const InferContext& ctx, int first) {
  const int32_t dt = ctx.input(first).dtype();
  for (int i = first + 1; i < ctx.num_inputs(); ++i)
    OPFORGE_CHECK(!ctx.has_input(i) || ctx.input(i).dtype() == dt, "input ", i, " has dtype ",
                  opforge::dtype_name(ctx.input(i).dtype()), " but input ", first, " has ",
                  opforge::dtype_name(dt));
}

/// Whether two tensors have the same dims (compared in place, nothing allocated).
inline bool same_sizes(const Tensor& a, const Tensor& b) {
  if (a.ndim() != b.ndim()) return false;
  for (int d = 0; d < a.ndim(); ++d)
    if (a.size(d) != b.size(d) || a.size(d) < 0) return false;
  return true;
}

/// Infer of ops whose inputs share a dtype and broadcast into an output of that dtype.
inline void infer_broadcast_same(InferContext& ctx) {
  OPFORGE_CHECK(ctx.num_inputs() >= 1, "needs at least one input");
  check_same_dtype(ctx, 0);
  bool same = true;
  for (int i = 1; i < ctx.num_inputs() && same; ++i) same = ctx.has_input(i) && same_sizes(ctx.input(i), ctx.input(0));
  if (same) return ctx.set_output_like(0, 0);
  ctx.set_output(0, ctx.input(0).dtype(), broadcast_inputs(ctx, 0));
}

/// Infer of comparisons: inputs share a dtype, the broadcast output is bool.
inline void infer_broadcast_bool(InferContext& ctx) {
  check_same_dtype(ctx, 0);
  ctx.set_output(0, opforge::boolean, broadcast_inputs(ctx, 0));
}

/// A broadcast of N inputs onto an output shape with dims merged where every input allows it,
/// so the innermost dim is as long as possible and each input's innermost stride is 0 or 1.
template <size_t N>
class BroadcastPlan {
 public:
  BroadcastPlan(const Shape& out, const Shape (&ins)[N]) : total_(numel(out)) {
    Shape full[N];
    for (size_t k = 0; k < N; ++k) full[k] = broadcast_strides(ins[k], out);
    for (size_t d = 0; d < out.size(); ++d) {
      if (out[d] == 1) continue;
      bool merge = !shape_.empty();
      for (size_t k = 0; k < N && merge; ++k) merge = strides_[k].back() == full[k][d] * out[d];
      if (merge) {
        shape_.back() *= out[d];
        for (size_t k = 0; k < N; ++k) strides_[k].back() = full[k][d];
      } else {
        shape_.push_back(out[d]);
        for (size_t k = 0; k < N; ++k) strides_[k].push_back(full[k][d]);
      }
    }
    if (shape_.empty()) {
      shape_.push_back(1);
      for (size_t k = 0; k < N; ++k) strides_[k].push_back(0);
    }
  }

  /// Input k's stride along the innermost (merged) dim: 0 or 1.
  int64_t inner_stride(size_t k) const { return strides_[k].back(); }

  /// What run calls for each contiguous run of the output: offsets[k] is input k's element
  /// offset at the run's start; `arg` carries the kernel's buffers. A plain function pointer
  /// keeps the walk and the parallel loop compiled once rather than once per op and dtype.
  using RunFn = void (*)(const void* arg, const int64_t* offsets, int64_t out_offset, int64_t n);

  /// Calls fn over every contiguous run of the output, in parallel chunks of ~grain elements.
  void run(const KernelContext& ctx, int64_t grain, RunFn fn, const void* arg) const {
    ctx.parallel_for(total_, grain, [&](int64_t begin, int64_t end) { walk(begin, end, fn, arg); });
  }

 private:
  void walk(int64_t begin, int64_t end, RunFn fn, const void* arg) const {
    const size_t rank = shape_.size();
    const int64_t n = shape_[rank - 1];
    int64_t idx[OPF_MAX_DIMS] = {}, row[N] = {}, off[N];
    int64_t rest = begin / n, col = begin % n;
    for (size_t d = rank - 1; d-- > 0;) {
      idx[d] = rest % shape_[d];
      rest /= shape_[d];
      for (size_t k = 0; k < N; ++k) row[k] += idx[d] * strides_[k][d];
    }
    for (int64_t pos = begin; pos < end; col = 0) {
      const int64_t len = std::min(n - col, end - pos);
      for (size_t k = 0; k < N; ++k) off[k] = row[k] + col * strides_[k][rank - 1];
      fn(arg, off, pos, len);
      pos += len;
      for (size_t d = rank - 1; d-- > 0;) {  // step to the next row
        if (++idx[d] < shape_[d]) {
          for (size_t k = 0; k < N; ++k) row[k] += strides_[k][d];
          break;
        }
        for (size_t k = 0; k < N; ++k) row[k] -= strides_[k][d] * (shape_[d] - 1);
        idx[d] = 0;
      }
    }
  }

  int64_t total_;
  Shape shape_;
  Shape strides_[N];
};

/// o[i] = f(a[i*sa], b[i*sb]) for i < n, strides 0 or 1, with a plain loop for each pattern.
template <class TA, class TB, class TO, class F>
inline void binary_run(const TA* a, int64_t sa, const TB* b, int64_t sb, TO* o, int64_t n, F f) {
  if (sa && sb) {
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
  } else if (sa) {
    const TB y = *b;
    for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], y);
  } else if (sb) {
    const TA x = *a;
    for (int64_t i = 0; i < n; ++i) o[i] = f(x, b[i]);
  } else {
    const TO v = f(*a, *b);
    for (int64_t i = 0; i < n; ++i) o[i] = v;
  }
}

/// The buffers and function of one binary_map call, handed to its runs.
template <class TA, class TB, class TO, class F> struct BinaryArgs {
  const TA* a;
  const TB* b;
  TO* out;
  int64_t ia, ib;
  F f;
};

/// out = f(a, b) with numpy broadcasting of raw buffers of the given shapes.
template <class TA, class TB, class TO, class F>
void binary_map(const KernelContext& ctx, const TA* a, const Shape& sa, const TB* b, const Shape& sb,
                TO* out, const Shape& so, F f, int64_t grain = kCheapGrain) {
  using Args = BinaryArgs<TA, TB, TO, F>;
  const Shape shapes[2] = {sa, sb};
  const BroadcastPlan<2> plan(so, shapes);
  const Args args{a, b, out, plan.inner_stride(0), plan.inner_stride(1), f};
  plan.run(ctx, grain, [](const void* p, const int64_t* off, int64_t o, int64_t n) {
    const Args& s = *static_cast<const Args*>(p);
    binary_run(s.a + off[0], s.ia, s.b + off[1], s.ib, s.out + o, n, s.f);
  }, &args);
}

/// Output 0 = f(input 0, input 1), broadcast, with element types TA, TB -> TO (which may be
/// the unsigned stand-ins that dispatch_bits picks).
template <class TA, class TB, class TO, class F>
void binary_map(const KernelContext& ctx, F f, int64_t grain = kCheapGrain) {
  const Tensor a = ctx.input(0), b = ctx.input(1), y = ctx.output(0);
  // Operands of the output's shape, or single values: one flat loop, no broadcast plan (and
  // nothing allocated, which a chain of small Adds would feel).
  const int64_t n = y.numel();
  const bool a_flat = a.numel() == n && same_sizes(a, y), b_flat = b.numel() == n && same_sizes(b, y);
  if ((a_flat || a.numel() == 1) && (b_flat || b.numel() == 1)) {
    const TA* pa = static_cast<const TA*>(a.raw());
    const TB* pb = static_cast<const TB*>(b.raw());
    TO* po = static_cast<TO*>(y.raw());
    ctx.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
      binary_run(a_flat ? pa + begin : pa, a_flat, b_flat ? pb + begin : pb, b_flat, po + begin, end - begin, f);
    });
    return;
  }
  binary_map(ctx, static_cast<const TA*>(a.raw()), a.sizes(), static_cast<const TB*>(b.raw()),
             b.sizes(), static_cast<TO*>(y.raw()), y.sizes(), f, grain);
}

/// out[i] = f(in[i]) over n elements, in parallel; in and out may be the same buffer.
template <class TI, class TO, class F>
void unary_map(const KernelContext& ctx, const TI* in, TO* out, int64_t n, F f,
               int64_t grain = kCheapGrain) {
  ctx.parallel_for(n, grain, [&](int64_t begin, int64_t end) {
    const F fn = f;  // a private copy: stores to out cannot alias it, so the loop vectorises
    for (int64_t i = begin; i < end; ++i) out[i] = fn(in[i]);
  });
}

/// Output 0 = f(input 0) elementwise, with element types TI -> TO.
template <class TI, class TO, class F>
void unary_map(const KernelContext& ctx, F f, int64_t grain = kCheapGrain) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  unary_map(ctx, x.data<TI>(), y.data<TO>(), x.numel(), f, grain);
}

/// Copies nbytes in parallel chunks; a no-op when source and destination are one buffer.
inline void parallel_copy(const KernelContext& ctx, const void* src, void* dst, int64_t nbytes) {
  if (src == dst || nbytes <= 0) return;
  const char* s = static_cast<const char*>(src);
  char* d = static_cast<char*>(dst);
  ctx.parallel_for(nbytes, int64_t(1) << 20, [&](int64_t begin, int64_t end) {
    std::memcpy(d + begin, s + begin, size_t(end - begin));
  });
}

/// Calls f(type_tag<U>) with U the unsigned type as wide as `dtype`'s elements, for ops that
/// only move elements.
template <class F> void dispatch_by_size(int32_t dtype, F&& f) {
  switch (opforge::dtype_size(dtype)) {
    case 1: f(opforge::type_tag<uint8_t>{}); break;
    case 2: f(opforge::type_tag<uint16_t>{}); break;
    case 4: f(opforge::type_tag<uint32_t>{}); break;
    case 8: f(opforge::type_tag<uint64_t>{}); break;
    default: throw opforge::Error(opforge::str("unsupported dtype ", opforge::dtype_name(dtype)));
  }
}

/// Calls f(type_tag<T>) with T float or double for those dtypes and the unsigned type of the
/// same width for integers and bool; returns false for other dtypes. For ops whose result
/// bits do not depend on signedness (+, -, *, ==): half the loops to compile, and overflow
/// wraps as models expect instead of being undefined.
template <class F> bool dispatch_bits(int32_t dtype, F&& f) {
  if (dtype == OPF_FLOAT32) f(opforge::type_tag<float>{});
  else if (dtype == OPF_FLOAT64) f(opforge::type_tag<double>{});
  else if (dtype == OPF_FLOAT16 || dtype == OPF_BFLOAT16 || opforge::dtype_size(dtype) == 0) return false;
  else dispatch_by_size(dtype, f);
  return true;
}

/// Throws naming the op's input dtype when a dispatch found no matching type.
inline void require_dispatched(bool found, int32_t dtype) {
  if (!found) throw opforge::Error(opforge::str("unsupported dtype ", opforge::dtype_name(dtype)));
}

}  // namespace opforge_cpu::ew
