// Workspace use: softmax over the last axis, keeping each row's max and sum in scratch space
// the host allocates (the runtime's memory planner sizes it with the workspace function).
#include <opforge/op.h>

#include <cmath>

namespace {

int64_t rows_of(const opforge::Tensor& x) {
  if (x.ndim() == 0) return 1;
  return x.size(-1) == 0 ? 0 : x.numel() / x.size(-1);
}

void infer(opforge::InferContext& ctx) {
  const float temperature = ctx.attr<float>("temperature");
  OPFORGE_CHECK(temperature > 0.f, "temperature must be positive, got ", temperature);
  ctx.set_output_like(0, 0);
}

int64_t workspace(opforge::InferContext& ctx) {
  return 2 * rows_of(ctx.input(0)) * int64_t(sizeof(float));
}

void compute(opforge::KernelContext& ctx) {
  opforge::Tensor x = ctx.input(0), y = ctx.output(0);
  const int64_t rows = rows_of(x), cols = x.ndim() == 0 ? 1 : x.size(-1);
  const float temperature = ctx.attr<float>("temperature");
  float* row_max = ctx.workspace<float>();
  float* row_sum = row_max + rows;
  const float* in = x.data<float>();
  float* out = y.data<float>();
  ctx.parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = in + r * cols;
      float* yr = out + r * cols;
      row_max[r] = xr[0];
      for (int64_t c = 1; c < cols; ++c) row_max[r] = std::fmax(row_max[r], xr[c]);
      row_sum[r] = 0.f;
      for (int64_t c = 0; c < cols; ++c) row_sum[r] += yr[c] = std::exp((xr[c] - row_max[r]) / temperature);
      for (int64_t c = 0; c < cols; ++c) yr[c] /= row_sum[r];
    }
  });
}

}  // namespace

OPFORGE_OP(softmax_rows)
    .domain("com.example")
    .doc("Softmax over the last axis, with an optional temperature.")
    .input("X", {opforge::f32})
    .output("Y", {opforge::f32})
    .attr("temperature", 1.0f)
    .infer(infer)
    .workspace(workspace)
    .compute(compute);
