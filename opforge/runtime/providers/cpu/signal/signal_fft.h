// signal_fft.h: the complex FFT numpy runs (pocketfft's cfftp), for lengths whose factors are 2,
// 3, 4 and 5, done operation for operation as pocketfft does them so that a float32 transform
// rounds exactly as numpy's does (onnx's reference DFT and its test data come from numpy).
#pragma once

#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

// a fused multiply-add rounds differently from numpy's separate multiply and add
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace opforge_cpu {
namespace fft {

template <class T> struct Cx {
  T r, i;
  Cx operator+(Cx o) const { return {r + o.r, i + o.i}; }
  Cx operator-(Cx o) const { return {r - o.r, i - o.i}; }
  Cx operator*(T s) const { return {r * s, i * s}; }
};

/// a = c + d, b = c - d.
template <class T> inline void pm(Cx<T>& a, Cx<T>& b, Cx<T> c, Cx<T> d) {
  a = c + d;
  b = c - d;
}

/// v times w (backward) or times conj(w) (forward).
template <bool kFwd, class T> inline Cx<T> special_mul(Cx<T> v, Cx<T> w) {
  return kFwd ? Cx<T>{v.r * w.r + v.i * w.i, v.i * w.r - v.r * w.i}
              : Cx<T>{v.r * w.r - v.i * w.i, v.r * w.i + v.i * w.r};
}

/// a times -i (forward) or +i (backward).
template <bool kFwd, class T> inline void rot90(Cx<T>& a) {
  a = kFwd ? Cx<T>{a.i, -a.r} : Cx<T>{-a.i, a.r};
}

/// pocketfft's factors of n (4s first, a 2 at the front, then odd factors); empty when n has a
/// factor 8 or a prime factor above 5, which this emulation does not cover.
inline std::vector<int64_t> factors(int64_t n) {
  std::vector<int64_t> f;
  if (n % 8 == 0) return {};
  while (n % 4 == 0) f.push_back(4), n /= 4;
  if (n % 2 == 0) {
    n /= 2;
    f.push_back(2);
    std::swap(f.front(), f.back());
  }
  for (int64_t d = 3; d <= 5; d += 2)
    while (n % d == 0) f.push_back(d), n /= d;
  if (n > 1) return {};
  return f;
}

/// One plan: the factors and, per factor, its twiddles (rounded to T from long double).
template <class T> class Plan {
 public:
  explicit Plan(int64_t n) : n_(n), factors_(factors(n)) {
    int64_t l1 = 1;
    for (int64_t ip : factors_) {
      const int64_t ido = n / (l1 * ip);
      std::vector<Cx<T>> tw(size_t((ip - 1) * (ido - 1)));
      for (int64_t j = 1; j < ip; ++j)
        for (int64_t i = 1; i < ido; ++i) {
          const long double a = 2.0L * 3.141592653589793238462643383279503L * (j * l1 * i) / n;
          tw[size_t((j - 1) * (ido - 1) + i - 1)] = {T(std::cos(a)), T(std::sin(a))};
        }
      twiddles_.push_back(std::move(tw));
      l1 *= ip;
    }
  }

  /// Whether n factors into 2, 3, 4 and 5 (n = 1 included).
  bool covered() const { return n_ == 1 || !factors_.empty(); }

  /// Transforms c (n values) in place, then scales by fct.
  template <bool kFwd> void run(Cx<T>* c, T fct) const {
    if (n_ == 1) {
      c[0] = c[0] * fct;
      return;
    }
    std::vector<Cx<T>> ch(static_cast<size_t>(n_));
    Cx<T>*p1 = c, *p2 = ch.data();
    int64_t l1 = 1;
    for (size_t k = 0; k < factors_.size(); ++k) {
      const int64_t ip = factors_[k], ido = n_ / (l1 * ip);
      const Cx<T>* wa = twiddles_[k].data();
      if (ip == 2) pass2<kFwd>(ido, l1, p1, p2, wa);
      else if (ip == 3) pass3<kFwd>(ido, l1, p1, p2, wa);
      else if (ip == 4) pass4<kFwd>(ido, l1, p1, p2, wa);
      else pass5<kFwd>(ido, l1, p1, p2, wa);
      std::swap(p1, p2);
      l1 *= ip;
    }
    if (p1 != c) {
      for (int64_t i = 0; i < n_; ++i) c[i] = fct != T(1) ? p1[i] * fct : p1[i];
    } else if (fct != T(1)) {
      for (int64_t i = 0; i < n_; ++i) c[i] = c[i] * fct;
    }
  }

 private:
  // CC(a, b, c) = cc[a + ido * (b + cdim * c)], CH(a, b, c) = ch[a + ido * (b + l1 * c)],
  // WA(x, i) = wa[i - 1 + x * (ido - 1)], as in pocketfft.
  template <bool kFwd> static void pass2(int64_t ido, int64_t l1, const Cx<T>* cc, Cx<T>* ch, const Cx<T>* wa) {
    for (int64_t k = 0; k < l1; ++k)
      for (int64_t i = 0; i < ido; ++i) {
        const Cx<T> a = cc[i + ido * (0 + 2 * k)], b = cc[i + ido * (1 + 2 * k)];
        ch[i + ido * (k + l1 * 0)] = a + b;
        ch[i + ido * (k + l1 * 1)] = i == 0 ? a - b : special_mul<kFwd>(a - b, wa[i - 1]);
      }
  }

  template <bool kFwd> static void pass3(int64_t ido, int64_t l1, const Cx<T>* cc, Cx<T>* ch, const Cx<T>* wa) {
    const T tw1r = T(-0.5), tw1i = (kFwd ? -1 : 1) * T(0.8660254037844386467637231707529362L);
    for (int64_t k = 0; k < l1; ++k)
      for (int64_t i = 0; i < ido; ++i) {
        auto CC = [&](int64_t b) { return cc[i + ido * (b + 3 * k)]; };
        auto CH = [&](int64_t c) -> Cx<T>& { return ch[i + ido * (k + l1 * c)]; };
        const Cx<T> t0 = CC(0);
        Cx<T> t1, t2;
        pm(t1, t2, CC(1), CC(2));
        CH(0) = t0 + t1;
        const Cx<T> ca = t0 + t1 * tw1r, cb{-t2.i * tw1i, t2.r * tw1i};
        if (i == 0) {
          pm(CH(1), CH(2), ca, cb);
        } else {
          CH(1) = special_mul<kFwd>(ca + cb, wa[i - 1]);
          CH(2) = special_mul<kFwd>(ca - cb, wa[i - 1 + (ido - 1)]);
        }
      }
  }

  template <bool kFwd> static void pass4(int64_t ido, int64_t l1, const Cx<T>* cc, Cx<T>* ch, const Cx<T>* wa) {
    for (int64_t k = 0; k < l1; ++k)
      for (int64_t i = 0; i < ido; ++i) {
        auto CC = [&](int64_t b) { return cc[i + ido * (b + 4 * k)]; };
        auto CH = [&](int64_t c) -> Cx<T>& { return ch[i + ido * (k + l1 * c)]; };
        Cx<T> t1, t2, t3, t4;
        pm(t2, t1, CC(0), CC(2));
        pm(t3, t4, CC(1), CC(3));
        rot90<kFwd>(t4);
        if (i == 0) {
          pm(CH(0), CH(2), t2, t3);
          pm(CH(1), CH(3), t1, t4);
        } else {
          CH(0) = t2 + t3;
          CH(1) = special_mul<kFwd>(t1 + t4, wa[i - 1]);
          CH(2) = special_mul<kFwd>(t2 - t3, wa[i - 1 + (ido - 1)]);
          CH(3) = special_mul<kFwd>(t1 - t4, wa[i - 1 + 2 * (ido - 1)]);
        }
      }
  }

  template <bool kFwd> static void pass5(int64_t ido, int64_t l1, const Cx<T>* cc, Cx<T>* ch, const Cx<T>* wa) {
    const T s = kFwd ? T(-1) : T(1);
    const T tw1r = T(0.3090169943749474241022934171828191L), tw1i = s * T(0.9510565162951535721164393333793821L);
    const T tw2r = T(-0.8090169943749474241022934171828191L), tw2i = s * T(0.5877852522924731291687059546390728L);
    for (int64_t k = 0; k < l1; ++k)
      for (int64_t i = 0; i < ido; ++i) {
        auto CC = [&](int64_t b) { return cc[i + ido * (b + 5 * k)]; };
        auto CH = [&](int64_t c) -> Cx<T>& { return ch[i + ido * (k + l1 * c)]; };
        const Cx<T> t0 = CC(0);
        Cx<T> t1, t2, t3, t4;
        pm(t1, t4, CC(1), CC(4));
        pm(t2, t3, CC(2), CC(3));
        CH(0).r = t0.r + t1.r + t2.r;
        CH(0).i = t0.i + t1.i + t2.i;
        // the pairs (1, 4) and (2, 3): twar, twbr, twai, twbi as pocketfft's PARTSTEP5 takes them
        const T tw[2][4] = {{tw1r, tw2r, tw1i, tw2i}, {tw2r, tw1r, tw2i, -tw1i}};
        const int64_t outs[2][2] = {{1, 4}, {2, 3}};
        for (int p = 0; p < 2; ++p) {
          Cx<T> ca, cb;
          ca.r = t0.r + tw[p][0] * t1.r + tw[p][1] * t2.r;
          ca.i = t0.i + tw[p][0] * t1.i + tw[p][1] * t2.i;
          cb.i = tw[p][2] * t4.r + tw[p][3] * t3.r;
          cb.r = -(tw[p][2] * t4.i + tw[p][3] * t3.i);
          if (i == 0) {
            pm(CH(outs[p][0]), CH(outs[p][1]), ca, cb);
          } else {
            CH(outs[p][0]) = special_mul<kFwd>(ca + cb, wa[i - 1 + (outs[p][0] - 1) * (ido - 1)]);
            CH(outs[p][1]) = special_mul<kFwd>(ca - cb, wa[i - 1 + (outs[p][1] - 1) * (ido - 1)]);
          }
        }
      }
  }

  int64_t n_;
  std::vector<int64_t> factors_;
  std::vector<std::vector<Cx<T>>> twiddles_;
};

}  // namespace fft
}  // namespace opforge_cpu

#pragma GCC pop_options
