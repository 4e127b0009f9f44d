// tensor_scatter.cpp: TensorScatter (opset 24): writes `update` into a copy of a fixed-size KV
// cache along its sequence axis, from each batch row's write index (linear, or wrapping around
// in circular mode). The output may share the cache's buffer, so a decode step moves only the
// new rows.
#include <cstring>
#include <string>

#include "data_movement.h"

namespace {

using namespace opforge_cpu;
using namespace opforge_cpu::data_movement;

bool parse_circular(const std::string& mode) {
  OPFORGE_CHECK(mode == "linear" || mode == "circular", "attribute 'mode' must be 'linear' or 'circular', got '", mode,
                "'");
  return mode == "circular";
}

/// The sequence axis of the cache, checked against the update's shape; never the batch axis.
template <class Ctx> int64_t sequence_axis(const Ctx& ctx) {
  parse_circular(ctx.template attr<std::string>("mode"));
  Tensor cache = ctx.input(0), update = ctx.input(1);
  OPFORGE_CHECK(cache.ndim() >= 2, "input 'past_cache' must have rank >= 2 (batch, ..., sequence, ...), got rank ",
                cache.ndim());
  const int64_t axis = normalize_axis(ctx.template attr<int64_t>("axis"), cache.ndim());
  OPFORGE_CHECK(axis != 0, "attribute 'axis' names the batch axis; it must name the sequence axis");
  OPFORGE_CHECK(update.ndim() == cache.ndim() && update.dtype() == cache.dtype(), "input 'update' must have the "
                "cache's rank ", cache.ndim(), " and dtype ", opforge::dtype_name(cache.dtype()));
  for (int64_t d = 0; d < cache.ndim(); ++d) {
    const int64_t c = cache.size(d), u = update.size(d);
    if (c < 0 || u < 0) continue;
    OPFORGE_CHECK(d == axis ? u <= c : u == c, "input 'update' dim ", d, " (", u, ") does not fit 'past_cache' dim ",
                  d, " (", c, ")", d == axis ? " along the sequence axis" : "");
  }
  if (ctx.has_input(2)) {
    Tensor w = ctx.input(2);
    OPFORGE_CHECK(w.ndim() == 1 && (w.size(0) < 0 || cache.size(0) < 0 || w.size(0) == cache.size(0)),
                  "input 'write_indices' must be 1-D with one index per batch row (", cache.size(0), ")");
  }
  return axis;
}

void infer(InferContext& ctx) {
  sequence_axis(ctx);
  ctx.set_output_like(0, 0);
}

void compute(KernelContext& ctx) {
  const int64_t axis = sequence_axis(ctx);
  const bool circular = parse_circular(ctx.attr<std::string>("mode"));
  Tensor cache = ctx.input(0), update = ctx.input(1), out = ctx.output(0);
  const Shape shape = cache.sizes();
  const int64_t es = elem_size(cache), capacity = shape[size_t(axis)], steps = update.size(axis);
  const int64_t rows = dims_product(shape, 0, size_t(axis)), per_batch = rows / std::max<int64_t>(1, shape[0]);
  const int64_t inner = dims_product(shape, size_t(axis) + 1, shape.size()) * es;
  if (out.raw() != cache.raw() && out.numel() > 0) std::memcpy(out.raw(), cache.raw(), size_t(out.numel() * es));
  if (rows == 0 || steps == 0 || inner == 0) return;
  const std::vector<int64_t> start = ctx.has_input(2) ? read_ints(ctx.input(2)) : std::vector<int64_t>(size_t(shape[0]));
  for (int64_t b = 0; b < shape[0]; ++b) {
    const int64_t first = start[size_t(b)];
    OPFORGE_CHECK(circular || (first >= 0 && first + steps <= capacity), "write index ", first, " of batch row ", b,
                  " puts ", steps, " update rows past the cache's ", capacity, " (mode 'linear')");
  }
  char* dst = static_cast<char*>(out.raw());
  const char* src = static_cast<const char*>(update.raw());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t first = start[size_t(r / per_batch)];
    for (int64_t s = 0; s < steps; ++s) {
      int64_t at = first + s;
      if (circular) at = ((at % capacity) + capacity) % capacity;
      std::memcpy(dst + (r * capacity + at) * inner, src + (r * steps + s) * inner, size_t(inner));
    }
  }
}

}  // namespace

OPFORGE_OP(TensorScatter)
    .since(24)
    .input("past_cache", OPFORGE_ALL_DTYPES)
    .input("update", OPFORGE_ALL_DTYPES)
    .optional_input("write_indices", {opforge::i64})
    .output("present_cache")
    .attr("mode", "linear")
    .attr("axis", int64_t(-2))
    .inplace(0, 0)
    .infer(infer)
    .compute(compute);
