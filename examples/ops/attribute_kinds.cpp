// Every attribute kind, read back into one float64 summary so tests can check the values that
// crossed the C ABI: [f, i, len(s), sum(ints), sum(floats), len(strings), sum(tensor),
// count(tensors), len(graph bytes), has(optional)].
#include <opforge/op.h>

#include <string>
#include <vector>

namespace {

double tensor_sum(const opforge::Tensor& t) {
  double s = 0;
  opforge::dispatch<float, double, int32_t, int64_t>(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    for (int64_t i = 0; i < t.numel(); ++i) s += double(t.data<T>()[i]);
  });
  return s;
}

void infer(opforge::InferContext& ctx) { ctx.set_output(0, opforge::f64, {10}); }

void compute(opforge::KernelContext& ctx) {
  double* out = ctx.output(0).data<double>();
  out[0] = ctx.attr<float>("f");
  out[1] = double(ctx.attr<int64_t>("i"));
  out[2] = double(ctx.attr<std::string>("s").size());
  out[3] = 0;
  for (int64_t v : ctx.attr<std::vector<int64_t>>("ints")) out[3] += double(v);
  out[4] = 0;
  for (float v : ctx.attr<std::vector<float>>("floats")) out[4] += v;
  out[5] = double(ctx.attr<std::vector<std::string>>("strings").size());
  out[6] = tensor_sum(ctx.attr<opforge::Tensor>("t"));
  out[7] = double(ctx.has_attr("tensors") ? ctx.attr<std::vector<opforge::Tensor>>("tensors").size() : 0);
  out[8] = double(ctx.has_attr("graph") ? ctx.attr<std::string>("graph").size() : 0);
  out[9] = ctx.has_attr("maybe") ? 1.0 : 0.0;
}

}  // namespace

OPFORGE_OP(attribute_kinds)
    .domain("com.example")
    .doc("Summarises its attributes; shows how to declare and read every kind.")
    .optional_input("unused")
    .output("summary", {opforge::f64})
    .attr("f", 0.5f)
    .attr("i", int64_t(3))
    .attr("s", "hello")
    .attr("ints", {int64_t(1), int64_t(2), int64_t(3)})
    .attr("floats", {0.25f, 0.5f})
    .attr("strings", {"a", "b"})
    .required_attr("t", opforge::AttrType::Tensor, "a required tensor")
    .optional_attr("tensors", opforge::AttrType::Tensors)
    .optional_attr("graph", opforge::AttrType::Graph, "serialized GraphProto bytes")
    .optional_attr("maybe", opforge::AttrType::Int)
    .infer(infer)
    .compute(compute);
