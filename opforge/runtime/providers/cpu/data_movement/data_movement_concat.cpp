// data_movement_concat.cpp: Concat and Split, which copy row blocks between one tensor and many.
#include <algorithm>
#include <utility>
#include <vector>

#include "data_movement/data_movement.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// One piece of a Concat or Split: its base pointer (null: skip it) and its bytes per outer row.
struct Piece {
  char* data;
  int64_t row_bytes;
};

/// Copies between a whole tensor (rows of `whole_row` bytes) and its pieces, `outer` rows each;
/// `gather` true builds the whole from the pieces (Concat), false cuts it up (Split).
void copy_pieces(const KernelContext& ctx, char* whole, int64_t whole_row, std::vector<Piece> pieces,
                 int64_t outer, bool gather) {
  if (outer == 1) {
    // The session's memory plan has producers write a Concat's inputs straight into the output
    // at their offsets (plan/memory.py, join_parts); copy_bytes skips a piece already in place.
    // A piece of a data-dependent size can sit inside the output but elsewhere, where another
    // piece's bytes go: such pieces are copied out first, so no copy overwrites one not yet done.
    std::vector<std::vector<char>> staged;
    if (gather) {
      int64_t total = 0, off = 0;
      for (const Piece& p : pieces) total += p.row_bytes;
      for (Piece& p : pieces) {
        if (p.data != nullptr && p.data != whole + off && p.data < whole + total && whole < p.data + p.row_bytes) {
          staged.emplace_back(p.data, p.data + p.row_bytes);
          p.data = staged.back().data();
        }
        off += p.row_bytes;
      }
    }
    int64_t off = 0;
    for (const Piece& p : pieces) {
      if (p.data != nullptr)
        copy_bytes(ctx, gather ? whole + off : p.data, gather ? p.data : whole + off, p.row_bytes);
      off += p.row_bytes;
    }
    return;
  }
  ctx.parallel_for(outer, std::max<int64_t>(1, (int64_t(1) << 17) / std::max<int64_t>(whole_row, 1)),
                   [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      char* row = whole + o * whole_row;
      for (const Piece& p : pieces) {
        char* piece = p.data + o * p.row_bytes;
        if (p.data != nullptr && p.row_bytes > 0)
          std::memcpy(gather ? row : piece, gather ? piece : row, size_t(p.row_bytes));
        row += p.row_bytes;
      }
    }
  });
}

void concat_infer(InferContext& ctx) {
  OPFORGE_CHECK(ctx.num_inputs() >= 1, "Concat needs at least one input");
  Shape out = ctx.input(0).sizes();
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), int64_t(out.size()));
  OPFORGE_CHECK(!out.empty(), "Concat cannot join scalars (input 0 has rank 0)");
  for (int i = 1; i < ctx.num_inputs(); ++i) {
    const Tensor t = ctx.input(i);
    OPFORGE_CHECK(t.dtype() == ctx.input(0).dtype(), "input ", i, " is ", opforge::dtype_name(t.dtype()),
                  ", input 0 is ", opforge::dtype_name(ctx.input(0).dtype()));
    const Shape s = t.sizes();
    OPFORGE_CHECK(s.size() == out.size(), "input ", i, " has shape ", shape_str(s), ", input 0 has rank ",
                  out.size());
    for (size_t d = 0; d < s.size(); ++d) {
      if (int64_t(d) == axis) {
        out[d] = (out[d] < 0 || s[d] < 0) ? -1 : out[d] + s[d];
      } else if (out[d] < 0) {
        out[d] = s[d];
      } else {
        OPFORGE_CHECK(s[d] < 0 || s[d] == out[d], "input ", i, " has shape ", shape_str(s),
                      ", which differs from the others outside axis ", axis);
      }
    }
  }
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

void concat_compute(KernelContext& ctx) {
  const Tensor y = ctx.output(0);
  if (y.numel() == 0) return;
  const Shape out = y.sizes();
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), int64_t(out.size()));
  const int64_t es = elem_size(y), outer = dims_product(out, 0, size_t(axis));
  const int64_t inner = dims_product(out, size_t(axis) + 1, out.size());
  std::vector<Piece> pieces;
  for (int i = 0; i < ctx.num_inputs(); ++i)
    pieces.push_back({static_cast<char*>(ctx.input(i).raw()), ctx.input(i).size(int(axis)) * inner * es});
  copy_pieces(ctx, static_cast<char*>(y.raw()), out[size_t(axis)] * inner * es, std::move(pieces), outer, true);
}

/// Split sizes along `axis` (of size `dim`) for `n` outputs, from the attribute, the input,
/// num_outputs (uneven: the last piece is smaller), or an even split.
template <class Ctx> Shape split_sizes(const Ctx& ctx, int64_t dim, int n, int version) {
  Shape sizes;
  if (version < 13 && ctx.has_attr("split")) {
    sizes = ctx.template attr<Shape>("split");
  } else if (version >= 13 && ctx.has_input(1)) {
    if (!ctx.input(1).has_data()) throw needs_value("Split", "split");
    sizes = read_ints(ctx.input(1));
  } else if (version >= 18 && ctx.has_attr("num_outputs")) {
    const int64_t k = ctx.template attr<int64_t>("num_outputs");
    OPFORGE_CHECK(k >= 1 && k == n, "attribute 'num_outputs' is ", k, " but the node has ", n, " outputs");
    const int64_t chunk = (dim + k - 1) / k;
    for (int64_t i = 0; i < k; ++i) sizes.push_back(std::max<int64_t>(0, std::min(chunk, dim - i * chunk)));
  } else {
    OPFORGE_CHECK(dim % n == 0, "dimension ", dim, " does not split evenly into ", n, " outputs");
    sizes.assign(size_t(n), dim / n);
  }
  OPFORGE_CHECK(int64_t(sizes.size()) == n, "'split' has ", sizes.size(), " entries but the node has ", n,
                " outputs");
  int64_t total = 0;
  for (int64_t s : sizes) {
    OPFORGE_CHECK(s >= 0, "'split' entries must be >= 0, got ", s);
    total += s;
  }
  OPFORGE_CHECK(total == dim, "'split' sums to ", total, " but the axis has size ", dim);
  return sizes;
}

template <int V> void split_infer(InferContext& ctx) {
  const Shape in = ctx.input(0).sizes();
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), int64_t(in.size()));
  OPFORGE_CHECK(in[size_t(axis)] >= 0, "Split needs the size of axis ", axis);
  const Shape sizes = split_sizes(ctx, in[size_t(axis)], ctx.num_outputs(), V);
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    Shape out = in;
    out[size_t(axis)] = sizes[size_t(i)];
    ctx.set_output(i, ctx.input(0).dtype(), out);
  }
}

template <int V> void split_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  if (x.numel() == 0) return;
  const Shape in = x.sizes();
  const int64_t axis = normalize_axis(ctx.attr<int64_t>("axis"), int64_t(in.size()));
  const int64_t es = elem_size(x), outer = dims_product(in, 0, size_t(axis));
  const int64_t inner = dims_product(in, size_t(axis) + 1, in.size());
  const Shape sizes = split_sizes(ctx, in[size_t(axis)], ctx.num_outputs(), V);
  std::vector<Piece> pieces;
  for (int i = 0; i < ctx.num_outputs(); ++i) {
    // An output the graph does not use may come without a buffer: its bytes are skipped.
    const Tensor y = ctx.output(i);
    pieces.push_back({y.defined() ? static_cast<char*>(y.raw()) : nullptr, sizes[size_t(i)] * inner * es});
  }
  copy_pieces(ctx, static_cast<char*>(x.raw()), in[size_t(axis)] * inner * es, std::move(pieces), outer, false);
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Concat)
    .since(4)
    .variadic_input("inputs", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .output("concat_result")
    .required_attr("axis", opforge::AttrType::Int)
    .infer(concat_infer)
    .compute(concat_compute);

OPFORGE_OP(Split)
    .since(2)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .variadic_output("outputs")
    .attr("axis", int64_t(0))
    .optional_attr("split", opforge::AttrType::Ints)
    .infer(split_infer<2>)
    .compute(split_compute<2>);

OPFORGE_OP(Split)
    .since(13)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .optional_input("split", {opforge::i64})
    .variadic_output("outputs")
    .attr("axis", int64_t(0))
    .infer(split_infer<13>)
    .compute(split_compute<13>);

OPFORGE_OP(Split)
    .since(18)
    .input("input", OPFORGE_ALL_WITH_NARROW_DTYPES)
    .optional_input("split", {opforge::i64})
    .variadic_output("outputs")
    .attr("axis", int64_t(0))
    .optional_attr("num_outputs", opforge::AttrType::Int)
    .infer(split_infer<18>)
    .compute(split_compute<18>);
