// Rprop's group step: functional_optim's fused kernel (cpu/fused_rprop.cpp), one call per
// device and dtype (torch/optim/rprop.py, torch 2.13).
#include "group_step.h"

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace rprop_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues&) {
  return {"step", "prev", "step_size"};
}

std::vector<at::Tensor> create(const at::Tensor& param, const at::Tensor&, const GroupValues& v) {
  return {newStep(param, v), like(param, 0), like(param, v.get("lr"))};
}

void step(Group& g, const GroupValues& v) {
  static const auto op = kernel<void(L, L, L, L, L, double, double, double, double, bool)>("gilfree_optim::rprop_");
  for (const auto& part : g.parts()) {
    op.call(take(g.params, part), take(g.grads, part), g.column(1, part), g.column(2, part), g.column(0, part),
            v.get("step_size_min"), v.get("step_size_max"), v.get("etaminus"), v.get("etaplus"), v.flag("maximize"));
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("rprop", {keys, create, step, {"cpu"}});

}  // namespace
}  // namespace rprop_step
}  // namespace gilfree_optim
