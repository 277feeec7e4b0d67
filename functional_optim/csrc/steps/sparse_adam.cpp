// SparseAdam's group step: functional_optim's fused sparse kernel (cpu/fused_sparse.cpp),
// which reads and writes only the rows present, one call per device and dtype, for
// contiguous CPU parameters; torch's composite ops for the others (sparse_adam in
// torch/optim/_functional.py, torch 2.13).
#include "group_step.h"


#include <cmath>

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace sparse_adam_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues&) {
  return {"step", "exp_avg", "exp_avg_sq"};
}

std::vector<at::Tensor> create(const at::Tensor& param, const at::Tensor&, const GroupValues& v) {
  return {newStep(param, v), like(param, 0), like(param, 0)};
}

// torch's sparse_adam for one parameter, its ops in its order (any layout, any floating dtype,
// any device; a Tensor lr of any floating dtype, read as torch reads it). The dense += sparse
// adds go through addSparseInto: the state tensors of a packed group are views at an offset.
void composite(Group& g, size_t k, const GroupValues& v) {
  const double lr = v.get("lr"), beta1 = v.get("beta1"), beta2 = v.get("beta2"), eps = v.get("eps");
  auto stepT = g.state[k][0], expAvg = g.state[k][1], expAvgSq = g.state[k][2];
  stepT.add_(1);
  const double step = stepT.item<double>();
  auto grad = v.flag("maximize") ? g.grads[k].neg() : g.grads[k];
  grad = grad.coalesce();  // the update is non-linear so indices must be unique
  auto indices = grad._indices();
  auto values = grad._values();
  if (values.numel() == 0) {
    return;
  }
  const auto size = grad.sizes();
  auto oldExpAvg = expAvg.sparse_mask(grad)._values();
  auto expAvgUpdate = values.sub(oldExpAvg).mul_(1 - beta1);
  addSparseInto(expAvg, at::sparse_coo_tensor(indices, expAvgUpdate, size));
  auto oldExpAvgSq = expAvgSq.sparse_mask(grad)._values();
  auto expAvgSqUpdate = values.pow(2).sub_(oldExpAvgSq).mul_(1 - beta2);
  addSparseInto(expAvgSq, at::sparse_coo_tensor(indices, expAvgSqUpdate, size));
  auto numer = expAvgUpdate.add_(oldExpAvg);
  expAvgSqUpdate.add_(oldExpAvgSq);
  auto denom = expAvgSqUpdate.sqrt_().add_(eps);
  const double bc1 = 1 - std::pow(beta1, step), sqrtBc2 = std::sqrt(1 - std::pow(beta2, step));
  if (const auto lrT = v.tensor("lr")) {
    // a Tensor lr: torch computes the step size in the Tensor's dtype (a float32 lr for float64
    // parameters rounds it there), with Python floats as wrapped numbers
    const auto stepSize = lrT->mul(number(sqrtBc2)).div(number(bc1));
    addSparseInto(g.params[k], at::sparse_coo_tensor(indices, stepSize.neg().mul(numer.div_(denom)), size));
    return;
  }
  const double stepSize = lr * sqrtBc2 / bc1;
  addSparseInto(g.params[k], at::sparse_coo_tensor(indices, numer.div_(denom).mul(-stepSize), size));
}

void step(Group& g, const GroupValues& v) {
  static const auto op =
      kernel<void(L, L, L, L, L, double, double, double, double, bool)>("gilfree_optim::sparse_adam_");
  for (const auto& part : g.parts()) {
    Positions kernelled;
    for (size_t k : part) {
      if (sparseKernelUsable(g.params[k]) && !v.tensor("lr")) {
        kernelled.push_back(k);
      } else {
        composite(g, k, v);
      }
    }
    if (!kernelled.empty()) {
      op.call(take(g.params, kernelled), take(g.grads, kernelled), g.column(1, kernelled), g.column(2, kernelled),
              g.column(0, kernelled), v.get("lr"), v.get("beta1"), v.get("beta2"), v.get("eps"), v.flag("maximize"));
    }
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("sparse_adam", {keys, create, step, {"cpu"}});

}  // namespace
}  // namespace sparse_adam_step
}  // namespace gilfree_optim
