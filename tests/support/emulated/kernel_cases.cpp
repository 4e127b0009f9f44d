// kernel_cases.cpp: a subset of the built-in kernels (Conv plain, strided, grouped and
// depthwise; PackedMatMul on every tile code the CPU has; MatMul; MaxPool, AveragePool,
// GlobalAveragePool) on random inputs against plain double-precision loops, for a kernel build
// run where Python cannot (an aarch64 build under qemu-user). Prints one line per case and
// "N passed, M failed"; exits non-zero on a failure.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "host.h"

extern "C" int32_t opforge_kernel_paths(const char** names, uint64_t* calls, int32_t capacity);

namespace {

using harness::Array;
using harness::Call;
using harness::find_op;

std::mt19937 rng(7);

Array random(std::vector<int64_t> shape) {
  Array a(std::move(shape));
  std::normal_distribution<float> normal;
  for (float& v : a.data) v = normal(rng);
  return a;
}

/// Per element: the exact value and the sum of |terms| it adds up (for its rounding bound).
struct Want {
  std::vector<double> value, magnitude;
  int64_t terms = 1;  ///< the longest sum
};

int passed = 0, failed = 0;

/// got within the float32 rounding of sums of `terms` products of want, else a failure line.
void expect(const std::string& name, const Array& got, const Want& want) {
  double worst = 0;
  bool ok = got.numel() == int64_t(want.value.size());
  for (size_t i = 0; ok && i < want.value.size(); ++i) {
    const double bound = 2.0 * double(want.terms + 2) * FLT_EPSILON * (want.magnitude[i] + std::fabs(want.value[i]));
    const double err = std::fabs(double(got.data[i]) - want.value[i]);
    worst = std::fmax(worst, err / (bound + DBL_MIN));
    ok = err <= bound || (std::isnan(want.value[i]) && std::isnan(got.data[i]));
  }
  std::printf("%s %s (worst error %.3g of its bound)\n", ok ? "ok  " : "FAIL", name.c_str(), worst);
  ++(ok ? passed : failed);
}

void run_case(const std::string& name, const std::function<void()>& body) {
  try {
    body();
  } catch (const std::exception& e) {
    std::printf("FAIL %s: %s\n", name.c_str(), e.what());
    ++failed;
  }
}

// ---- Conv ------------------------------------------------------------------------------------

struct ConvShape {
  int64_t n, c, h, w, m, k, stride, pad, dilation, group;
};

Want conv_reference(const ConvShape& s, const Array& x, const Array& w, const Array& b, int64_t oh, int64_t ow) {
  Want want;
  const int64_t cg = s.c / s.group, mg = s.m / s.group;
  want.terms = cg * s.k * s.k + 1;
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t m = 0; m < s.m; ++m)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double acc = b.data[m], mag = std::fabs(b.data[m]);
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < s.k; ++i)
              for (int64_t j = 0; j < s.k; ++j) {
                const int64_t yy = y * s.stride - s.pad + i * s.dilation, zz = z * s.stride - s.pad + j * s.dilation;
                if (yy < 0 || yy >= s.h || zz < 0 || zz >= s.w) continue;
                const double p = double(x.data[((n * s.c + m / mg * cg + c) * s.h + yy) * s.w + zz]) *
                                 w.data[((m * cg + c) * s.k + i) * s.k + j];
                acc += p, mag += std::fabs(p);
              }
          want.value.push_back(acc), want.magnitude.push_back(mag);
        }
  return want;
}

void conv_case(const std::string& name, const ConvShape& s) {
  run_case(name, [&] {
    const Array x = random({s.n, s.c, s.h, s.w}), w = random({s.m, s.c / s.group, s.k, s.k}), b = random({s.m});
    Call call(find_op("", "Conv", 17));
    call.ints("kernel_shape", {s.k, s.k}).ints("strides", {s.stride, s.stride});
    call.ints("pads", {s.pad, s.pad, s.pad, s.pad}).ints("dilations", {s.dilation, s.dilation});
    call.integer("group", s.group);
    const Array y = call.run({&x, &w, &b})[0];
    expect(name, y, conv_reference(s, x, w, b, y.shape[2], y.shape[3]));
  });
}

// ---- GEMM --------------------------------------------------------------------------------------

Want matmul_reference(const Array& a, const Array& w, const Array* bias, bool relu, int64_t m, int64_t k, int64_t n) {
  Want want;
  want.terms = k + 1;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double acc = bias ? bias->data[j] : 0.0, mag = std::fabs(acc);
      for (int64_t p = 0; p < k; ++p) {
        const double t = double(a.data[i * k + p]) * w.data[p * n + j];
        acc += t, mag += std::fabs(t);
      }
      want.value.push_back(relu && acc < 0 ? 0.0 : acc), want.magnitude.push_back(mag);
    }
  return want;
}

/// W (k x n) as PackedMatMul wants it: (ceil(n / 32), k, 32) column panels, zero past n.
Array pack(const Array& w, int64_t k, int64_t n) {
  const int64_t panels = (n + 31) / 32;
  Array packed({panels, k, 32});
  for (int64_t p = 0; p < panels; ++p)
    for (int64_t r = 0; r < k; ++r)
      for (int64_t j = 0; j < 32; ++j)
        packed.data[(p * k + r) * 32 + j] = 32 * p + j < n ? w.data[r * n + 32 * p + j] : 0.f;
  return packed;
}

void packed_case(const char* isa, int64_t m, int64_t k, int64_t n, bool relu, int threads) {
  const std::string name = std::string("PackedMatMul isa=") + isa + " " + std::to_string(m) + "x" +
                           std::to_string(k) + "x" + std::to_string(n) + (relu ? " Relu" : "") + " threads=" +
                           std::to_string(threads);
  run_case(name, [&] {
    const Array a = random({m, k}), w = random({k, n}), bias = random({n}), packed = pack(w, k, n);
    Call call(find_op("com.opforge", "PackedMatMul", 1));
    call.integer("N", n).text("isa", isa).text("activation", relu ? "Relu" : "");
    expect(name, call.run({&a, &packed, &bias}, threads)[0], matmul_reference(a, w, &bias, relu, m, k, n));
  });
}

void matmul_case(int64_t m, int64_t k, int64_t n) {
  const std::string name = "MatMul " + std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  run_case(name, [&] {
    const Array a = random({m, k}), w = random({k, n});
    expect(name, Call(find_op("", "MatMul", 17)).run({&a, &w})[0], matmul_reference(a, w, nullptr, false, m, k, n));
  });
}

// ---- Pooling -----------------------------------------------------------------------------------

/// MaxPool (max) or AveragePool (mean, padding not counted) of a k x k window, stride s, pad p.
void pool_case(bool max, int64_t c, int64_t h, int64_t w, int64_t k, int64_t s, int64_t p) {
  const std::string name = std::string(max ? "MaxPool" : "AveragePool") + " " + std::to_string(k) + "x" +
                           std::to_string(k) + " stride " + std::to_string(s) + " pad " + std::to_string(p);
  run_case(name, [&] {
    const Array x = random({1, c, h, w});
    Call call(find_op("", max ? "MaxPool" : "AveragePool", 19));
    call.ints("kernel_shape", {k, k}).ints("strides", {s, s}).ints("pads", {p, p, p, p});
    const Array y = call.run({&x})[0];
    Want want;
    want.terms = k * k;
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t i = 0; i < y.shape[2]; ++i)
        for (int64_t j = 0; j < y.shape[3]; ++j) {
          double acc = max ? -INFINITY : 0.0, mag = 0;
          int64_t count = 0;
          for (int64_t a = i * s - p; a < i * s - p + k; ++a)
            for (int64_t b = j * s - p; b < j * s - p + k; ++b) {
              if (a < 0 || a >= h || b < 0 || b >= w) continue;
              const double v = x.data[(ch * h + a) * w + b];
              acc = max ? std::fmax(acc, v) : acc + v, mag += std::fabs(v), ++count;
            }
          want.value.push_back(max ? acc : acc / double(count)), want.magnitude.push_back(max ? 0 : mag / double(count));
        }
    expect(name, y, want);
  });
}

void global_average_case(int64_t c, int64_t h, int64_t w) {
  run_case("GlobalAveragePool", [&] {
    const Array x = random({2, c, h, w});
    Want want;
    want.terms = h * w;
    for (int64_t plane = 0; plane < 2 * c; ++plane) {
      double acc = 0, mag = 0;
      for (int64_t i = 0; i < h * w; ++i) acc += x.data[plane * h * w + i], mag += std::fabs(x.data[plane * h * w + i]);
      want.value.push_back(acc / double(h * w)), want.magnitude.push_back(mag / double(h * w));
    }
    expect("GlobalAveragePool", Call(find_op("", "GlobalAveragePool", 17)).run({&x})[0], want);
  });
}

/// Whether a kernel path named `name` ran.
bool path_ran(const std::string& name) {
  const char* names[512];
  uint64_t calls[512];
  const int32_t count = opforge_kernel_paths(names, calls, 512);
  for (int32_t i = 0; i < count && i < 512; ++i)
    if (name == names[i] && calls[i] > 0) return true;
  return false;
}

}  // namespace

int main() {
  conv_case("Conv 3x3 pad 1", {2, 8, 13, 11, 16, 3, 1, 1, 1, 1});
  conv_case("Conv 1x1", {1, 32, 9, 9, 24, 1, 1, 0, 1, 1});
  conv_case("Conv 7x7 stride 2 pad 3", {1, 3, 20, 20, 8, 7, 2, 3, 1, 1});
  conv_case("Conv 3x3 dilation 2", {1, 4, 12, 12, 6, 3, 1, 2, 2, 1});
  conv_case("Conv grouped 3x3 (4 groups)", {1, 16, 10, 10, 16, 3, 1, 1, 1, 4});
  conv_case("Conv depthwise 3x3", {1, 16, 14, 14, 16, 3, 1, 1, 1, 16});
  conv_case("Conv depthwise 5x5 stride 2", {1, 12, 15, 15, 12, 5, 2, 2, 1, 12});
  conv_case("Conv depthwise 7x7", {1, 8, 16, 16, 8, 7, 1, 3, 1, 8});
  const std::vector<const char*> isas = {
#if defined(__aarch64__)
      "neon",
#endif
      "portable"};
  for (const char* isa : isas) {
    packed_case(isa, 13, 300, 45, true, 2);  // K past one 256 block; a partial panel
    packed_case(isa, 1, 7, 32, false, 1);
    packed_case(isa, 64, 64, 100, false, 2);
    packed_case(isa, 6, 33, 17, true, 1);
  }
#if defined(__aarch64__)
  const bool neon = path_ran("gemm.packed.neon");
  std::printf("%s the NEON tile ran (gemm.packed.neon)\n", neon ? "ok  " : "FAIL");
  ++(neon ? passed : failed);
#endif
  matmul_case(17, 40, 23);
  pool_case(true, 6, 17, 15, 3, 2, 1);
  pool_case(true, 4, 16, 16, 2, 2, 0);
  pool_case(false, 6, 17, 15, 3, 2, 1);
  pool_case(false, 4, 16, 16, 2, 2, 0);
  global_average_case(10, 7, 7);
  std::printf("%d passed, %d failed\n", passed, failed);
  return failed == 0 ? 0 : 1;
}
