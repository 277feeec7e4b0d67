// Fused Adadelta step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.adadelta's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad;  g += wd * p
//   sq = sq * rho + (1 - rho) * g * g
//   delta = sqrt(acc + eps) / sqrt(sq + eps) * g
//   acc = acc * rho + (1 - rho) * delta * delta
//   p += -lr * delta
#include "fused_optim.h"

#include <torch/library.h>

namespace gilfree_optim {
namespace {

struct NoScalars {};

template <bool kMeta>
void adadeltaKernel(
    at::TensorList params, at::TensorList grads, at::TensorList squareAvgs, at::TensorList accDeltas,
    at::TensorList steps, double lr, double rho, double eps, double weightDecay, bool maximize) {
  const char* op = "adadelta_";
  checkTensorLists(op, params, {{"grads", grads}, {"square_avgs", squareAvgs}, {"acc_deltas", accDeltas}});
  checkSteps(op, params, steps);
  if constexpr (kMeta) {
    return;
  } else {
    checkCpu(op, params);
    incrementSteps(steps);
    const std::vector<NoScalars> scalars(params.size());
    forEachElement<4>(op, {params, grads, squareAvgs, accDeltas}, scalars, [=](const NoScalars&, auto& x) {
      using V = typename std::decay_t<decltype(x)>::value_type;
      V g = maximize ? V(0) - x[1] : x[1];
      if (weightDecay != 0) {
        g = g + cst<V>(weightDecay) * x[0];
      }
      x[2] = x[2] * cst<V>(rho) + cst<V>(1 - rho) * g * g;
      const V std = vsqrt(x[2] + cst<V>(eps));
      V delta = vsqrt(x[3] + cst<V>(eps));
      delta = delta / std * g;
      x[3] = x[3] * cst<V>(rho) + cst<V>(1 - rho) * delta * delta;
      x[0] = x[0] + cst<V>(-lr) * delta;
    });
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_optim, CPU, m) {
  m.impl("adadelta_", TORCH_FN(adadeltaKernel<false>));
}

TORCH_LIBRARY_IMPL(gilfree_optim, Meta, m) {
  m.impl("adadelta_", TORCH_FN(adadeltaKernel<true>));
}

}  // namespace gilfree_optim
