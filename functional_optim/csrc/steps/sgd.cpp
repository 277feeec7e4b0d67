// SGD's group step: torch's fused kernel for dense gradients (one call per device and dtype,
// new momentum buffers started apart); torch.optim's single-tensor code, its sparse COO
// gradients stepped by the fused sparse kernel where it can, for a group with any sparse
// gradient (torch/optim/sgd.py, torch 2.13), and for bfloat16/float16 CPU parameters (see
// sgdFusedKernelTakes). torch's kernel walks a call's tensors by one flat index (the group
// step routes parameters of other layouts through copies: OptimizerDef::anyLayout).
#include "group_step.h"

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace sgd_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues& v) {
  if (v.get("momentum") != 0) {
    return {"momentum_buffer"};
  }
  return {};
}

// The buffer is written by the first step (buf = the gradient used), as torch starts it.
std::vector<at::Tensor> create(const at::Tensor&, const at::Tensor& grad, const GroupValues& v) {
  if (v.get("momentum") != 0) {
    return {at::empty_like(grad)};
  }
  return {};
}

// torch's fused kernel, for the parameters at `part` (one device and dtype).
void fused(Group& g, const GroupValues& v, const Positions& part) {
  const double lr = v.get("lr"), momentum = v.get("momentum"), dampening = v.get("dampening");
  const double weightDecay = v.get("weight_decay");
  const bool nesterov = v.flag("nesterov"), maximize = v.flag("maximize");
  {
    inPieces(g.params, part, [&](const Positions& piece) {
      if (momentum == 0) {
        at::_fused_sgd_(take(g.params, piece), take(g.grads, piece), {}, weightDecay, momentum, lr, dampening,
                        nesterov, maximize, false);
        return;
      }
      // the kernel starts every buffer of a call (buf = grad) when is_first_step: new buffers
      // in one call, the others in another
      for (const bool first : {true, false}) {
        Positions these;
        for (size_t k : piece) {
          if (g.fresh[k] == first) {
            these.push_back(k);
          }
        }
        if (!these.empty()) {
          at::_fused_sgd_(take(g.params, these), take(g.grads, these), g.column(0, these), weightDecay, momentum,
                          lr, dampening, nesterov, maximize, first);
        }
      }
    });
  }
}

// torch.optim's single-tensor code, for the parameters at `positions`.
void single(Group& g, const GroupValues& v, const Positions& positions) {
  const double lr = v.get("lr"), momentum = v.get("momentum"), dampening = v.get("dampening");
  const double weightDecay = v.get("weight_decay");
  const bool nesterov = v.flag("nesterov"), maximize = v.flag("maximize");
  static const auto sparseOp = kernel<void(L, L, double, bool)>("gilfree_optim::sparse_sgd_");
  for (size_t k : positions) {
    auto param = g.params[k];
    if (g.grads[k].is_sparse() && momentum == 0 && weightDecay == 0 && sparseKernelUsable(param)) {
      sparseOp.call({param}, {g.grads[k]}, lr, maximize);  // only the rows present
      continue;
    }
    at::Tensor grad = maximize ? g.grads[k].neg() : g.grads[k];
    if (weightDecay != 0) {
      grad = grad.add(param, weightDecay);
    }
    if (momentum != 0) {
      auto buf = g.state[k][0];
      if (g.fresh[k]) {
        buf.copy_(grad);  // torch: buf = clone(grad)
      } else {
        buf.mul_(number(momentum));  // torch: buf.mul_(momentum), a Python float (mul_.Tensor)
        grad.is_sparse() ? addSparseInto(buf, grad, 1 - dampening) : void(buf.add_(grad, 1 - dampening));
      }
      grad = nesterov ? grad.add(buf, momentum) : buf;
    }
    grad.is_sparse() ? addSparseInto(param, grad, -lr) : void(param.add_(grad, -lr));
  }
}

// torch 2.13's _fused_sgd_ on the CPU leaves the elements of a bfloat16 or float16 tensor that
// its vectorized loop takes unchanged (only a tail shorter than a vector is stepped: a
// 64-element bfloat16 parameter does not move): those dtypes take the single-tensor code.
bool sgdFusedKernelTakes(const at::Tensor& param) {
  return !param.device().is_cpu() || (param.scalar_type() != at::kBFloat16 && param.scalar_type() != at::kHalf);
}

void step(Group& g, const GroupValues& v) {
  for (const auto& part : g.parts()) {
    if (g.sparse || !sgdFusedKernelTakes(g.params[part.front()])) {
      single(g, v, part);
    } else {
      fused(g, v, part);
    }
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("sgd", {keys, create, step, {"cpu", "cuda"}});

}  // namespace
}  // namespace sgd_step
}  // namespace gilfree_optim
