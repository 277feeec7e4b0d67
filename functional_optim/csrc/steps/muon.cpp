// Muon's group step: torch.optim's single-tensor step (torch/optim/_muon.py, torch 2.13), its
// ATen ops in its order, so results are torch's to the bit; on float32 CPU tensors the
// element-wise ops around the iteration run as two passes (cpu/fused_muon.cpp) that round as
// those ops do (where the library runs its build for ATen's instruction set: passesFused).
// The Newton-Schulz iteration runs here, in C++, without the interpreter (and, called from the
// plugin's native optimizers or through the dispatcher, without the GIL).
//
// Algorithm: K. Jordan, "Muon: An optimizer for hidden layers in neural networks" (2024),
// https://kellerjordan.github.io/posts/muon/ (the quintic Newton-Schulz iteration, in bfloat16,
// and its coefficients); the "match_rms_adamw" learning-rate adjustment from J. Liu et al.,
// "Muon is Scalable for LLM Training" (2025), https://arxiv.org/abs/2502.16982.
#include "fused_optim.h"
#include "group_step.h"

#include <algorithm>
#include <cmath>

namespace gilfree_optim {
// this optimizer's own names: the group steps compile as one unit (build_units.py)
namespace muon_step {
namespace {

std::vector<std::string> keys(int64_t, const GroupValues&) {
  return {"momentum_buffer"};
}

std::vector<at::Tensor> create(const at::Tensor&, const at::Tensor& grad, const GroupValues&) {
  return {at::zeros_like(grad, at::MemoryFormat::Preserve)};
}

// torch's _zeropower_via_newtonschulz: about U V^T of the SVD U S V^T of the update `x`,
// given in bfloat16 (its first line, the cast, is the caller's).
at::Tensor orthogonalized(at::Tensor x, double a, double b, double c, int64_t steps, double eps) {
  const bool tall = x.size(0) > x.size(1);
  if (tall) {
    x = x.t();
  }
  x.div_(at::linalg_vector_norm(x, 2).clamp(eps));  // spectral norm at most 1
  for (int64_t i = 0; i < steps; ++i) {
    auto gram = at::matmul(x, x.t());
    auto gramUpdate = at::addmm(gram, gram, gram, b, c);
    x = at::addmm(x, gramUpdate, x, a);
  }
  return tall ? x.t() : x;
}

// torch's choices of adjust_lr_fn, in the order of their numbers (a group's value: 0 None,
// k + 1 the k-th): the one table of them (OptimizerDef::choices; functional_optim's Python
// reads it, _state.CHOICE_HYPERPARAMETERS).
constexpr int64_t kOriginal = 1, kMatchRmsAdamw = 2;
const std::vector<std::string>& adjustLrFns() {
  static const auto* fns = new std::vector<std::string>{"original", "match_rms_adamw"};  // kOriginal, kMatchRmsAdamw
  return *fns;
}

// torch's _adjust_lr; `fn`: 0 None, kOriginal, kMatchRmsAdamw.
double adjustedLr(double lr, int64_t fn, const at::Tensor& param) {
  const double rows = static_cast<double>(param.size(0)), cols = static_cast<double>(param.size(1));
  double ratio = 1.0;
  if (fn == 0 || fn == kOriginal) {
    ratio = std::sqrt(std::max(1.0, rows / cols));
  } else if (fn == kMatchRmsAdamw) {
    ratio = 0.2 * std::sqrt(std::max(rows, cols));
  }
  return lr * ratio;
}

// Whether the element-wise passes around the iteration run fused (cpu/fused_muon.cpp: two
// passes, the same bits as ATen's six ops): a float32 parameter, gradient and momentum buffer,
// contiguous, on the CPU; on x86-64, where the library runs its build for the instruction set
// ATen's kernels run (not in a build of the DEFAULT one alone, GILFREE_KERNEL_ISAS=DEFAULT, on a
// CPU where ATen uses fused multiply-adds; other architectures' ATen rounds otherwise).
bool passesFused(const at::Tensor& param, const at::Tensor& grad, const at::Tensor& buf) {
#if defined(__x86_64__) || defined(_M_X64)
  static const bool sameIsa = activeIsa() == selectedIsa();
#else
  constexpr bool sameIsa = false;
#endif
  if (!sameIsa) {
    return false;
  }
  for (const at::Tensor* t : {&param, &grad, &buf}) {
    if (!t->device().is_cpu() || t->scalar_type() != at::kFloat || t->layout() != at::kStrided ||
        !t->is_contiguous()) {
      return false;
    }
  }
  return grad.sizes() == param.sizes();
}

void step(Group& g, const GroupValues& v) {
  const double lr = v.get("lr"), weightDecay = v.get("weight_decay"), momentum = v.get("momentum");
  const double a = v.get("ns_a"), b = v.get("ns_b"), c = v.get("ns_c"), eps = v.get("eps");
  const double nsSteps = v.get("ns_steps"), fn = v.get("adjust_lr_fn");
  const bool nesterov = v.flag("nesterov");
  TORCH_CHECK_VALUE(nsSteps < 100, "Number of steps must be less than 100 for computational efficiency");
  TORCH_CHECK_VALUE(
      nsSteps == std::floor(nsSteps), "gilfree_optim::group_step: muon's ns_steps must be a whole number, got ",
      nsSteps);
  TORCH_CHECK_VALUE(
      fn == 0 || fn == kOriginal || fn == kMatchRmsAdamw, "gilfree_optim::group_step: muon's adjust_lr_fn must be 0 "
      "(None), ", kOriginal, " (\"", adjustLrFns()[kOriginal - 1], "\") or ", kMatchRmsAdamw, " (\"",
      adjustLrFns()[kMatchRmsAdamw - 1], "\"), got ", fn);
  for (size_t k = 0; k < g.params.size(); ++k) {  // everything checked before anything changes
    const auto& p = g.params[k];
    const auto& buf = g.state[k][0];
    TORCH_CHECK_VALUE(p.dim() == 2, "Param gradient must be a 2D matrix");
    TORCH_CHECK_VALUE(
        buf.sizes() == p.sizes() && buf.scalar_type() == p.scalar_type() && buf.device() == p.device(),
        "gilfree_optim::group_step: muon's state['momentum_buffer'] of parameter ", k, " has shape ", buf.sizes(),
        ", dtype ", buf.scalar_type(), ", device ", buf.device(), "; expected the parameter's (shape ", p.sizes(),
        ", dtype ", p.scalar_type(), ", device ", p.device(), ")");
  }
  for (size_t k = 0; k < g.params.size(); ++k) {
    auto& param = g.params[k];
    const auto& grad = g.grads[k];
    auto& buf = g.state[k][0];
    const bool fused = passesFused(param, grad, buf);
    at::Tensor x;
    if (fused) {
      x = at::empty(buf.sizes(), buf.options().dtype(at::kBFloat16));
      IsaDispatch<MuonMomentumKernel, MuonMomentumFn>::call(grad, buf, x, momentum, nesterov);
    } else {
      buf.lerp_(grad, 1 - momentum);
      x = (nesterov ? grad.lerp(buf, momentum) : buf).to(at::kBFloat16);
    }
    const auto update = orthogonalized(x, a, b, c, static_cast<int64_t>(nsSteps), eps);
    const double adjusted = adjustedLr(lr, static_cast<int64_t>(fn), param);
    if (fused) {
      IsaDispatch<MuonUpdateKernel, MuonUpdateFn>::call(param, update.contiguous(), 1 - lr * weightDecay, -adjusted);
    } else {
      param.mul_(number(1 - lr * weightDecay));
      param.add_(update, -adjusted);
    }
  }
}

[[maybe_unused]] const bool registered = registerOptimizer(
    "muon", {keys, create, step, {"cpu", "cuda"}, /*anyLayout=*/true, {{"adjust_lr_fn", adjustLrFns()}}});

}  // namespace
}  // namespace muon_step
}  // namespace gilfree_optim
