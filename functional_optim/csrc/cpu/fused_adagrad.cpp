// Fused Adagrad step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.adagrad's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad;  g += wd * p
//   sum += g * g
//   p += -clr * g / (sqrt(sum) + eps),   clr = lr / (1 + (step - 1) * lr_decay)
// (initial_accumulator_value is the state's initial value, set by the caller.)
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

struct AdagradScalars {
  double clr;
};

void adagradKernel(
    at::TensorList params, at::TensorList grads, at::TensorList stateSums, at::TensorList steps, double lr,
    double lrDecay, double weightDecay, double eps, bool maximize) {
  const char* op = "adagrad_";
  checkTensorLists(op, params, {{"grads", grads}, {"state_sums", stateSums}});
  const std::vector<double> stepValues = startStep(op, params, steps);
  std::vector<AdagradScalars> scalars;
  for (const double step : stepValues) {
    scalars.push_back({lr / (1 + (step - 1) * lrDecay)});
  }
  forEachElement<3>(op, {params, grads, stateSums}, scalars, [=](const AdagradScalars& s, auto& x) {
    using V = vec_of<decltype(x)>;
    const V g = gradient(x[1], x[0], maximize, weightDecay);
    x[2] = x[2] + cst<V>(1) * g * g;
    const V std = vsqrt(x[2]) + cst<V>(eps);
    x[0] = x[0] + cst<V>(-s.clr) * (g / std);
  });
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(adagrad_, adagradKernel)

}  // namespace gilfree_optim
