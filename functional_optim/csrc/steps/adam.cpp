// Adam's and AdamW's group step: torch's fused kernels (torch/optim/adam.py, adamw.py,
// torch 2.13), the step counters counted first as torch's fused path does. The kernels walk a
// call's tensors by one flat index: each parameter dense, its gradient and state of its
// strides (the group step routes other parameters through copies: OptimizerDef::anyLayout).
#include "group_step.h"

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace adam_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues& v) {
  if (v.flag("amsgrad")) {
    return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  }
  return {"step", "exp_avg", "exp_avg_sq"};
}

std::vector<at::Tensor> create(const at::Tensor& param, const at::Tensor&, const GroupValues& v) {
  std::vector<at::Tensor> state{newStep(param, v), like(param, 0), like(param, 0)};
  if (v.flag("amsgrad")) {
    state.push_back(like(param, 0));
  }
  return state;
}

void step(Group& g, const GroupValues& v) {
  const bool amsgrad = v.flag("amsgrad");
  for (const auto& part : g.parts()) {
    countSteps(g.column(0, part));
    inPieces(g.params, part, [&](const Positions& these) {
      auto p = take(g.params, these);
      auto grads = take(g.grads, these);
      auto steps = g.column(0, these), expAvgs = g.column(1, these), expAvgSqs = g.column(2, these);
      auto maxExpAvgSqs = amsgrad ? g.column(3, these) : std::vector<at::Tensor>();
      if (v.flag("decoupled_weight_decay")) {
        at::_fused_adamw_(p, grads, expAvgs, expAvgSqs, maxExpAvgSqs, steps, v.get("lr"), v.get("beta1"),
                          v.get("beta2"), v.get("weight_decay"), v.get("eps"), amsgrad, v.flag("maximize"));
      } else {
        at::_fused_adam_(p, grads, expAvgs, expAvgSqs, maxExpAvgSqs, steps, v.get("lr"), v.get("beta1"),
                         v.get("beta2"), v.get("weight_decay"), v.get("eps"), amsgrad, v.flag("maximize"));
      }
    });
  }
}

[[maybe_unused]] const bool adam = registerOptimizer("adam", {keys, create, step, {"cpu", "cuda"}});
[[maybe_unused]] const bool adamw = registerOptimizer("adamw", {keys, create, step, {"cpu", "cuda"}});

}  // namespace
}  // namespace adam_step
}  // namespace gilfree_optim
