// RAdam's group step: functional_optim's fused kernel (cpu/fused_radam.cpp), one call per
// device and dtype (torch/optim/radam.py, torch 2.13).
#include "group_step.h"

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace radam_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues&) {
  return {"step", "exp_avg", "exp_avg_sq"};
}

std::vector<at::Tensor> create(const at::Tensor& param, const at::Tensor&, const GroupValues& v) {
  return {newStep(param, v), like(param, 0), like(param, 0)};
}

void step(Group& g, const GroupValues& v) {
  static const auto op = kernel<void(L, L, L, L, L, double, double, double, double, double, bool, bool)>(
      "gilfree_optim::radam_");
  for (const auto& part : g.parts()) {
    op.call(take(g.params, part), take(g.grads, part), g.column(1, part), g.column(2, part), g.column(0, part),
            v.get("lr"), v.get("beta1"), v.get("beta2"), v.get("weight_decay"), v.get("eps"),
            v.flag("decoupled_weight_decay"), v.flag("maximize"));
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("radam", {keys, create, step, {"cpu"}});

}  // namespace
}  // namespace radam_step
}  // namespace gilfree_optim
