// Shared machinery of the fused CPU optimizer steps (ops gilfree_optim::*_, schemas in
// ops.cpp; one file per optimizer holds only its per-element math).
//
// An optimizer step is a memory-bound stream over K arrays per parameter: the parameter
// (stream 0, written), its gradient (stream 1, read only) and its state (streams 2..K-1,
// written). This header
//   * checks the lists (lengths, dtypes, devices, shapes, layouts) before anything is
//     mutated, with errors that name the op, the list and the index;
//   * increments each parameter's own `step` tensor and hands its value to the op, which
//     computes its per-tensor scalars (bias corrections...) once per tensor;
//   * cuts the concatenation of all tensors into units of kUnit elements and splits the
//     units evenly with at::parallel_for (all intra-op threads), so 400 small tensors
//     are balanced as well as one large one;
//   * runs the op's body over each piece with at::vec::Vectorized and a scalar tail:
//     the body is one generic lambda, called with V = Vectorized<T> or V = T;
//   * dispatches on the parameters' dtype: float and double run in their own precision,
//     bfloat16 and float16 are converted to float in blocks, updated with float math and
//     stored back (as torch's fused kernels do).
//
// Public torch APIs only, except at::vec::Vectorized / at::vec::convert (ATen's CPU
// vector headers; checked on torch 2.11 and 2.13). This file is compiled without
// CPU-specific flags, so Vectorized is ATen's portable implementation (plain arrays the
// compiler vectorizes for the baseline instruction set).
#pragma once

// The kernels' loops are only fast when the compiler turns ATen's portable Vectorized
// (arrays of T) into vector instructions: -O3 vectorizes them, and without math errno
// std::sqrt (Vectorized::sqrt's element function) becomes an inline vector square root
// instead of a libm call per element (nothing here reads errno). GCC only; set before any
// include so that the inline functions these files instantiate get the same options.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "no-math-errno")
#endif

#include <ATen/ATen.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <c10/util/irange.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <initializer_list>
#include <string>
#include <type_traits>
#include <vector>

namespace gilfree_optim {

using at::vec::Vectorized;

// ---------------------------------------------------------------------------------------
// Math helpers that read the same for V = T (float, double) and V = Vectorized<T>.

template <class V>
struct ScalarOf {
  using type = V;
};
template <class T>
struct ScalarOf<Vectorized<T>> {
  using type = T;
};
template <class V>
using scalar_of = typename ScalarOf<V>::type;

// A hyperparameter (held as double, like a Python float) in the math type: cast first,
// as torch casts a Python scalar to the tensor's opmath type.
template <class V>
inline V cst(double x) {
  return V(static_cast<scalar_of<V>>(x));
}

template <class T>
inline T vsqrt(T x) {
  return std::sqrt(x);
}
template <class T>
inline Vectorized<T> vsqrt(const Vectorized<T>& x) {
  return x.sqrt();
}

template <class T>
inline T vabs(T x) {
  return std::abs(x);
}
template <class T>
inline Vectorized<T> vabs(const Vectorized<T>& x) {
  return x.abs();
}

// Maximum that propagates NaN (torch.maximum).
template <class T>
inline T vmax(T a, T b) {
  return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : std::max(a, b);
}
template <class T>
inline Vectorized<T> vmax(const Vectorized<T>& a, const Vectorized<T>& b) {
  return at::vec::maximum(a, b);
}

// Minimum that propagates NaN (torch.minimum).
template <class T>
inline T vmin(T a, T b) {
  return (a != a || b != b) ? std::numeric_limits<T>::quiet_NaN() : std::min(a, b);
}
template <class T>
inline Vectorized<T> vmin(const Vectorized<T>& a, const Vectorized<T>& b) {
  return at::vec::minimum(a, b);
}

// where(mask, a, b): mask is a bool for scalars and the result of a comparison (all bits
// set where true) for vectors.
template <class T>
inline T select(bool mask, T a, T b) {
  return mask ? a : b;
}
template <class T>
inline Vectorized<T> select(const Vectorized<T>& mask, const Vectorized<T>& a, const Vectorized<T>& b) {
  return Vectorized<T>::blendv(b, a, mask);
}

// torch.lerp(self, end, weight) with a scalar weight, computed as torch's CPU kernel does.
template <class V>
inline V lerp(const V& self, const V& end, double weight) {
  using T = scalar_of<V>;
  const T w = static_cast<T>(weight);
  if (std::abs(w) < T(0.5)) {
    return self + V(w) * (end - self);
  }
  return end - (end - self) * V(T(1) - w);
}

// torch.sign: 1, -1 or 0 (NaN stays NaN).
template <class V>
inline V sign(const V& x) {
  using T = scalar_of<V>;
  const V zero(T(0));
  return select(x > zero, V(T(1)), select(x < zero, V(T(-1)), x * zero));
}

// ---------------------------------------------------------------------------------------
// Checks (run by the CPU kernel and the meta kernel before anything is mutated).

struct NamedList {
  const char* name;
  at::TensorList tensors;
};

// `params` and every list of `others` (gradients and state, one tensor per parameter):
// same length; each tensor dense and strided, with the parameter's dtype, device and
// shape; parameters and state non-overlapping and dense with the parameter's strides
// (gradients may have other strides: they are copied). Floating dtypes only.
// `optional` lists may also be empty (a flag turned the state off).
void checkTensorLists(
    const char* op,
    at::TensorList params,
    std::initializer_list<NamedList> others,
    std::initializer_list<NamedList> optional = {});

// `steps`: one 0-dim (or 1-element) float32/float64 counter per parameter, on the CPU
// (or meta, for the meta kernel).
void checkSteps(const char* op, at::TensorList params, at::TensorList steps, const char* name = "state_steps");

// Adds 1 to each step counter (in its own dtype, as torch's `step += 1`) and returns the
// new values as doubles.
std::vector<double> incrementSteps(at::TensorList steps);

// Reads a float32/float64 0-dim CPU tensor as a double.
double readScalar(const at::Tensor& t);
// Writes `value` into a float32/float64 0-dim CPU tensor (rounded to its dtype).
void writeScalar(const at::Tensor& t, double value);

// Raises unless all tensors of `params` are on the CPU (the kernels below are CPU only).
void checkCpu(const char* op, at::TensorList params);

// ---------------------------------------------------------------------------------------
// The elementwise loop.

// Elements per unit of work; a multiple of every Vectorized width.
constexpr int64_t kUnit = 64;
// Elements converted at once for reduced-precision parameters.
constexpr int64_t kBlock = 512;
// Smallest piece worth a thread (in units): below 32K elements the step runs on one thread.
constexpr int64_t kGrainUnits = (32 * 1024) / kUnit;

namespace detail {

// Runs body(s, x) over n elements of the K arrays `ptrs` (math type T == storage type).
template <int K, class T, class S, class Body>
inline void runContiguous(std::array<T*, K> ptrs, int64_t n, const S& s, const Body& body) {
  using V = Vectorized<T>;
  constexpr int64_t W = V::size();
  int64_t j = 0;
#if !defined(CPU_CAPABILITY_AVX2) && !defined(CPU_CAPABILITY_AVX512)
  // Built without CPU-specific flags, Vectorized is ATen's portable array type, which GCC
  // leaves mostly scalar (seen: sqrtss/divss in the object code). The same body over plain T,
  // in a loop the compiler may vectorize itself (no aliasing between the K arrays: each is a
  // different tensor), uses the baseline vector instructions instead.
  if constexpr (true) {
    T* __restrict__ q[K];
    for (int k = 0; k < K; ++k) {
      q[k] = ptrs[k];
    }
#pragma GCC ivdep
    for (int64_t e = 0; e < n; ++e) {
      std::array<T, K> x;
      for (int k = 0; k < K; ++k) {
        x[k] = q[k][e];
      }
      body(s, x);
      q[0][e] = x[0];
      for (int k = 2; k < K; ++k) {
        q[k][e] = x[k];
      }
    }
    return;
  }
#endif
  for (; j + W <= n; j += W) {
    std::array<V, K> x;
    for (int k = 0; k < K; ++k) {
      x[k] = V::loadu(ptrs[k] + j);
    }
    body(s, x);
    x[0].store(ptrs[0] + j);
    for (int k = 2; k < K; ++k) {
      x[k].store(ptrs[k] + j);
    }
  }
  for (; j < n; ++j) {
    std::array<T, K> x;
    for (int k = 0; k < K; ++k) {
      x[k] = ptrs[k][j];
    }
    body(s, x);
    ptrs[0][j] = x[0];
    for (int k = 2; k < K; ++k) {
      ptrs[k][j] = x[k];
    }
  }
}

// Same for reduced-precision storage: blocks are converted to float, updated, stored back.
template <int K, class scalar_t, class S, class Body>
inline void runConverted(std::array<scalar_t*, K> ptrs, int64_t n, const S& s, const Body& body) {
  alignas(64) float buf[K][kBlock];
  for (int64_t j = 0; j < n; j += kBlock) {
    const int64_t len = std::min(kBlock, n - j);
    std::array<float*, K> fptrs;
    for (int k = 0; k < K; ++k) {
      at::vec::convert(ptrs[k] + j, buf[k], len);
      fptrs[k] = buf[k];
    }
    runContiguous<K, float>(fptrs, len, s, body);
    at::vec::convert(buf[0], ptrs[0] + j, len);
    for (int k = 2; k < K; ++k) {
      at::vec::convert(buf[k], ptrs[k] + j, len);
    }
  }
}

template <class T>
struct Tag {
  using type = T;
};

// Calls fn(Tag<scalar_t>{}) for the four floating dtypes the steps support.
template <class Fn>
inline void dispatchFloating(const char* op, at::ScalarType dtype, const Fn& fn) {
  switch (dtype) {
    case at::kFloat:
      return fn(Tag<float>{});
    case at::kDouble:
      return fn(Tag<double>{});
    case at::kBFloat16:
      return fn(Tag<at::BFloat16>{});
    case at::kHalf:
      return fn(Tag<at::Half>{});
    default:
      TORCH_CHECK(false, "gilfree_optim::", op, ": unsupported dtype ", dtype);
  }
}

}  // namespace detail

// Applies `body` to every element of every parameter, in parallel.
//
// lists[0]: parameters (written), lists[1]: gradients (read), lists[2..]: state (written);
// all checked by checkTensorLists. perTensor[i]: the scalars of parameter i, passed to
// body as its first argument; the second is a std::array<V, K>& of the K values, which
// the body updates in place.
template <int K, class S, class Body>
void forEachElement(const char* op, std::array<at::TensorList, K> lists, const std::vector<S>& perTensor, const Body& body) {
  static_assert(K >= 2, "a step reads at least a parameter and a gradient");
  const int64_t n = static_cast<int64_t>(lists[0].size());
  if (n == 0) {
    return;
  }
  // Gradients with other strides than their parameter (non-contiguous views) are copied.
  std::vector<at::Tensor> gradCopies;
  std::vector<std::array<void*, K>> ptrs(n);
  std::vector<int64_t> unitStart(n + 1, 0);
  for (const auto i : c10::irange(n)) {
    const at::Tensor& p = lists[0][i];
    for (int k = 0; k < K; ++k) {
      const at::Tensor& t = lists[k][i];
      if (k == 1 && t.strides() != p.strides()) {
        gradCopies.push_back(at::empty_like(p).copy_(t));
        ptrs[i][k] = gradCopies.back().data_ptr();
      } else {
        ptrs[i][k] = t.data_ptr();
      }
    }
    unitStart[i + 1] = unitStart[i] + (p.numel() + kUnit - 1) / kUnit;
  }
  const int64_t totalUnits = unitStart[n];
  detail::dispatchFloating(op, lists[0][0].scalar_type(), [&](auto tag) {
    using scalar_t = typename decltype(tag)::type;
    using opmath_t = at::opmath_type<scalar_t>;
    at::parallel_for(0, totalUnits, kGrainUnits, [&](int64_t begin, int64_t end) {
      // The first tensor that holds unit `begin`.
      int64_t i = std::upper_bound(unitStart.begin(), unitStart.end(), begin) - unitStart.begin() - 1;
      for (; i < n && unitStart[i] < end; ++i) {
        const int64_t numel = lists[0][i].numel();
        const int64_t from = (std::max(begin, unitStart[i]) - unitStart[i]) * kUnit;
        const int64_t to = std::min((std::min(end, unitStart[i + 1]) - unitStart[i]) * kUnit, numel);
        if (to <= from) {
          continue;
        }
        std::array<scalar_t*, K> p;
        for (int k = 0; k < K; ++k) {
          p[k] = static_cast<scalar_t*>(ptrs[i][k]) + from;
        }
        if constexpr (std::is_same_v<scalar_t, opmath_t>) {
          detail::runContiguous<K, scalar_t>(p, to - from, perTensor[i], body);
        } else {
          detail::runConverted<K, scalar_t>(p, to - from, perTensor[i], body);
        }
      }
    });
  });
}

}  // namespace gilfree_optim
