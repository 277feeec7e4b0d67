// Fused Adadelta step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.adadelta's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad;  g += wd * p
//   sq = sq * rho + (1 - rho) * g * g
//   delta = sqrt(acc + eps) / sqrt(sq + eps) * g
//   acc = acc * rho + (1 - rho) * delta * delta
//   p += -lr * delta
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

void adadeltaKernel(
    at::TensorList params, at::TensorList grads, at::TensorList squareAvgs, at::TensorList accDeltas,
    at::TensorList steps, double lr, double rho, double eps, double weightDecay, bool maximize) {
  const char* op = "adadelta_";
  checkTensorLists(op, params, {{"grads", grads}, {"square_avgs", squareAvgs}, {"acc_deltas", accDeltas}});
  startStep(op, params, steps);
  forEachElement<4>(op, {params, grads, squareAvgs, accDeltas}, [=](const NoScalars&, auto& x) {
    using V = vec_of<decltype(x)>;
    const V g = gradient(x[1], x[0], maximize, weightDecay);
    x[2] = x[2] * cst<V>(rho) + cst<V>(1 - rho) * g * g;
    const V std = vsqrt(x[2] + cst<V>(eps));
    V delta = vsqrt(x[3] + cst<V>(eps));
    delta = delta / std * g;
    x[3] = x[3] * cst<V>(rho) + cst<V>(1 - rho) * delta * delta;
    x[0] = x[0] + cst<V>(-lr) * delta;
  });
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(adadelta_, adadeltaKernel)

}  // namespace gilfree_optim
