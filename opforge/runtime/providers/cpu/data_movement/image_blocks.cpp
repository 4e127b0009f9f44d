// image_blocks.cpp: ops on blocks of an image: Col2Im (sums sliding blocks into an image, the
// inverse of im2col), MaxUnpool (scatters pooled maxima to their indices) and MaxRoiPool (max
// pooling over a grid laid on each region of interest).
#include <algorithm>
#include <cmath>

#include "data_movement/data_movement.h"
#include "common/elements.h"

namespace opforge_cpu {
namespace {

using namespace data_movement;

/// Col2Im's geometry: image and block dims, their padding, strides and dilations, and the
/// sliding positions per spatial dim.
struct BlockGeometry {
  Shape image, block, pads, strides, dilations, positions;
};

template <class Ctx> BlockGeometry block_geometry(const Ctx& ctx) {
  BlockGeometry g;
  if (!ctx.input(1).has_data() || !ctx.input(2).has_data()) throw needs_value("Col2Im", "image_shape/block_shape");
  g.image = read_ints(ctx.input(1));
  g.block = read_ints(ctx.input(2));
  const size_t n = g.image.size();
  OPFORGE_CHECK(n >= 1 && g.block.size() == n, "inputs 'image_shape' and 'block_shape' must hold the same number (>= 1) of dims");
  auto ints = [&](const char* name, int64_t fill, size_t count) {
    Shape v = ctx.has_attr(name) ? ctx.template attr<std::vector<int64_t>>(name) : Shape(count, fill);
    OPFORGE_CHECK(v.size() == count, "attribute '", name, "' holds ", v.size(), " values, expected ", count);
    return v;
  };
  g.dilations = ints("dilations", 1, n);
  g.pads = ints("pads", 0, 2 * n);
  g.strides = ints("strides", 1, n);
  for (size_t d = 0; d < n; ++d) {
    const int64_t span = g.dilations[d] * (g.block[d] - 1) + 1;
    const int64_t room = g.image[d] + g.pads[d] + g.pads[d + n] - span;
    OPFORGE_CHECK(g.block[d] > 0 && g.strides[d] > 0 && g.dilations[d] > 0 && room >= 0, "block dim ", d, " (",
                  g.block[d], ", dilation ", g.dilations[d], ") does not fit the padded image dim of ",
                  g.image[d] + g.pads[d] + g.pads[d + n]);
    g.positions.push_back(room / g.strides[d] + 1);
  }
  return g;
}

void col2im_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes();
  const BlockGeometry g = block_geometry(ctx);
  const int64_t per_channel = numel(g.block);
  OPFORGE_CHECK(x.size() == 3 && x[1] % per_channel == 0 && x[2] == numel(g.positions), "input 'input' ", shape_str(x),
                " must be [N, C * ", per_channel, ", ", numel(g.positions), "] for these blocks");
  Shape out = {x[0], x[1] / per_channel};
  out.insert(out.end(), g.image.begin(), g.image.end());
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// Adds every (block offset, position) column value into the image pixel it covers.
template <class S> void col2im(const S* x, S* y, const BlockGeometry& g, int64_t planes) {
  using C = compute_t<S>;
  const size_t n = g.image.size();
  const int64_t block = numel(g.block), positions = numel(g.positions), pixels = numel(g.image);
  const Shape image_strides = contiguous_strides(g.image);
  std::vector<C> acc(static_cast<size_t>(pixels));
  Shape b(n), p(n);
  for (int64_t plane = 0; plane < planes; ++plane) {
    std::fill(acc.begin(), acc.end(), C(0));
    for (int64_t bi = 0; bi < block; ++bi) {
      for (int64_t rest = bi, d = int64_t(n) - 1; d >= 0; --d) b[size_t(d)] = rest % g.block[size_t(d)], rest /= g.block[size_t(d)];
      for (int64_t pi = 0; pi < positions; ++pi) {
        int64_t off = 0;
        bool inside = true;
        for (int64_t rest = pi, d = int64_t(n) - 1; d >= 0; --d) {
          const size_t u = size_t(d);
          p[u] = rest % g.positions[u], rest /= g.positions[u];
          const int64_t at = p[u] * g.strides[u] - g.pads[u] + b[u] * g.dilations[u];
          inside = inside && at >= 0 && at < g.image[u];
          off += at * image_strides[u];
        }
        if (inside) acc[size_t(off)] += load_as<C>(x[(plane * block + bi) * positions + pi]);
      }
    }
    for (int64_t i = 0; i < pixels; ++i) y[plane * pixels + i] = store_as<S>(acc[size_t(i)]);
  }
}

void col2im_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const BlockGeometry g = block_geometry(ctx);
  const int64_t planes = y.sizes()[0] * y.sizes()[1];
  dispatch_storage(x, "input 'input'", [&](auto tag) {
    using S = typename decltype(tag)::type;
    col2im(static_cast<const S*>(x.raw()), static_cast<S*>(y.raw()), g, planes);
  });
}

/// MaxUnpool's output shape as the pooling geometry gives it: (in - 1) * stride - pads + kernel.
template <class Ctx> Shape unpooled_shape(const Ctx& ctx, const Shape& x) {
  const Shape kernel = ctx.template attr<std::vector<int64_t>>("kernel_shape");
  const size_t n = kernel.size();
  OPFORGE_CHECK(x.size() == n + 2, "input 'X' ", shape_str(x), " must have rank 2 + ", n, " (the kernel's dims)");
  const Shape pads = ctx.has_attr("pads") ? ctx.template attr<std::vector<int64_t>>("pads") : Shape(2 * n, 0);
  const Shape strides = ctx.has_attr("strides") ? ctx.template attr<std::vector<int64_t>>("strides") : Shape(n, 1);
  OPFORGE_CHECK(pads.size() == 2 * n && strides.size() == n, "attributes 'pads' and 'strides' must hold ", 2 * n,
                " and ", n, " values");
  Shape out = {x[0], x[1]};
  for (size_t d = 0; d < n; ++d) {
    out.push_back((x[d + 2] - 1) * strides[d] - pads[d] - pads[d + n] + kernel[d]);
    OPFORGE_CHECK(out.back() > 0, "kernel_shape, pads and strides leave no room in unpooled dim ", d + 2);
  }
  return out;
}

void max_unpool_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes(), natural = unpooled_shape(ctx, x);
  OPFORGE_CHECK(ctx.input(1).sizes() == x, "input 'I' ", shape_str(ctx.input(1).sizes()), " must have X's shape ",
                shape_str(x));
  if (!ctx.has_input(2)) return ctx.set_output(0, ctx.input(0).dtype(), natural);
  const Shape out = input_ints(ctx, 2, "MaxUnpool", "output_shape");
  OPFORGE_CHECK(out.size() == x.size(), "input 'output_shape' holds ", out.size(), " dims for rank ", x.size());
  for (size_t d = 0; d < out.size(); ++d)
    OPFORGE_CHECK(out[d] >= natural[d], "input 'output_shape' ", shape_str(out), " is smaller than the unpooled shape ",
                  shape_str(natural));
  ctx.set_output(0, ctx.input(0).dtype(), out);
}

/// Each value lands at its flat index into the unpooled shape, which sits at the start of every
/// dim of a larger 'output_shape'; everything else is zero.
void max_unpool_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0), y = ctx.output(0);
  const Shape natural = unpooled_shape(ctx, x.sizes()), out = y.sizes();
  const Shape ns = contiguous_strides(natural), os = contiguous_strides(out);
  const int64_t es = elem_size(x), total = numel(natural);
  std::memset(y.raw(), 0, size_t(y.nbytes()));
  const int64_t* index = ctx.input(1).data<int64_t>();
  const char* src = static_cast<const char*>(x.raw());
  char* dst = static_cast<char*>(y.raw());
  for (int64_t e = 0; e < x.numel(); ++e) {
    const int64_t flat = index[e];
    OPFORGE_CHECK(flat >= 0 && flat < total, "index ", flat, " in input 'I' is outside the unpooled tensor of ", total,
                  " elements");
    int64_t off = 0;
    for (size_t d = 0; d < natural.size(); ++d) off += (flat / ns[d] % natural[d]) * os[d];
    std::memcpy(dst + off * es, src + e * es, size_t(es));
  }
}

void max_roi_pool_infer(InferContext& ctx) {
  const Shape x = ctx.input(0).sizes(), rois = ctx.input(1).sizes();
  const std::vector<int64_t> pooled = ctx.attr<std::vector<int64_t>>("pooled_shape");
  OPFORGE_CHECK(x.size() == 4, "input 'X' ", shape_str(x), " must be [N, C, H, W]");
  OPFORGE_CHECK(rois.size() == 2 && rois[1] == 5, "input 'rois' ", shape_str(rois),
                " must be [num_rois, 5] (batch index, x1, y1, x2, y2)");
  OPFORGE_CHECK(pooled.size() == 2 && pooled[0] > 0 && pooled[1] > 0, "attribute 'pooled_shape' must be two positive sizes");
  ctx.set_output(0, ctx.input(0).dtype(), {rois[0], x[1], pooled[0], pooled[1]});
}

/// Each region (corners scaled by spatial_scale and rounded, as Caffe and onnxruntime do) is cut
/// into pooled_shape bins; a bin's output is its maximum, or 0 for a bin outside the image.
template <class S> void max_roi_pool(const KernelContext& ctx, const Tensor& x, const std::vector<double>& rois,
                                     S* y) {
  using C = compute_t<S>;
  const Shape xs = x.sizes(), ys = ctx.output(0).sizes();
  const int64_t channels = xs[1], height = xs[2], width = xs[3], ph_n = ys[2], pw_n = ys[3];
  const double scale = ctx.attr<double>("spatial_scale");
  const S* src = static_cast<const S*>(x.raw());
  for (int64_t r = 0; r < ys[0]; ++r) {
    const double* roi = &rois[size_t(r * 5)];
    const int64_t batch = int64_t(roi[0]);
    OPFORGE_CHECK(batch >= 0 && batch < xs[0], "roi ", r, " names batch ", roi[0], " of ", xs[0]);
    const int64_t x1 = std::llround(roi[1] * scale), y1 = std::llround(roi[2] * scale);
    const int64_t x2 = std::llround(roi[3] * scale), y2 = std::llround(roi[4] * scale);
    const double bin_h = double(std::max<int64_t>(y2 - y1 + 1, 1)) / double(ph_n);
    const double bin_w = double(std::max<int64_t>(x2 - x1 + 1, 1)) / double(pw_n);
    for (int64_t c = 0; c < channels; ++c) {
      const S* plane = src + (batch * channels + c) * height * width;
      for (int64_t ph = 0; ph < ph_n; ++ph)
        for (int64_t pw = 0; pw < pw_n; ++pw) {
          const int64_t h0 = std::clamp<int64_t>(int64_t(std::floor(ph * bin_h)) + y1, 0, height);
          const int64_t h1 = std::clamp<int64_t>(int64_t(std::ceil((ph + 1) * bin_h)) + y1, 0, height);
          const int64_t w0 = std::clamp<int64_t>(int64_t(std::floor(pw * bin_w)) + x1, 0, width);
          const int64_t w1 = std::clamp<int64_t>(int64_t(std::ceil((pw + 1) * bin_w)) + x1, 0, width);
          C best = C(0);
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) {
              const C v = load_as<C>(plane[h * width + w]);
              if ((h == h0 && w == w0) || v > best) best = v;
            }
          y[((r * channels + c) * ph_n + ph) * pw_n + pw] = store_as<S>(best);
        }
    }
  }
}

void max_roi_pool_compute(KernelContext& ctx) {
  const Tensor x = ctx.input(0);
  const std::vector<double> rois = read_doubles(ctx.input(1));
  dispatch_storage(x, "input 'X'", [&](auto tag) {
    using S = typename decltype(tag)::type;
    max_roi_pool(ctx, x, rois, static_cast<S*>(ctx.output(0).raw()));
  });
}

}  // namespace
}  // namespace opforge_cpu

using namespace opforge_cpu;

OPFORGE_OP(Col2Im)
    .since(18)
    .input("input", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("image_shape", {opforge::i64})
    .input("block_shape", {opforge::i64})
    .output("output")
    .optional_attr("dilations", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(col2im_infer)
    .compute(col2im_compute);

OPFORGE_OP(MaxUnpool)
    .since(9)
    .input("X", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("I", {opforge::i64})
    .optional_input("output_shape", {opforge::i64})
    .output("output")
    .required_attr("kernel_shape", opforge::AttrType::Ints)
    .optional_attr("pads", opforge::AttrType::Ints)
    .optional_attr("strides", opforge::AttrType::Ints)
    .infer(max_unpool_infer)
    .compute(max_unpool_compute);

OPFORGE_OP(MaxRoiPool)
    .since(1)
    .input("X", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .input("rois", {opforge::f32, opforge::f64, opforge::f16, opforge::bf16})
    .output("Y")
    .required_attr("pooled_shape", opforge::AttrType::Ints)
    .attr("spatial_scale", 1.0f)
    .infer(max_roi_pool_infer)
    .compute(max_roi_pool_compute);
