// RMSprop's group step: functional_optim's fused kernel (cpu/fused_rmsprop.cpp), one call per
// device and dtype (torch/optim/rmsprop.py, torch 2.13).
#include "group_step.h"

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace rmsprop_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues& v) {
  std::vector<std::string> k{"step", "square_avg"};
  if (v.get("momentum") > 0) {
    k.push_back("momentum_buffer");
  }
  if (v.flag("centered")) {
    k.push_back("grad_avg");
  }
  return k;
}

std::vector<at::Tensor> create(const at::Tensor& param, const at::Tensor&, const GroupValues& v) {
  std::vector<at::Tensor> state{newStep(param, v), like(param, 0)};
  for (size_t j = 2; j < keys(param.dim(), v).size(); ++j) {
    state.push_back(like(param, 0));
  }
  return state;
}

void step(Group& g, const GroupValues& v) {
  static const auto op = kernel<void(L, L, L, L, L, L, double, double, double, double, double, bool, bool)>(
      "gilfree_optim::rmsprop_");
  const double momentum = v.get("momentum");
  const bool centered = v.flag("centered");
  const size_t gradAvg = momentum > 0 ? 3 : 2;
  for (const auto& part : g.parts()) {
    op.call(take(g.params, part), take(g.grads, part), g.column(1, part),
            centered ? g.column(gradAvg, part) : std::vector<at::Tensor>(),
            momentum > 0 ? g.column(2, part) : std::vector<at::Tensor>(), g.column(0, part), v.get("lr"),
            v.get("alpha"), v.get("eps"), v.get("weight_decay"), momentum, centered, v.flag("maximize"));
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("rmsprop", {keys, create, step, {"cpu"}});

}  // namespace
}  // namespace rmsprop_step
}  // namespace gilfree_optim
