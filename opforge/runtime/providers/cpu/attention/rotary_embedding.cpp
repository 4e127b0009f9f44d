// rotary_embedding.cpp: RotaryEmbedding (opset 23): rotates pairs of each head's first
// rotary_embedding_dim features by per-position angles given as cos/sin caches, either halves
// (x[k], x[k + d/2]) or interleaved neighbours (x[2k], x[2k + 1]).
#include "common/float_io.h"
#include "reduce/reduce.h"

namespace {

using namespace opforge_cpu;
using opforge_cpu::reduction::grain_for;

/// Sizes read from the input: 3-D (B, S, H * D) or 4-D (B, H, S, D).
struct Geometry {
  bool three_d = false;
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0, rotary = 0;
  /// Element offset of (b, s, h, 0).
  int64_t at(int64_t b, int64_t s, int64_t h) const {
    return three_d ? ((b * seq + s) * heads + h) * head_dim : ((b * heads + h) * seq + s) * head_dim;
  }
};

template <class Ctx> Geometry geometry(const Ctx& ctx) {
  Tensor x = ctx.input(0);
  OPFORGE_CHECK(x.ndim() == 3 || x.ndim() == 4, "input X must be 3-D (batch, sequence, hidden) or 4-D (batch, "
                "heads, sequence, head_size), got rank ", x.ndim());
  Geometry g;
  g.three_d = x.ndim() == 3;
  g.batch = x.size(0);
  const int64_t num_heads = ctx.template attr<int64_t>("num_heads");
  if (g.three_d) {
    OPFORGE_CHECK(num_heads > 0, "a 3-D input X needs a positive attribute 'num_heads', got ", num_heads);
    OPFORGE_CHECK(x.size(2) % num_heads == 0, "X's hidden size ", x.size(2), " is not a multiple of 'num_heads' ",
                  num_heads);
    g.seq = x.size(1), g.heads = num_heads, g.head_dim = x.size(2) / num_heads;
  } else {
    g.heads = x.size(1), g.seq = x.size(2), g.head_dim = x.size(3);
  }
  const int64_t rd = ctx.template attr<int64_t>("rotary_embedding_dim");
  g.rotary = rd == 0 ? g.head_dim : rd;
  OPFORGE_CHECK(g.rotary > 0 && g.rotary % 2 == 0 && (g.head_dim < 0 || g.rotary <= g.head_dim),
                "attribute 'rotary_embedding_dim' (", g.rotary, ") must be even and at most the head size ", g.head_dim);
  return g;
}

/// cos_cache and sin_cache: (max_position, rotary / 2) with position_ids, else (B, S, rotary / 2).
template <class Ctx> void check_caches(const Ctx& ctx, const Geometry& g) {
  Tensor cos = ctx.input(1), sin = ctx.input(2);
  OPFORGE_CHECK(cos.dtype() == ctx.input(0).dtype() && sin.dtype() == cos.dtype(),
                "cos_cache and sin_cache must have X's dtype");
  const int rank = ctx.has_input(3) ? 2 : 3;
  OPFORGE_CHECK(cos.ndim() == rank && sin.ndim() == rank, "cos_cache and sin_cache must be ", rank,
                "-D ", rank == 2 ? "(max_position, rotary_dim / 2) with position_ids" : "(batch, sequence, "
                "rotary_dim / 2) without position_ids", ", got ranks ", cos.ndim(), " and ", sin.ndim());
  for (int d = 0; d < rank; ++d)
    OPFORGE_CHECK(cos.size(d) < 0 || sin.size(d) < 0 || cos.size(d) == sin.size(d),
                  "cos_cache and sin_cache shapes differ");
  OPFORGE_CHECK(cos.size(-1) < 0 || cos.size(-1) == g.rotary / 2, "cos_cache's last dim (", cos.size(-1),
                ") must be rotary_embedding_dim / 2 = ", g.rotary / 2);
  if (rank == 3)
    OPFORGE_CHECK((cos.size(0) < 0 || cos.size(0) == g.batch) && (cos.size(1) < 0 || cos.size(1) == g.seq),
                  "cos_cache must be (batch ", g.batch, ", sequence ", g.seq, ", rotary_dim / 2)");
  else
    OPFORGE_CHECK(ctx.input(3).ndim() == 2, "position_ids must be 2-D (batch, sequence)");
}

void infer(InferContext& ctx) {
  check_caches(ctx, geometry(ctx));
  ctx.set_output_like(0, 0);
}

/// Row of the caches for (b, s): the position id's row, or (b, s)'s own.
int64_t cache_row(const std::vector<int64_t>& ids, const Geometry& g, int64_t b, int64_t s, int64_t rows) {
  if (ids.empty()) return b * g.seq + s;
  const int64_t p = ids[size_t(b * g.seq + s)];
  OPFORGE_CHECK(p >= 0 && p < rows, "position_ids value ", p, " is outside the caches' ", rows, " positions");
  return p;
}

template <class S> void rotate(KernelContext& ctx, const Geometry& g) {
  using C = std::conditional_t<std::is_same_v<S, double>, double, float>;
  const S* x = static_cast<const S*>(ctx.input(0).raw());
  const S* cos = static_cast<const S*>(ctx.input(1).raw());
  const S* sin = static_cast<const S*>(ctx.input(2).raw());
  S* y = static_cast<S*>(ctx.output(0).raw());
  std::vector<int64_t> ids;
  if (ctx.has_input(3)) {
    ids = read_ints(ctx.input(3));
    OPFORGE_CHECK(int64_t(ids.size()) == g.batch * g.seq, "position_ids must be (batch ", g.batch, ", sequence ",
                  g.seq, ")");
  }
  const int64_t half = g.rotary / 2, rows = ctx.input(1).size(0);
  const bool interleaved = ctx.attr<int64_t>("interleaved") != 0;
  ctx.parallel_for(g.batch * g.seq, grain_for(g.heads * g.head_dim), [&](int64_t begin, int64_t end) {
    for (int64_t bs = begin; bs < end; ++bs) {
      const int64_t b = bs / g.seq, s = bs % g.seq, row = cache_row(ids, g, b, s, rows) * half;
      for (int64_t h = 0; h < g.heads; ++h) {
        const S* xi = x + g.at(b, s, h);
        S* yo = y + g.at(b, s, h);
        for (int64_t k = 0; k < half; ++k) {
          const int64_t i1 = interleaved ? 2 * k : k, i2 = interleaved ? 2 * k + 1 : k + half;
          const C c = load_as<C>(cos[row + k]), sn = load_as<C>(sin[row + k]);
          const C x1 = load_as<C>(xi[i1]), x2 = load_as<C>(xi[i2]);
          yo[i1] = store_as<S>(c * x1 - sn * x2);
          yo[i2] = store_as<S>(sn * x1 + c * x2);
        }
        for (int64_t d = g.rotary; d < g.head_dim; ++d) yo[d] = xi[d];
      }
    }
  });
}

void compute(KernelContext& ctx) {
  const Geometry g = geometry(ctx);
  check_caches(ctx, g);
  dispatch_storage(ctx.input(0), "X", [&](auto tag) { rotate<typename decltype(tag)::type>(ctx, g); });
}

}  // namespace

OPFORGE_OP(RotaryEmbedding)
    .since(23)
    .input("X", {opforge::f32, opforge::f16, opforge::bf16})
    .input("cos_cache", {opforge::f32, opforge::f16, opforge::bf16})
    .input("sin_cache", {opforge::f32, opforge::f16, opforge::bf16})
    .optional_input("position_ids", {opforge::i64})
    .output("Y")
    .attr("num_heads", int64_t(0))
    .attr("rotary_embedding_dim", int64_t(0))
    .attr("interleaved", int64_t(0))
    .infer(infer)
    .compute(compute);
