// Fused Rprop step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.rprop's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad
//   f = etaplus if g * prev > 0, etaminus if < 0, 1 if == 0
//   step_size = clamp(step_size * f, step_size_min, step_size_max)
//   g = 0 where f == etaminus
//   p += -sign(g) * step_size;  prev = g
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

void rpropKernel(
    at::TensorList params, at::TensorList grads, at::TensorList prevs, at::TensorList stepSizes,
    at::TensorList steps, double stepSizeMin, double stepSizeMax, double etaminus, double etaplus,
    bool maximize) {
  const char* op = "rprop_";
  checkTensorLists(op, params, {{"grads", grads}, {"prevs", prevs}, {"step_sizes", stepSizes}});
  startStep(op, params, steps);
  forEachElement<4>(op, {params, grads, prevs, stepSizes}, [=](const NoScalars&, auto& x) {
    using V = vec_of<decltype(x)>;
    using T = scalar_of<V>;
    V g = gradient(x[1], x[0], maximize, 0.0);
    const V zero(T(0));
    const V minus = cst<V>(etaminus);
    const V prod = g * x[2];
    // sign(prod) mapped to the factors; NaN stays NaN, as torch's masked assignments leave it.
    const V f = select(prod > zero, cst<V>(etaplus), select(prod < zero, minus, select(prod == zero, V(T(1)), prod)));
    x[3] = vmin(vmax(x[3] * f, cst<V>(stepSizeMin)), cst<V>(stepSizeMax));
    g = select(f == minus, zero, g);
    x[0] = x[0] + cst<V>(-1) * sign(g) * x[3];
    x[2] = g;
  });
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(rprop_, rpropKernel)

}  // namespace gilfree_optim
