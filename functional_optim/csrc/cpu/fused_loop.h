// The per-element machinery of the fused optimizer steps, compiled once per instruction
// set: every file under cpu/ is built several times, with -DCPU_CAPABILITY=DEFAULT, AVX2 or
// AVX512 (and the matching CPU_CAPABILITY_<ISA> define and compiler flags; setup.py and
// CMakeLists.txt), as ATen builds its native/cpu/ kernels. Everything here lives in
// `inline namespace CPU_CAPABILITY`, so each build's functions are distinct symbols; ATen's
// at::vec::Vectorized does the same, and picks its AVX2/AVX512 implementation from the
// CPU_CAPABILITY_<ISA> define (ATen's CPU vector headers; checked on torch 2.11 and 2.13).
//
// A step is a memory-bound stream over K arrays per parameter: the parameter (stream 0,
// written), its gradient (stream 1, read only) and its state (streams 2..K-1, written).
// forEachElement cuts the concatenation of all tensors into units of kUnit elements, splits
// the units evenly with at::parallel_for (all intra-op threads, so 400 small tensors are
// balanced as well as one large one) and runs the op's body over each piece: the body is
// one generic lambda, called with V = Vectorized<T> or V = T. float and double run in their
// own precision; bfloat16 and float16 are converted to float in blocks, updated with float
// math and stored back (as torch's fused kernels do).
//
// What the kernels assume, checked before anything changes (checkTensorLists, fused_optim.cpp:
// a RuntimeError naming the list and index otherwise): every parameter dense (no gaps, no
// overlaps), its gradient and state tensors of its shape, dtype, device and strides, since one
// flat index walks them all; float32/float64/bfloat16/float16 (an empty parameter: nothing to walk).
// The group step (group_step.cpp, groupStepProxies) hands them any other parameter as dense
// copies, so that every layout torch.optim takes reaches a kernel in one it takes.
//
// Each file ends with GILFREE_FUSED_OP(name, kernel): every build puts its kernel in
// kernelTable (fused_optim.h); the DEFAULT build also registers the op's CPU kernel
// (IsaDispatch, which calls the active build) and its Meta kernel with the dispatcher.
#pragma once

#if !defined(CPU_CAPABILITY)
#error "functional_optim/csrc/cpu/*.cpp are compiled once per instruction set, with -DCPU_CAPABILITY=<DEFAULT|AVX2|AVX512> (see setup.py)"
#endif

#include "fused_optim.h"

#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/cpu/vec/vec.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {

using at::vec::Vectorized;

#if defined(CPU_CAPABILITY_AVX512)
constexpr Isa kThisIsa = kIsaAvx512;
#elif defined(CPU_CAPABILITY_AVX2)
constexpr Isa kThisIsa = kIsaAvx2;
#else
constexpr Isa kThisIsa = kIsaDefault;
#endif

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

// Whether V is a plain number (the scalar tail, the DEFAULT build's loop) or a vector.
template <class V>
constexpr bool kIsScalar = std::is_same_v<V, scalar_of<V>>;

template <class V>
inline V vsqrt(const V& x) {
  if constexpr (kIsScalar<V>) {
    return std::sqrt(x);
  } else {
    return x.sqrt();
  }
}

template <class V>
inline V vabs(const V& x) {
  if constexpr (kIsScalar<V>) {
    return std::abs(x);
  } else {
    return x.abs();
  }
}

// torch.maximum / torch.minimum: NaN when either argument is NaN.
template <class V>
inline V vmax(const V& a, const V& b) {
  if constexpr (kIsScalar<V>) {
    return (a != a || b != b) ? std::numeric_limits<V>::quiet_NaN() : std::max(a, b);
  } else {
    return at::vec::maximum(a, b);
  }
}
template <class V>
inline V vmin(const V& a, const V& b) {
  if constexpr (kIsScalar<V>) {
    return (a != a || b != b) ? std::numeric_limits<V>::quiet_NaN() : std::min(a, b);
  } else {
    return at::vec::minimum(a, b);
  }
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

// Loads (stores) a number or a vector at `p`.
template <class V, class T>
inline V loadAt(const T* p) {
  if constexpr (kIsScalar<V>) {
    return *p;
  } else {
    return V::loadu(p);
  }
}
template <class V, class T>
inline void storeAt(const V& v, T* p) {
  if constexpr (kIsScalar<V>) {
    *p = v;
  } else {
    v.store(p);
  }
}
// The per-tensor scalars of the steps that have none.
struct NoScalars {};

// The vector type of a body's argument `x` (a std::array<V, K>&).
template <class X>
using vec_of = typename std::decay_t<X>::value_type;

// The gradient as the step uses it: negated when maximizing, plus L2 weight decay
// (g += wd * p, torch's `grad.add(param, alpha=weight_decay)`).
template <class V>
inline V gradient(const V& grad, const V& param, bool maximize, double weightDecay) {
  V g = maximize ? V(scalar_of<V>(0)) - grad : grad;
  if (weightDecay != 0) {
    g = g + cst<V>(weightDecay) * param;
  }
  return g;
}

// The gradient for the optimizers with a decoupled_weight_decay flag (AdamW-style: the
// parameter shrinks by 1 - lr * wd; otherwise L2 weight decay into the gradient).
template <class V>
inline V decayedGradient(V& param, const V& grad, bool maximize, double lr, double weightDecay, bool decoupled) {
  if (decoupled) {
    if (weightDecay != 0) {
      param = param * cst<V>(1 - lr * weightDecay);
    }
    return gradient(grad, param, maximize, 0.0);
  }
  return gradient(grad, param, maximize, weightDecay);
}

// Adam's moments: m = lerp(m, g, 1 - beta1); v = v * beta2 + (1 - beta2) * g * g.
template <class V>
inline void adamMoments(V& m, V& v, const V& g, double beta1, double beta2) {
  m = lerp(m, g, 1 - beta1);
  v = v * cst<V>(beta2) + cst<V>(1 - beta2) * g * g;
}

// ---------------------------------------------------------------------------------------
// The elementwise loop.

// Elements per unit of work; a multiple of every Vectorized width.
constexpr int64_t kUnit = 64;
// Elements converted at once for reduced-precision parameters.
constexpr int64_t kBlock = 512;
// Smallest piece worth a thread (in units): below 32K elements the step runs on one thread.
constexpr int64_t kGrainUnits = (32 * 1024) / kUnit;

namespace detail {

// Loads element (or vector) j of the K arrays, runs body(s, x) and stores the parameter
// and the state back (the gradient, stream 1, is read only).
template <class V, int K, class P, class S, class Body>
inline void stepAt(P* ptrs, int64_t j, const S& s, const Body& body) {
  std::array<V, K> x;
  for (int k = 0; k < K; ++k) {
    x[k] = loadAt<V>(ptrs[k] + j);
  }
  body(s, x);
  for (int k = 0; k < K; ++k) {
    if (k != 1) {
      storeAt(x[k], ptrs[k] + j);
    }
  }
}

// Runs body(s, x) over n elements of the K arrays `ptrs` (math type T == storage type).
//
// `s` and `body` (whose captures are the step's hyperparameters) are taken by value: the
// loop then reads local copies that no pointer reaches. Read through references, they
// could be changed by the loop's stores (the vector store intrinsics may alias anything),
// and the compiler reloaded, converted to T and broadcast every hyperparameter, and
// re-tested every option, once per vector (seen in the AVX512 object code of Adam: about
// 25 extra instructions per 16 floats, a few percent of a step at the bandwidth floor on
// one thread and more where the data sits in cache). With copies these leave the loop.
template <int K, class T, class S, class Body>
inline void runContiguous(std::array<T*, K> ptrs, int64_t n, const S s, const Body body) {
#if defined(CPU_CAPABILITY_DEFAULT)
  // Without CPU-specific flags Vectorized is ATen's portable array type, which GCC leaves
  // mostly scalar (seen: sqrtss/divss in the object code). The same body over plain T, in a
  // loop the compiler vectorizes itself (no aliasing between the K arrays: each is a
  // different tensor), uses the baseline vector instructions instead.
  T* __restrict__ q[K];
  for (int k = 0; k < K; ++k) {
    q[k] = ptrs[k];
  }
#pragma GCC ivdep
  for (int64_t j = 0; j < n; ++j) {
    stepAt<T, K>(q, j, s, body);
  }
#else
  using V = Vectorized<T>;
  constexpr int64_t W = V::size();
  int64_t j = 0;
  for (; j + W <= n; j += W) {
    stepAt<V, K>(ptrs.data(), j, s, body);
  }
  for (; j < n; ++j) {
    stepAt<T, K>(ptrs.data(), j, s, body);
  }
#endif
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
// the body updates in place. Does nothing on the meta device.
template <int K, class S, class Body>
void forEachElement(const char* op, std::array<at::TensorList, K> lists, const std::vector<S>& perTensor, const Body& body) {
  static_assert(K >= 2, "a step reads at least a parameter and a gradient");
  const int64_t n = static_cast<int64_t>(lists[0].size());
  if (n == 0 || isMeta(lists[0])) {
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

// The same for a step without per-tensor scalars (body(NoScalars, x)).
template <int K, class Body>
void forEachElement(const char* op, std::array<at::TensorList, K> lists, const Body& body) {
  forEachElement<K>(op, lists, std::vector<NoScalars>(lists[0].size()), body);
}

// Puts this build's CPU kernel `fn` for op `Op` into the table IsaDispatch reads.
template <class Op, class R, class... A>
inline bool addKernel(R (*fn)(A...)) {
  kernelTable<Op, R(A...)>[kThisIsa] = fn;
  addBuild(kThisIsa);
  return true;
}

}  // namespace CPU_CAPABILITY
}  // namespace gilfree_optim

// The op `name` (its schema is in ops.cpp), whose `kernel` serves the CPU and the meta
// device alike (it stops after its checks on meta: startStep): this build's kernel goes
// into the table; the DEFAULT build registers the dispatching CPU kernel and the Meta
// kernel. Use at namespace gilfree_optim scope.
#define GILFREE_FUSED_OP(name, kernel)                                                          \
  struct name##Op;                                                                             \
  [[maybe_unused]] static const bool name##Added = CPU_CAPABILITY::addKernel<name##Op>(&kernel); \
  GILFREE_FUSED_REGISTER_(name, kernel)

#if defined(CPU_CAPABILITY_DEFAULT)
#define GILFREE_FUSED_REGISTER_(name, kernel)                                                           \
  TORCH_LIBRARY_IMPL(gilfree_optim, CPU, m) {                                                          \
    m.impl(#name, TORCH_FN((IsaDispatch<name##Op, std::remove_pointer_t<decltype(&kernel)>>::call))); \
  }                                                                                                    \
  TORCH_LIBRARY_IMPL(gilfree_optim, Meta, m) {                                                         \
    m.impl(#name, TORCH_FN(kernel));                                                                   \
  }
#else
#define GILFREE_FUSED_REGISTER_(name, kernel)
#endif
