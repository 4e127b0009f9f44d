// conv_fused.cpp: com.microsoft's FusedConv (onnxruntime's contrib op): Y = activation(Conv(X, W)
// + B + Z), the bias, the residual Z and the activation applied as each output tile is stored.
// opforge's fusion passes make it from Conv followed by Add and an activation.
#include <string>
#include <vector>

#include "conv/conv_run.h"

namespace opforge_conv {

Epilogue epilogue_of(const std::string& name, const std::vector<float>& params, bool hard_swish) {
  struct Known {
    const char* name;
    Activation act;
    size_t params;
  };
  static const Known known[] = {{"", Activation::None, 0},          {"Relu", Activation::Relu, 0},
                                {"Tanh", Activation::Tanh, 0},      {"Sigmoid", Activation::Sigmoid, 0},
                                {"LeakyRelu", Activation::LeakyRelu, 1}, {"Clip", Activation::Clip, 2},
                                {"HardSigmoid", Activation::HardSigmoid, 2}};
  if (hard_swish && name == "HardSwish") {
    Epilogue e;
    e.act = Activation::HardSwish;
    e.a = 1.f / 6.f, e.b = 0.5f;
    return e;
  }
  for (const Known& k : known) {
    if (name != k.name) continue;
    OPFORGE_CHECK(params.size() >= k.params, "activation '", name, "' needs ", int64_t(k.params),
                  " activation_params, got ", int64_t(params.size()));
    Epilogue e;
    e.act = k.act;
    if (k.params > 0) e.a = params[0];
    if (k.params > 1) e.b = params[1];
    return e;
  }
  throw opforge::Error(opforge::str("attribute 'activation' must be one of Relu, Tanh, Sigmoid, LeakyRelu, Clip, "
                                    "HardSigmoid", hard_swish ? ", HardSwish" : "", ", got '", name, "'"));
}

namespace {

void fused_conv_infer(InferContext& ctx) {
  epilogue_attrs(ctx);
  const ConvShape s = conv_shape(ctx);
  const std::vector<int64_t> out = conv_output_dims(s);
  if (ctx.has_input(3)) {
    const Tensor z = ctx.input(3);
    OPFORGE_CHECK(z.dtype() == ctx.input(0).dtype(), "input Z has dtype ", opforge::dtype_name(z.dtype()),
                  "; expected that of X");
    bool same = z.ndim() == int(out.size());
    for (int d = 0; same && d < z.ndim(); ++d) same = z.size(d) < 0 || out[size_t(d)] < 0 || z.size(d) == out[size_t(d)];
    OPFORGE_CHECK(same, "input Z must have the output's shape");
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void fused_conv_compute(KernelContext& ctx) {
  const Epilogue e = epilogue_attrs(ctx);
  if (!ctx.has_input(3)) return conv_run(ctx, nullptr, e);
  const Tensor z = ctx.input(3);
  conv_run(ctx, &z, e);
}

}  // namespace
}  // namespace opforge_conv

OPFORGE_OP(FusedConv)
    .domain("com.microsoft")
    .since(1)
    .doc("Conv with the bias, a residual Z and an activation applied in one pass: "
         "Y = activation(Conv(X, W) + B + Z), as onnxruntime's contrib op.")
    .input("X", {opforge::f32, opforge::f64})
    .input("W", {opforge::f32, opforge::f64})
    .optional_input("B", {opforge::f32, opforge::f64})
    .optional_input("Z", {opforge::f32, opforge::f64})
    .output("Y")
    .attr("activation", "", "Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid, or empty for none")
    .optional_attr("activation_params", opforge::AttrType::Floats,
                   "LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha, beta")
    .attr("auto_pad", "NOTSET")
    .optional_attr("dilations", opforge::AttrType::Ints)
    .attr("group", int64_t(1))
    .optional_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .inplace(0, 3)
    .infer(opforge_conv::fused_conv_infer)
    .workspace(opforge_conv::conv_workspace)
    .compute(opforge_conv::fused_conv_compute);
