// The element-wise end of Adafactor's update (its group step: steps/adafactor.cpp), compiled
// once per instruction set like the fused steps (fused_loop.h). Not an op: the group step calls
// the active build through kernelTable (IsaDispatch<AdafactorUpdateOp, ...>).
//
// torch's (torch/optim/_adafactor.py, torch 2.13), for a parameter of two or more dimensions,
//   update = (row_var @ col_var).div_(divisor).clamp_(min=floor).rsqrt_().mul_(grad)
// (the product's inner dimension is 1: update[.., i, j] = row_var[.., i] * col_var[.., j]), and
// for one of fewer
//   update = variance.clone().clamp_(min=floor).rsqrt_().mul_(grad),
// in one pass over the gradient instead of five over the update. Each element takes the IEEE
// operations of ATen's float32 and float64 CPU kernels in their order (rsqrt is 1 / sqrt in
// ATen's vector and scalar code alike; clamp keeps NaN), so the bits are torch's. `grad` is
// negated first when `negate` (torch's maximize). float32 and float64 only: ATen's
// reduced-precision kernels round between their steps, not alike in their vector and scalar
// code, so the group step keeps the ATen ops for those.
#include "fused_loop.h"

namespace gilfree_optim {

struct AdafactorUpdateOp;  // the kernel's tag in kernelTable (fused_optim.h)

inline namespace CPU_CAPABILITY {
namespace {

// Elements per piece of work (smaller updates run on one thread).
constexpr int64_t kUpdateGrain = 32 * 1024;

// out[j] = (1 / sqrt(max(x, lo))) * (sign * g[j]) for x = (r * c[j]) / d (factored) or x = r[j].
template <bool kFactored, class T>
inline void updateRun(T* out, const T* g, const T* c, T r, const T* rs, T d, T lo, T sign, int64_t n) {
  auto element = [&](auto x, auto gj) {
    using V = decltype(x);
    x = select(x < V(lo), V(lo), x);
    x = V(T(1)) / vsqrt(x);
    return x * (V(sign) * gj);
  };
  int64_t j = 0;
#if !defined(CPU_CAPABILITY_DEFAULT)
  using V = Vectorized<T>;
  for (; j + V::size() <= n; j += V::size()) {
    V x = kFactored ? (V(r) * V::loadu(c + j)) / V(d) : V::loadu(rs + j);
    element(x, V::loadu(g + j)).store(out + j);
  }
#endif
  for (; j < n; ++j) {  // (DEFAULT: the compiler vectorizes this loop with the baseline's instructions)
    const T x = kFactored ? (r * c[j]) / d : rs[j];
    out[j] = element(x, g[j]);
  }
}

template <class T>
void update(const at::Tensor& out, const at::Tensor& grad, const at::Tensor& rowVar, const at::Tensor& colVar,
            const at::Tensor& divisor, double floor, bool negate) {
  const T* g = grad.data_ptr<T>();
  const T* r = rowVar.data_ptr<T>();
  T* o = out.data_ptr<T>();
  const T lo = static_cast<T>(floor);  // as clamp_ casts its Scalar
  const T sign = negate ? T(-1) : T(1);
  if (!colVar.defined()) {
    at::parallel_for(0, grad.numel(), kUpdateGrain, [&](int64_t begin, int64_t end) {
      updateRun<false, T>(o + begin, g + begin, nullptr, T(0), r + begin, T(1), lo, sign, end - begin);
    });
    return;
  }
  const T* c = colVar.data_ptr<T>();
  const T* d = divisor.data_ptr<T>();
  const int64_t cols = grad.size(-1), rows = grad.size(-2);
  at::parallel_for(0, grad.numel() / cols, std::max<int64_t>(1, kUpdateGrain / cols), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const int64_t matrix = row / rows;
      updateRun<true, T>(o + row * cols, g + row * cols, c + matrix * cols, r[row], nullptr, d[matrix], lo, sign,
                         cols);
    }
  });
}

// All tensors contiguous, on the CPU, of one dtype (float32 or float64), checked by the caller:
// `out`, `grad` of the parameter's shape; `rowVar` its row factor (shape [..., n, 1]) or, with
// `colVar` undefined, its variance (its shape); `colVar` [..., 1, m]; `divisor` [..., 1, 1].
void adafactorUpdate(const at::Tensor& out, const at::Tensor& grad, const at::Tensor& rowVar, const at::Tensor& colVar,
                     const at::Tensor& divisor, double floor, bool negate) {
  if (grad.numel() == 0) {
    return;
  }
  if (grad.scalar_type() == at::kDouble) {
    update<double>(out, grad, rowVar, colVar, divisor, floor, negate);
  } else {
    update<float>(out, grad, rowVar, colVar, divisor, floor, negate);
  }
}

}  // namespace

[[maybe_unused]] const bool adafactorUpdateAdded = addKernel<AdafactorUpdateOp>(&adafactorUpdate);

}  // namespace CPU_CAPABILITY
}  // namespace gilfree_optim
