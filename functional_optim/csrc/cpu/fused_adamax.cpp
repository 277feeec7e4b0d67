// Fused Adamax step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.adamax's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad;  g += wd * p
//   m = lerp(m, g, 1 - beta1)
//   u = max(u * beta2, |g| + eps)
//   p += -(lr / (1 - beta1^step)) * m / u
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

struct AdamaxScalars {
  double clr;
};

void adamaxKernel(
    at::TensorList params, at::TensorList grads, at::TensorList expAvgs, at::TensorList expInfs,
    at::TensorList steps, double lr, double beta1, double beta2, double eps, double weightDecay, bool maximize) {
  const char* op = "adamax_";
  checkTensorLists(op, params, {{"grads", grads}, {"exp_avgs", expAvgs}, {"exp_infs", expInfs}});
  const std::vector<double> stepValues = startStep(op, params, steps);
  std::vector<AdamaxScalars> scalars;
  for (const double step : stepValues) {
    scalars.push_back({lr / (1 - std::pow(beta1, step))});
  }
  forEachElement<4>(op, {params, grads, expAvgs, expInfs}, scalars, [=](const AdamaxScalars& s, auto& x) {
    using V = vec_of<decltype(x)>;
    const V g = gradient(x[1], x[0], maximize, weightDecay);
    x[2] = lerp(x[2], g, 1 - beta1);
    x[3] = vmax(x[3] * cst<V>(beta2), vabs(g) + cst<V>(eps));
    x[0] = x[0] + cst<V>(-s.clr) * (x[2] / x[3]);
  });
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(adamax_, adamaxKernel)

}  // namespace gilfree_optim
