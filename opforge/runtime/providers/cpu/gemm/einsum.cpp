// einsum.cpp: Einsum (opsets 12, 28): any equation, with ellipses, repeated labels (diagonals),
// broadcasting and the implicit output form. Every label gets one loop; each operand's element
// offset follows the labels' strides, so contractions, transposes and diagonals share one loop nest.
#include <algorithm>
#include <map>
#include <string>

#include "common/float_io.h"

namespace {

using namespace opforge_cpu;

/// The equation with ellipses expanded: each operand's and the output's labels as ids, and each
/// label's size. Ellipsis dims become labels 256.. (aligned to the right across operands).
struct Plan {
  std::vector<std::vector<int>> operands;
  std::vector<int> output;
  std::map<int, int64_t> sizes;
};

std::string strip_spaces(const std::string& s) {
  std::string out;
  for (char c : s)
    if (c != ' ') out += c;
  return out;
}

/// Splits "ab...c" into letters with -1 for the ellipsis; throws on anything else.
std::vector<int> parse_term(const std::string& term) {
  std::vector<int> out;
  for (size_t i = 0; i < term.size(); ++i) {
    if (term.compare(i, 3, "...") == 0) {
      for (int v : out) OPFORGE_CHECK(v != -1, "term '", term, "' has two ellipses");
      out.push_back(-1);
      i += 2;
    } else {
      const char c = term[i];
      OPFORGE_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'), "equation has an invalid character '", c, "'");
      out.push_back(int(static_cast<unsigned char>(c)));
    }
  }
  return out;
}

/// Labels with the ellipsis replaced by `count` ellipsis labels (right-aligned among `total`).
std::vector<int> expand(const std::vector<int>& term, int count, int total) {
  std::vector<int> out;
  for (int v : term) {
    if (v != -1) { out.push_back(v); continue; }
    for (int k = 0; k < count; ++k) out.push_back(256 + total - count + k);
  }
  return out;
}

template <class Ctx> Plan make_plan(const Ctx& ctx) {
  const std::string eq = strip_spaces(ctx.template attr<std::string>("equation"));
  const size_t arrow = eq.find("->");
  const std::string lhs = eq.substr(0, arrow);
  std::vector<std::string> terms;
  for (size_t start = 0;;) {
    const size_t comma = lhs.find(',', start);
    terms.push_back(lhs.substr(start, comma == std::string::npos ? std::string::npos : comma - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  OPFORGE_CHECK(int(terms.size()) == ctx.num_inputs(), "equation '", eq, "' has ", terms.size(), " operands, the node ",
                ctx.num_inputs(), " inputs");
  Plan p;
  std::vector<std::vector<int>> parsed;
  int ellipsis = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    parsed.push_back(parse_term(terms[i]));
    const int rank = ctx.input(int(i)).ndim();
    const int letters = int(parsed.back().size()) - (terms[i].find("...") != std::string::npos ? 1 : 0);
    const bool has = letters != int(parsed.back().size());
    OPFORGE_CHECK(has ? rank >= letters : rank == letters, "operand ", i, " has rank ", rank, " but its term '",
                  terms[i], "' names ", letters, " dims");
    if (has) ellipsis = std::max(ellipsis, rank - letters);
  }
  std::map<int, int> counts;
  for (size_t i = 0; i < parsed.size(); ++i) {
    const int rank = ctx.input(int(i)).ndim();
    const int letters = int(parsed[i].size()) - (terms[i].find("...") != std::string::npos ? 1 : 0);
    p.operands.push_back(expand(parsed[i], rank - letters, ellipsis));
    for (size_t d = 0; d < p.operands.back().size(); ++d) {
      const int label = p.operands.back()[d];
      const int64_t size = ctx.input(int(i)).size(int(d));
      const auto seen = p.sizes.emplace(label, size);  // a label's first size, 0 included
      int64_t& known = seen.first->second;
      OPFORGE_CHECK(known == 1 || size == 1 || size == known, "label '", label < 256 ? std::string(1, char(label)) : "...",
                    "' has sizes ", known, " and ", size);
      if (known == 1) known = size;
    }
    for (int v : parsed[i]) counts[v] += v == -1 ? 0 : 1;
  }
  if (arrow != std::string::npos) {
    const std::vector<int> out = parse_term(eq.substr(arrow + 2));
    for (int v : out) OPFORGE_CHECK(v == -1 || p.sizes.count(v), "output label '", char(v), "' is in no operand");
    p.output = expand(out, ellipsis, ellipsis);
  } else {  // implicit: ellipsis dims, then the labels used once, alphabetically
    p.output = expand({-1}, ellipsis, ellipsis);
    for (auto& [label, n] : counts)
      if (label != -1 && n == 1) p.output.push_back(label);
  }
  return p;
}

void infer(InferContext& ctx) {
  const int32_t dt = ctx.input(0).dtype();
  for (int i = 1; i < ctx.num_inputs(); ++i)
    OPFORGE_CHECK(ctx.input(i).dtype() == dt, "every input must have input 0's dtype");
  const Plan p = make_plan(ctx);
  Shape out;
  for (int label : p.output) out.push_back(p.sizes.at(label));
  ctx.set_output(0, dt, out);
}

/// One loop per label (output labels first); per operand, the element stride of each loop.
struct Loops {
  Shape extent;
  std::vector<Shape> strides;  // [operand][loop]
  size_t outer = 0;            // loops that index the output
};

Loops make_loops(const KernelContext& ctx, const Plan& p) {
  std::vector<int> order = p.output;
  for (auto& [label, size] : p.sizes)
    if (std::find(order.begin(), order.end(), label) == order.end()) order.push_back(label);
  Loops l;
  l.outer = p.output.size();
  for (int label : order) l.extent.push_back(p.sizes.at(label));
  for (size_t i = 0; i < p.operands.size(); ++i) {
    const Tensor t = ctx.input(int(i));
    Shape contiguous(size_t(t.ndim()), 1);
    for (int d = t.ndim() - 1; d > 0; --d) contiguous[size_t(d - 1)] = contiguous[size_t(d)] * t.size(d);
    Shape s(order.size(), 0);
    for (size_t d = 0; d < p.operands[i].size(); ++d) {
      if (t.size(int(d)) == 1) continue;  // broadcast (or a size-1 label): the stride stays 0
      const size_t loop = size_t(std::find(order.begin(), order.end(), p.operands[i][d]) - order.begin());
      s[loop] += contiguous[d];  // a repeated label walks the diagonal
    }
    l.strides.push_back(s);
  }
  return l;
}

/// Sums the product of the operands over the inner loops for every output element.
template <class C> void contract(const Loops& l, const std::vector<const C*>& in, C* out) {
  const size_t loops = l.extent.size(), n = in.size();
  int64_t total = 1, inner = 1;
  for (size_t d = 0; d < loops; ++d) (d < l.outer ? total : inner) *= l.extent[d];
  for (int64_t d : l.extent)
    if (d == 0) inner = 0;
  std::vector<int64_t> index(loops, 0), offset(n, 0);
  for (int64_t o = 0; o < total; ++o) {
    C sum = 0;
    for (int64_t r = 0; r < inner; ++r) {
      C prod = 1;
      for (size_t i = 0; i < n; ++i) prod *= in[i][offset[i]];
      sum += prod;
      for (size_t d = loops; d-- > l.outer;) {  // advance the inner odometer
        for (size_t i = 0; i < n; ++i) offset[i] += l.strides[i][d];
        if (++index[d] < l.extent[d]) break;
        for (size_t i = 0; i < n; ++i) offset[i] -= l.strides[i][d] * l.extent[d];
        index[d] = 0;
      }
    }
    out[o] = sum;
    for (size_t d = l.outer; d-- > 0;) {
      for (size_t i = 0; i < n; ++i) offset[i] += l.strides[i][d];
      if (++index[d] < l.extent[d]) break;
      for (size_t i = 0; i < n; ++i) offset[i] -= l.strides[i][d] * l.extent[d];
      index[d] = 0;
    }
  }
}

void compute(KernelContext& ctx) {
  const Plan p = make_plan(ctx);
  const Loops l = make_loops(ctx, p);
  Tensor y = ctx.output(0);
  const int32_t dt = y.dtype();
  if (dt == OPF_INT32 || dt == OPF_INT64) {
    opforge::dispatch<int32_t, int64_t>(dt, [&](auto tag) {
      using T = typename decltype(tag)::type;
      std::vector<const T*> in;
      for (int i = 0; i < ctx.num_inputs(); ++i) in.push_back(ctx.input(i).data<T>());
      contract(l, in, y.data<T>());
    });
    return;
  }
  dispatch_compute(y, "Einsum's inputs", [&](auto tag) {
    using C = typename decltype(tag)::type;
    std::vector<std::vector<C>> keep(size_t(ctx.num_inputs()));
    std::vector<const C*> in;
    for (int i = 0; i < ctx.num_inputs(); ++i) in.push_back(floats_of<C>(ctx.input(i), keep[size_t(i)], "input"));
    if (dt == int32_t(opforge::dtype_of<C>::value)) return contract(l, in, y.data<C>());
    std::vector<C> out(size_t(y.numel()));
    contract(l, in, out.data());
    write_floats(out.data(), y);
  });
}

}  // namespace

#define EINSUM_OP(VERSION)                                                                                      \
  OPFORGE_OP(Einsum)                                                                                            \
      .since(VERSION)                                                                                           \
      .variadic_input("Inputs", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16, opforge::i32, opforge::i64}) \
      .output("Output")                                                                                         \
      .required_attr("equation", opforge::AttrType::String)                                                     \
      .infer(infer)                                                                                             \
      .compute(compute)

EINSUM_OP(12);   // opset 28 changed no more than the types this kernel takes from 12 on
