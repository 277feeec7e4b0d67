// Adagrad's group step: torch's fused kernel for dense gradients; torch.optim's
// single-tensor code for a group with any sparse gradient, its sparse gradients stepped by
// the fused sparse kernel where it can (torch/optim/adagrad.py, torch 2.13). torch creates
// the state at construction (the callers do, with new_state). torch's fused kernel walks a
// call's tensors by one flat index (the group step routes parameters of other layouts
// through copies: OptimizerDef::anyLayout); the sparse path's dense += sparse goes through
// addSparseInto (a parameter or packed state tensor at a storage offset).
#include "group_step.h"

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace adagrad_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues&) {
  return {"step", "sum"};
}

// 'sum' from the values' initial_accumulator_value: torch's is its constructor's, whatever a
// param group says (functional_optim's op values carry the constructor's:
// GroupedState.constructor_values).
std::vector<at::Tensor> create(const at::Tensor& param, const at::Tensor&, const GroupValues& v) {
  return {newStep(param, v), like(param, v.get("initial_accumulator_value"))};
}

at::Tensor makeSparse(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& values) {
  return at::sparse_coo_tensor(indices, values, grad.sizes(), values.options().layout(at::kSparse));
}

void single(Group& g, const GroupValues& v) {
  const double lr = v.get("lr"), weightDecay = v.get("weight_decay"), lrDecay = v.get("lr_decay");
  const double eps = v.get("eps");
  const bool maximize = v.flag("maximize");
  static const auto sparseOp = kernel<void(L, L, L, L, double, double, double, bool)>("gilfree_optim::sparse_adagrad_");
  for (size_t k = 0; k < g.params.size(); ++k) {
    auto param = g.params[k];
    auto stepT = g.state[k][0];
    auto stateSum = g.state[k][1];
    if (g.grads[k].is_sparse() && weightDecay == 0 && sparseKernelUsable(param)) {
      sparseOp.call({param}, {g.grads[k]}, {stateSum}, {stepT}, lr, lrDecay, eps, maximize);  // it counts the step
      continue;
    }
    stepT.add_(1);
    const double step = stepT.item<double>();
    at::Tensor grad = maximize ? g.grads[k].neg() : g.grads[k];
    if (weightDecay != 0) {
      grad = grad.add(param, weightDecay);
    }
    const double clr = lr / (1 + (step - 1) * lrDecay);
    if (grad.is_sparse()) {
      grad = grad.coalesce();  // the update is non-linear so indices must be unique
      auto gradIndices = grad._indices();
      auto gradValues = grad._values();
      addSparseInto(stateSum, makeSparse(grad, gradIndices, gradValues.pow(2)));
      auto std = stateSum.sparse_mask(grad);
      auto stdValues = std._values().sqrt_().add_(eps);
      addSparseInto(param, makeSparse(grad, gradIndices, gradValues / stdValues), -clr);
    } else {
      stateSum.addcmul_(grad, grad, 1);
      auto std = stateSum.sqrt().add_(eps);
      param.addcdiv_(grad, std, -clr);
    }
  }
}

void step(Group& g, const GroupValues& v) {
  if (g.sparse) {
    return single(g, v);
  }
  for (const auto& part : g.parts()) {
    countSteps(g.column(0, part));
    inPieces(g.params, part, [&](const Positions& these) {
      at::_fused_adagrad_(take(g.params, these), take(g.grads, these), g.column(1, these), g.column(0, these),
                          v.get("lr"), v.get("lr_decay"), v.get("weight_decay"), v.get("eps"), v.flag("maximize"));
    });
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("adagrad", {keys, create, step, {"cpu", "cuda"}});

}  // namespace
}  // namespace adagrad_step
}  // namespace gilfree_optim
