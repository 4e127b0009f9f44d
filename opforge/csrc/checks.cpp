// checks.cpp: checks on what an op's infer declared (dtype, rank, sizes, bytes).
#include "checks.h"

#include "opforge/dtype.h"

namespace opforge_core {

bool checked_nbytes(const opf_tensor& t, int64_t* bytes) {
  // numpy's rule, so that every tensor can also be handed to Python: the product of the nonzero
  // sizes and the item size fits, even when a zero size makes the tensor empty
  int64_t span = opforge::dtype_size(t.dtype);
  bool empty = false;
  for (int32_t d = 0; d < t.ndim && d < OPF_MAX_DIMS; ++d) {
    if (t.shape[d] < 0 || __builtin_mul_overflow(span, t.shape[d] ? t.shape[d] : 1, &span)) return false;
    empty = empty || t.shape[d] == 0;
  }
  *bytes = empty ? 0 : span;
  return true;
}

std::string shape_text(const opf_tensor& t) {
  std::string s = "[";
  for (int32_t d = 0; d < t.ndim && d < OPF_MAX_DIMS; ++d) s += (d ? ", " : "") + std::to_string(t.shape[d]);
  return s + "]";
}

std::string declared_problem(const opf_tensor& t, bool unknown_sizes) {
  if (opforge::dtype_size(t.dtype) == 0) return "the dtype code " + std::to_string(t.dtype) + ", which no tensor can hold";
  if (t.ndim < 0 || t.ndim > OPF_MAX_DIMS)
    return "rank " + std::to_string(t.ndim) + "; opforge's limit is " + std::to_string(OPF_MAX_DIMS);
  bool unknown = false;
  for (int32_t d = 0; d < t.ndim; ++d) {
    if (t.shape[d] < -1 || (t.shape[d] == -1 && !unknown_sizes)) return "the shape " + shape_text(t);
    unknown = unknown || t.shape[d] == -1;
  }
  int64_t bytes = 0;
  if (!unknown && !checked_nbytes(t, &bytes))
    return "the shape " + shape_text(t) + " of " + opforge::dtype_name(t.dtype) + ", whose byte size overflows";
  return "";
}

}  // namespace opforge_core
