// Adafactor's group step: torch.optim's single-tensor step (torch/optim/_adafactor.py, torch
// 2.13), its ATen ops in its order, so results are torch's default step's to the bit; without
// the interpreter between the ops, and for float32 and float64 CPU parameters with the
// element-wise end of the update in one pass (fusedUpdate: the same operations, fewer passes). Algorithm: Shazeer and Stern, "Adafactor: Adaptive Learning
// Rates with Sublinear Memory Cost" (2018), https://arxiv.org/abs/1804.04235, with torch's
// changes (lr caps the relative step size and scales decoupled weight decay; eps1 applied to
// the variance estimate and the update; means instead of sums).
//
// A parameter of two or more dimensions keeps the row and column means of the squared
// gradient over its last two dimensions (row_var: last dimension reduced to 1; col_var: the
// one before), one of fewer a full second moment (variance).
#include "fused_optim.h"
#include "group_step.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gilfree_optim {

struct AdafactorUpdateOp;  // cpu/fused_adafactor.cpp

// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace adafactor_step {
namespace {

std::vector<std::string> keys(int64_t dim, const GroupValues&) {
  if (dim > 1) {
    return {"step", "row_var", "col_var"};
  }
  return {"step", "variance"};
}

std::vector<int64_t> reduced(const at::Tensor& t, int64_t dim) {
  auto shape = t.sizes().vec();
  shape[shape.size() + dim] = 1;
  return shape;
}

// As torch: step a 0-dim tensor of torch's scalar dtype on the CPU; the factors zeros of the
// gradient's dtype and device.
std::vector<at::Tensor> create(const at::Tensor&, const at::Tensor& grad, const GroupValues&) {
  auto step = at::zeros({}, at::TensorOptions().dtype(scalarDtype()));
  if (grad.dim() > 1) {
    return {step, grad.new_zeros(reduced(grad, -1)), grad.new_zeros(reduced(grad, -2))};
  }
  return {step, at::zeros_like(grad, at::MemoryFormat::Preserve)};
}

// torch.finfo(dtype).eps
double machineEpsilon(at::ScalarType dtype) {
  switch (dtype) {
    case at::kDouble:
      return std::numeric_limits<double>::epsilon();
    case at::kBFloat16:
      return static_cast<float>(std::numeric_limits<c10::BFloat16>::epsilon());
    case at::kHalf:
      return static_cast<float>(std::numeric_limits<c10::Half>::epsilon());
    default:
      return std::numeric_limits<float>::epsilon();
  }
}

void checkState(const Group& g) {
  for (size_t k = 0; k < g.params.size(); ++k) {
    const auto& p = g.params[k];
    const auto& s = g.state[k];
    TORCH_CHECK_VALUE(
        s[0].numel() == 1, "gilfree_optim::group_step: adafactor's state['step'] of parameter ", k,
        " must hold one number, got shape ", s[0].sizes());
    std::vector<std::vector<int64_t>> shapes{p.sizes().vec()};
    std::vector<const char*> names{"variance"};
    if (p.dim() > 1) {
      shapes = {reduced(p, -1), reduced(p, -2)};
      names = {"row_var", "col_var"};
    }
    for (size_t j = 0; j < shapes.size(); ++j) {
      const auto& t = s[j + 1];
      TORCH_CHECK_VALUE(
          t.sizes() == at::IntArrayRef(shapes[j]) && t.scalar_type() == p.scalar_type() && t.device() == p.device(),
          "gilfree_optim::group_step: adafactor's state['", names[j],
          "'] of parameter ", k, " has shape ", t.sizes(), ", dtype ", t.scalar_type(), ", device ", t.device(),
          "; expected shape ", at::IntArrayRef(shapes[j]), " and the parameter's dtype ", p.scalar_type(),
          " and device ", p.device());
    }
  }
}

double l2(const at::Tensor& t) {
  return at::linalg_vector_norm(t, 2).item<double>();
}

// The element-wise end of the update in one pass (cpu/fused_adafactor.cpp: the same IEEE
// operations as ATen's float32 and float64 CPU kernels, so torch's bits), for float32 and
// float64 CPU gradients; the others take the ATen ops.
bool fusable(const at::Tensor& grad) {
  return grad.device().is_cpu() && (grad.scalar_type() == at::kFloat || grad.scalar_type() == at::kDouble);
}

// torch's (row_var @ col_var).div_(divisor).clamp_(min=floor).rsqrt_().mul_(grad) (`colVar`
// defined) or variance.clone().clamp_(min=floor).rsqrt_().mul_(grad) (`rowVar` the variance),
// `grad` negated when `negate`: a new contiguous tensor of grad's shape, as the ops give it.
at::Tensor fusedUpdate(
    const at::Tensor& grad, const at::Tensor& rowVar, const at::Tensor& colVar, const at::Tensor& divisor,
    double floor, bool negate) {
  using Fn = void(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                  double, bool);
  auto out = at::empty(grad.sizes(), grad.options());
  IsaDispatch<AdafactorUpdateOp, Fn>::call(
      out, grad.contiguous(), rowVar.contiguous(), colVar.defined() ? colVar.contiguous() : colVar,
      divisor.defined() ? divisor.contiguous() : divisor, floor, negate);
  return out;
}

void step(Group& g, const GroupValues& v) {
  checkState(g);
  const double lr = v.get("lr"), beta2Decay = v.get("beta2_decay"), eps2 = v.get("eps2"), d = v.get("d");
  const double weightDecay = v.get("weight_decay");
  const bool maximize = v.flag("maximize");
  // eps1 None (-inf here): torch takes finfo(dtype).eps of the first parameter stepped and keeps
  // it for the rest of the group's step (it assigns the loop's variable).
  double eps1 = v.get("eps1");
  for (size_t k = 0; k < g.params.size(); ++k) {
    auto& param = g.params[k];
    const bool fused = fusable(g.grads[k]);
    // the fused update takes the sign itself (squares and norms do not see it)
    const at::Tensor grad = maximize && !fused ? g.grads[k].neg() : g.grads[k];
    auto& s = g.state[k];
    if (eps1 == -std::numeric_limits<double>::infinity()) {
      eps1 = machineEpsilon(param.scalar_type());
    }
    s[0].add_(number(1));
    const double stepValue = s[0].item<double>();
    const double oneMinusBeta2 = std::pow(stepValue, beta2Decay);
    const double rho = std::min(lr, 1 / std::pow(stepValue, 0.5));
    const double alpha = std::max(eps2, l2(param) / std::pow(static_cast<double>(param.numel()), 0.5)) * rho;
    if (weightDecay != 0) {
      param.mul_(number(1 - lr * weightDecay));
    }
    at::Tensor update;
    if (grad.dim() > 1) {
      auto& rowVar = s[1];
      auto& colVar = s[2];
      // (g * g).mean over a dimension, without the intermediate of g's size
      auto rowMean = at::linalg_vector_norm(grad, 2, at::IntArrayRef{-1}, true).square_().div_(number(grad.size(-1)));
      rowVar.lerp_(rowMean, oneMinusBeta2);
      auto colMean = at::linalg_vector_norm(grad, 2, at::IntArrayRef{-2}, true).square_().div_(number(grad.size(-2)));
      colVar.lerp_(colMean, oneMinusBeta2);
      auto divisor = rowVar.mean(at::IntArrayRef{-2}, true).clamp_(eps1);
      if (fused) {
        update = fusedUpdate(grad, rowVar, colVar, divisor, eps1 * eps1, maximize);
      } else {
        update = at::matmul(rowVar, colVar).div_(divisor).clamp_(eps1 * eps1).rsqrt_().mul_(grad);
      }
    } else {
      auto& variance = s[1];
      variance.lerp_(grad * grad, oneMinusBeta2);
      if (fused) {
        update = fusedUpdate(grad, variance, {}, {}, eps1 * eps1, maximize);
      } else {
        update = variance.clone().clamp_(eps1 * eps1).rsqrt_().mul_(grad);
      }
    }
    const double denom =
        std::max(1.0, l2(update) / (std::pow(static_cast<double>(update.numel()), 0.5) * d));
    param.add_(update, -alpha / denom);
  }
}

[[maybe_unused]] const bool registered = registerOptimizer("adafactor", {keys, create, step, {"cpu", "cuda"}, /*anyLayout=*/true});

}  // namespace
}  // namespace adafactor_step
}  // namespace gilfree_optim
