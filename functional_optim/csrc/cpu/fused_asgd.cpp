// Fused ASGD step (schema in ops.cpp; machinery in fused_optim.h).
//
// Averaged SGD: Polyak and Juditsky, "Acceleration of Stochastic Approximation by Averaging",
// SIAM J. Control Optim. 30(4), 1992. Per element, as torch.optim.asgd's single-tensor step
// (torch 2.13), with eta and mu the values the parameter's state holds before this step:
//   g = maximize ? -grad : grad;  g += wd * p
//   p = p * (1 - lambd * eta);  p += -eta * g
//   ax = mu != 1 ? ax + (p - ax) * mu : p
// then, per parameter, from its new step count t (in double, as torch's Python floats, stored
// through the default dtype as torch.as_tensor does):
//   eta = lr / (1 + lambd * lr * t) ** alpha;  mu = 1 / max(1, t - t0)
// eta and mu are one-element tensors of any floating dtype (torch's load_state_dict casts them
// to the parameter's dtype).
#include "fused_loop.h"

#include <c10/core/DefaultDtype.h>

namespace gilfree_optim {
inline namespace CPU_CAPABILITY {
namespace {

struct AsgdScalars {
  double eta;
  double mu;
};

// `list`: one one-element floating tensor per parameter, on the CPU (or meta).
void checkScalarState(const char* op, at::TensorList params, at::TensorList list, const char* name) {
  TORCH_CHECK(
      list.size() == params.size(), "gilfree_optim::", op, ": ", name, " has ", list.size(),
      " tensors but params has ", params.size());
  for (const auto i : c10::irange(list.size())) {
    const at::Tensor& t = list[i];
    TORCH_CHECK(t.defined(), "gilfree_optim::", op, ": ", name, "[", i, "] is undefined");
    TORCH_CHECK(
        t.numel() == 1 && t.layout() == at::kStrided && at::isFloatingType(t.scalar_type()) && !t.is_complex(),
        "gilfree_optim::", op, ": ", name, "[", i, "] must be a one-element floating-point tensor, got shape ",
        t.sizes(), " and dtype ", t.scalar_type());
    TORCH_CHECK(
        t.device().is_cpu() || t.device().is_meta(), "gilfree_optim::", op, ": ", name, "[", i, "] is on ",
        t.device(), "; the fused CPU step keeps it on the CPU");
  }
}

double read(const at::Tensor& t) {
  switch (t.scalar_type()) {
    case at::kFloat:
      return *t.data_ptr<float>();
    case at::kDouble:
      return *t.data_ptr<double>();
    default:
      return t.item<double>();
  }
}

// torch: state.copy_(torch.as_tensor(value)): the value in the default dtype, then in the state's.
void write(const at::Tensor& t, double value) {
  if (c10::get_default_dtype_as_scalartype() != at::kDouble) {
    value = static_cast<float>(value);
  }
  switch (t.scalar_type()) {
    case at::kFloat:
      *t.data_ptr<float>() = static_cast<float>(value);
      break;
    case at::kDouble:
      *t.data_ptr<double>() = value;
      break;
    default:
      t.fill_(value);
  }
}

void asgdKernel(
    at::TensorList params, at::TensorList grads, at::TensorList axs, at::TensorList mus, at::TensorList etas,
    at::TensorList steps, double lambd, double lr, double t0, double alpha, double weightDecay, bool maximize) {
  const char* op = "asgd_";
  checkTensorLists(op, params, {{"grads", grads}, {"axs", axs}});
  checkScalarState(op, params, mus, "mus");
  checkScalarState(op, params, etas, "etas");
  const auto counts = startStep(op, params, steps);
  if (counts.empty()) {
    return;  // meta: checks only
  }
  std::vector<AsgdScalars> scalars;
  scalars.reserve(params.size());
  for (const auto i : c10::irange(params.size())) {
    scalars.push_back({read(etas[i]), read(mus[i])});
  }
  forEachElement<3>(op, {params, grads, axs}, scalars, [=](const AsgdScalars& s, auto& x) {
    using V = vec_of<decltype(x)>;
    const V g = gradient(x[1], x[0], maximize, weightDecay);
    x[0] = x[0] * cst<V>(1 - lambd * s.eta);
    x[0] = x[0] + cst<V>(-s.eta) * g;
    if (s.mu != 1) {
      x[2] = x[2] + (x[0] - x[2]) * cst<V>(s.mu);
    } else {
      x[2] = x[0];
    }
  });
  for (const auto i : c10::irange(params.size())) {
    const double t = counts[i];
    write(etas[i], lr / std::pow(1 + lambd * lr * t, alpha));
    write(mus[i], 1 / std::max(1.0, t - t0));
  }
}

}  // namespace
}  // namespace CPU_CAPABILITY

GILFREE_FUSED_OP(asgd_, asgdKernel)

}  // namespace gilfree_optim
