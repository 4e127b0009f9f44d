// tfidf.cpp: TfIdfVectorizer over integer tokens (a node with a string pool is left to another
// provider: the op does not declare pool_strings). Counts n-grams, with skips, as onnxruntime
// and onnx's reference do: unigrams at skip 0 only, a longer n-gram at every skip distance that
// fits in the row.
#include <algorithm>
#include <map>
#include <set>

#include "data_movement/data_movement.h"
#include "common/elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;
using Gram = std::vector<int64_t>;

/// The pool as n-gram -> output column, plus every prefix of a pooled n-gram (to stop early).
struct Pool {
  std::map<Gram, int64_t> column;
  std::set<Gram> prefixes;
  int64_t width = 0;
};

template <class Ctx> Pool read_pool(const Ctx& ctx) {
  const std::vector<int64_t> counts = ctx.template attr<std::vector<int64_t>>("ngram_counts");
  const std::vector<int64_t> indexes = ctx.template attr<std::vector<int64_t>>("ngram_indexes");
  const std::vector<int64_t> pool = ctx.has_attr("pool_int64s") ? ctx.template attr<std::vector<int64_t>>("pool_int64s")
                                                                 : std::vector<int64_t>();
  const int64_t lo = ctx.template attr<int64_t>("min_gram_length"), hi = ctx.template attr<int64_t>("max_gram_length");
  OPFORGE_CHECK(1 <= lo && lo <= hi, "min_gram_length ", lo, " and max_gram_length ", hi, " must satisfy 1 <= min <= max");
  Pool p;
  for (int64_t i : indexes) {
    OPFORGE_CHECK(i >= 0, "attribute 'ngram_indexes' holds a negative column ", i);
    p.width = std::max(p.width, i + 1);
  }
  int64_t id = 0;   // n-grams numbered in pool order, those outside [min, max] included
  for (size_t g = 0; g < counts.size(); ++g) {
    const int64_t n = int64_t(g) + 1, begin = counts[g];
    const int64_t end = g + 1 < counts.size() ? counts[g + 1] : int64_t(pool.size());
    OPFORGE_CHECK(0 <= begin && begin <= end && end <= int64_t(pool.size()), "ngram_counts ", begin, "..", end,
                  " fall outside the pool of ", pool.size());
    for (int64_t at = begin; at + n <= end; at += n, ++id) {
      if (n < lo || n > hi) continue;
      OPFORGE_CHECK(id < int64_t(indexes.size()), "ngram_indexes has no column for n-gram #", id);
      const Gram gram(pool.begin() + at, pool.begin() + at + n);
      p.column.emplace(gram, indexes[size_t(id)]);
      for (int64_t k = 1; k <= n; ++k) p.prefixes.emplace(gram.begin(), gram.begin() + k);
    }
  }
  return p;
}

void tfidf_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes();
  OPFORGE_CHECK(x.size() <= 2, "input 'X' ", shape_str(x), " must be [C] or [N, C]");
  const std::string mode = ctx.attr<std::string>("mode");
  OPFORGE_CHECK(mode == "TF" || mode == "IDF" || mode == "TFIDF", "attribute 'mode' = '", mode, "' is not TF, IDF or TFIDF");
  const int64_t width = read_pool(ctx).width;
  ctx.set_output(0, opforge::f32, x.size() == 2 ? Shape{x[0], width} : Shape{width});
}

/// n-gram counts of one row of tokens into `counts` (one per output column).
void count_row(const std::vector<int64_t>& row, const Pool& pool, int64_t lo, int64_t hi, int64_t max_skip,
               std::vector<int64_t>& counts) {
  const int64_t size = int64_t(row.size());
  int64_t first = lo;
  Gram gram;
  for (int64_t skip = 1; skip - 1 <= max_skip && skip * (first - 1) < std::max<int64_t>(size, 1); ++skip) {
    for (int64_t start = 0; start + skip * (first - 1) < size; ++start) {
      gram.clear();
      for (int64_t at = start; int64_t(gram.size()) < hi && at < size; at += skip) {
        gram.push_back(row[size_t(at)]);
        if (!pool.prefixes.count(gram)) break;
        const auto hit = pool.column.find(gram);
        if (int64_t(gram.size()) >= first && hit != pool.column.end()) ++counts[size_t(hit->second)];
      }
    }
    if (first == 1 && ++first > hi) break;   // unigrams count once, at the first skip distance
  }
}

void tfidf_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const Pool pool = read_pool(ctx);
  const int64_t lo = ctx.attr<int64_t>("min_gram_length"), hi = ctx.attr<int64_t>("max_gram_length");
  const int64_t max_skip = ctx.attr<int64_t>("max_skip_count");
  OPFORGE_CHECK(max_skip >= 0, "attribute 'max_skip_count' must not be negative, got ", max_skip);
  const std::string mode = ctx.attr<std::string>("mode");
  const std::vector<float> weights = ctx.has_attr("weights") ? ctx.attr<std::vector<float>>("weights") : std::vector<float>();
  OPFORGE_CHECK(weights.empty() || int64_t(weights.size()) >= pool.width, "attribute 'weights' holds ", weights.size(),
                " values for ", pool.width, " columns");
  const std::vector<int64_t> tokens = read_ints(x);
  const int64_t rows = x.ndim() == 2 ? x.sizes()[0] : 1, cols = x.ndim() == 2 ? x.sizes()[1] : int64_t(tokens.size());
  float* y = ctx.output(0).data<float>();
  std::vector<int64_t> counts(size_t(pool.width));
  for (int64_t r = 0; r < rows; ++r) {
    std::fill(counts.begin(), counts.end(), 0);
    const std::vector<int64_t> row(tokens.begin() + r * cols, tokens.begin() + (r + 1) * cols);
    if (!pool.column.empty()) count_row(row, pool, lo, hi, max_skip, counts);
    for (int64_t c = 0; c < pool.width; ++c) {
      const float w = weights.empty() ? 1.f : weights[size_t(c)];
      const int64_t n = counts[size_t(c)];
      y[r * pool.width + c] = mode == "TF" ? float(n) : mode == "IDF" ? (n > 0 ? w : 0.f) : w * float(n);
    }
  }
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(TfIdfVectorizer)
    .since(9)
    .input("X", {opforge::i32, opforge::i64})
    .output("Y", {opforge::f32})
    .required_attr("max_gram_length", opforge::AttrType::Int)
    .required_attr("max_skip_count", opforge::AttrType::Int)
    .required_attr("min_gram_length", opforge::AttrType::Int)
    .required_attr("mode", opforge::AttrType::String)
    .required_attr("ngram_counts", opforge::AttrType::Ints)
    .required_attr("ngram_indexes", opforge::AttrType::Ints)
    .optional_attr("pool_int64s", opforge::AttrType::Ints)
    .optional_attr("weights", opforge::AttrType::Floats)
    .infer(tfidf_infer)
    .compute(tfidf_compute);
