// Fused Adagrad step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.adagrad's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad;  g += wd * p
//   sum += g * g
//   p += -clr * g / (sqrt(sum) + eps),   clr = lr / (1 + (step - 1) * lr_decay)
// (initial_accumulator_value is the state's initial value, set by the caller.)
#include "fused_optim.h"

#include <torch/library.h>

namespace gilfree_optim {
namespace {

struct AdagradScalars {
  double clr;
};

template <bool kMeta>
void adagradKernel(
    at::TensorList params, at::TensorList grads, at::TensorList stateSums, at::TensorList steps, double lr,
    double lrDecay, double weightDecay, double eps, bool maximize) {
  const char* op = "adagrad_";
  checkTensorLists(op, params, {{"grads", grads}, {"state_sums", stateSums}});
  checkSteps(op, params, steps);
  if constexpr (kMeta) {
    return;
  } else {
    checkCpu(op, params);
    std::vector<AdagradScalars> scalars;
    for (const double step : incrementSteps(steps)) {
      scalars.push_back({lr / (1 + (step - 1) * lrDecay)});
    }
    forEachElement<3>(op, {params, grads, stateSums}, scalars, [=](const AdagradScalars& s, auto& x) {
      using V = typename std::decay_t<decltype(x)>::value_type;
      V g = maximize ? V(0) - x[1] : x[1];
      if (weightDecay != 0) {
        g = g + cst<V>(weightDecay) * x[0];
      }
      x[2] = x[2] + cst<V>(1) * g * g;
      const V std = vsqrt(x[2]) + cst<V>(eps);
      x[0] = x[0] + cst<V>(-s.clr) * (g / std);
    });
  }
}

}  // namespace

TORCH_LIBRARY_IMPL(gilfree_optim, CPU, m) {
  m.impl("adagrad_", TORCH_FN(adagradKernel<false>));
}

TORCH_LIBRARY_IMPL(gilfree_optim, Meta, m) {
  m.impl("adagrad_", TORCH_FN(adagradKernel<true>));
}

}  // namespace gilfree_optim
