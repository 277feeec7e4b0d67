// Fused SGD step (schemas in ops.cpp; machinery in fused_optim.h).
//
// Per element, as torch.optim.sgd's single-tensor step (torch 2.13):
//   g = maximize ? -grad : grad;  g += wd * p
//   momentum != 0: buf = is_first_step ? g : buf * momentum + (1 - dampening) * g
//                  g = nesterov ? g + momentum * buf : buf
//   p += -lr * g
// SGD keeps no step counter; `is_first_step` says that the momentum buffers are new
// (torch creates them from the first gradient), as in torch._fused_sgd_.
#include "fused_loop.h"

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

void sgdKernel(
    at::TensorList params, at::TensorList grads, at::TensorList momentumBuffers, double lr,
    double weightDecay, double momentum, double dampening, bool nesterov, bool maximize,
    bool isFirstStep) {
  const char* op = "sgd_";
  checkTensorLists(op, params, {{"grads", grads}}, {{"momentum_buffers", momentumBuffers, momentum != 0, "momentum != 0"}});
  TORCH_CHECK(
      !nesterov || (momentum > 0 && dampening == 0), "gilfree_optim::", op,
      ": nesterov momentum requires a momentum and zero dampening");
  startStep(op, params);
  if (momentum == 0) {
    forEachElement<2>(op, {params, grads}, [=](const NoScalars&, auto& x) {
      using V = vec_of<decltype(x)>;
      const V g = gradient(x[1], x[0], maximize, weightDecay);
      x[0] = x[0] + cst<V>(-lr) * g;
    });
    return;
  }
  forEachElement<3>(op, {params, grads, momentumBuffers}, [=](const NoScalars&, auto& x) {
    using V = vec_of<decltype(x)>;
    V g = gradient(x[1], x[0], maximize, weightDecay);
    V& buf = x[2];
    if (isFirstStep) {
      buf = g;
    } else {
      buf = buf * cst<V>(momentum) + cst<V>(1 - dampening) * g;
    }
    if (nesterov) {
      g = g + cst<V>(momentum) * buf;
    } else {
      g = buf;
    }
    x[0] = x[0] + cst<V>(-lr) * g;
  });
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(sgd_, sgdKernel)

}  // namespace gilfree_optim
