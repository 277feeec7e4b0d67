// ASGD's group step: functional_optim's fused kernel (cpu/fused_asgd.cpp), one call per device
// and dtype (Polyak and Juditsky 1992; torch/optim/asgd.py, torch 2.13).
#include "group_step.h"

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace asgd_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues&) {
  return {"step", "eta", "mu", "ax"};
}

// As torch: step, eta (= lr) and mu (= 1) 0-dim on the parameter's device, of torch's scalar
// dtype (float64 when that is the default dtype, else float32); ax like the parameter.
std::vector<at::Tensor> create(const at::Tensor& param, const at::Tensor&, const GroupValues& v) {
  const auto options = at::TensorOptions().dtype(scalarDtype()).device(param.device());
  return {at::zeros({}, options), at::full({}, v.get("lr"), options), at::ones({}, options), like(param, 0)};
}

void step(Group& g, const GroupValues& v) {
  static const auto op =
      kernel<void(L, L, L, L, L, L, double, double, double, double, double, bool)>("gilfree_optim::asgd_");
  for (const auto& part : g.parts()) {
    op.call(take(g.params, part), take(g.grads, part), g.column(3, part), g.column(2, part), g.column(1, part),
            g.column(0, part), v.get("lambd"), v.get("lr"), v.get("t0"), v.get("alpha"), v.get("weight_decay"),
            v.flag("maximize"));
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("asgd", {keys, create, step, {"cpu"}});

}  // namespace
}  // namespace asgd_step
}  // namespace gilfree_optim
