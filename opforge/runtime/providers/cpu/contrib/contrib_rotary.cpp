// contrib_rotary.cpp: com.microsoft's RotaryEmbedding: each head's first rotary_dim values rotated
// by the cos/sin of its position (halves paired, or neighbours when interleaved), the rest kept.
#include <vector>

#include "common/common.h"

namespace {

using opforge::InferContext;
using opforge::KernelContext;
using opforge::Tensor;

/// The layout: (B, S, heads * D) or (B, heads, S, D), and the rotated span.
struct Rotary {
  int64_t batch, seq, heads, head_size, half;
  bool bnsh;  ///< 4-D input: heads before the sequence
};

template <class Ctx> Rotary rotary(const Ctx& ctx) {
  const Tensor x = ctx.input(0), pos = ctx.input(1), cos = ctx.input(2), sin = ctx.input(3);
  OPFORGE_CHECK(x.ndim() == 3 || x.ndim() == 4, "input must be (B, S, hidden) or (B, heads, S, head), got rank ",
                x.ndim());
  OPFORGE_CHECK(cos.ndim() == 2 && sin.ndim() == 2 && cos.size(0) == sin.size(0) && cos.size(1) == sin.size(1),
                "cos_cache and sin_cache must be 2-D of one shape (max positions, rotary_dim / 2)");
  Rotary r;
  r.bnsh = x.ndim() == 4;
  r.batch = x.size(0), r.seq = x.size(r.bnsh ? 2 : 1);
  const int64_t attr_heads = ctx.template attr<int64_t>("num_heads"), attr_dim = ctx.template attr<int64_t>("rotary_embedding_dim");
  if (r.bnsh) {
    r.heads = x.size(1), r.head_size = x.size(3);
  } else {
    r.head_size = attr_heads > 0 ? x.size(2) / attr_heads : cos.size(1) * 2;
    OPFORGE_CHECK(r.head_size > 0 && x.size(2) % r.head_size == 0, "the hidden size ", x.size(2),
                  " is not a whole number of heads of ", r.head_size);
    r.heads = x.size(2) / r.head_size;
  }
  const int64_t dim = attr_dim > 0 ? attr_dim : cos.size(1) * 2;
  OPFORGE_CHECK(dim % 2 == 0 && dim <= r.head_size && cos.size(1) * 2 >= dim, "the rotary dim ", dim,
                " must be even, fit a head of ", r.head_size, " and the caches' ", cos.size(1), " columns");
  r.half = dim / 2;
  OPFORGE_CHECK(pos.numel() == 1 || pos.numel() == r.batch * r.seq || pos.numel() < 0,
                "position_ids must hold one offset or (batch, sequence) positions");
  return r;
}

void rotary_infer(InferContext& ctx) {
  rotary(ctx);
  ctx.set_output_like(0, 0);
}

void rotary_compute(KernelContext& ctx) {
  const Rotary r = rotary(ctx);
  const Tensor pos_t = ctx.input(1);
  const float *x = ctx.input(0).data<float>(), *cos = ctx.input(2).data<float>(), *sin = ctx.input(3).data<float>();
  const int64_t* pos = pos_t.data<int64_t>();
  const int64_t cols = ctx.input(2).size(1), max_pos = ctx.input(2).size(0);
  const bool interleaved = ctx.attr<int64_t>("interleaved") != 0;
  float* y = ctx.output(0).data<float>();
  ctx.parallel_for(r.batch * r.seq * r.heads, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t b = t / (r.seq * r.heads), s = (t / r.heads) % r.seq, h = t % r.heads;
      const int64_t p = pos_t.numel() == 1 ? pos[0] + s : pos[b * r.seq + s];
      OPFORGE_CHECK(p >= 0 && p < max_pos, "position ", p, " is outside the caches' ", max_pos, " rows");
      const int64_t at = r.bnsh ? ((b * r.heads + h) * r.seq + s) * r.head_size
                                : ((b * r.seq + s) * r.heads + h) * r.head_size;
      const float *xi = x + at, *c = cos + p * cols, *sn = sin + p * cols;
      float* yo = y + at;
      for (int64_t i = 0; i < r.half; ++i) {
        const int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + r.half;
        const float x0 = xi[i0], x1 = xi[i1];
        yo[i0] = x0 * c[i] - x1 * sn[i];
        yo[i1] = x1 * c[i] + x0 * sn[i];
      }
      for (int64_t i = 2 * r.half; i < r.head_size; ++i) yo[i] = xi[i];
    }
  });
}

}  // namespace

OPFORGE_OP(RotaryEmbedding)
    .domain("com.microsoft")
    .since(1)
    .input("input", {opforge::f32})
    .input("position_ids", {opforge::i64})
    .input("cos_cache", {opforge::f32})
    .input("sin_cache", {opforge::f32})
    .output("output")
    .attr("interleaved", int64_t(0))
    .attr("is_packed_batching", int64_t(0))
    .attr("num_heads", int64_t(0))
    .attr("rotary_embedding_dim", int64_t(0))
    .attr("scale", 1.0f)
    .infer(rotary_infer)
    .compute(rotary_compute);
