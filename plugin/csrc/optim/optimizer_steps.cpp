#include "optim/optimizer_steps.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>

#include <utility>

namespace dist_engine {
namespace {

using Positions = std::vector<size_t>;

// functional_optim._state.split_by_device_dtype: positions grouped by (device, dtype), in
// first-seen order (one fused call each).
std::vector<Positions> splitByDeviceDtype(const std::vector<at::Tensor>& tensors) {
  std::vector<std::pair<c10::Device, at::ScalarType>> keys;
  std::vector<Positions> out;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto key = std::make_pair(tensors[i].device(), tensors[i].scalar_type());
    size_t k = 0;
    while (k < keys.size() && keys[k] != key) {
      ++k;
    }
    if (k == keys.size()) {
      keys.push_back(key);
      out.emplace_back();
    }
    out[k].push_back(i);
  }
  return out;
}

std::vector<at::Tensor> take(const std::vector<at::Tensor>& tensors, const Positions& positions) {
  std::vector<at::Tensor> out;
  out.reserve(positions.size());
  for (size_t k : positions) {
    out.push_back(tensors[k]);
  }
  return out;
}

// The state tensors `key` of the parameters at `positions`.
std::vector<at::Tensor> stateList(std::vector<ParamState>& states, const Positions& positions, const char* key) {
  std::vector<at::Tensor> out;
  out.reserve(positions.size());
  for (size_t k : positions) {
    out.push_back(states[k].at(key));
  }
  return out;
}

using Fills = std::vector<std::pair<const char*, double>>;

// GroupedState.init_state with fused=True: 'step' (float32 0-dim, on the parameter's device),
// then each fill (a tensor like the parameter), keys already present left alone.
void initState(const std::vector<at::Tensor>& params, std::vector<ParamState>& states, const Fills& fills) {
  for (size_t k = 0; k < params.size(); ++k) {
    const auto& p = params[k];
    auto& state = states[k];
    if (!state.contains("step")) {
      state.insert("step", at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(p.device())));
    }
    for (const auto& [key, value] : fills) {
      if (!state.contains(key)) {
        state.insert(key, at::full_like(p, value, {}, at::MemoryFormat::Preserve));
      }
    }
  }
}

double get(const Hyperparameters& h, const char* name) {
  return h.at(name);
}

// functional_optim's kernels, looked up when first used (functional_optim loads them).
template <typename Fn>
c10::TypedOperatorHandle<Fn> functionalOptimOp(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}

using L = at::TensorList;

// --- SGD ---------------------------------------------------------------------------------

void sgdFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  const double lr = get(h, "lr"), momentum = get(h, "momentum"), dampening = get(h, "dampening");
  const double weightDecay = get(h, "weight_decay");
  const bool nesterov = flagOf(o, "nesterov"), maximize = flagOf(o, "maximize");
  for (const auto& part : splitByDeviceDtype(params)) {
    if (momentum == 0) {
      at::_fused_sgd_(
          take(params, part), take(grads, part), {}, weightDecay, momentum, lr, dampening, nesterov, maximize, false);
      continue;
    }
    // _fused_sgd_new_buffers: one call starting the buffers that do not exist yet (the kernel
    // sets buf = grad when is_first_step), one for the others
    Positions fresh, old;
    std::vector<at::Tensor> freshBuffers, oldBuffers;
    for (size_t k : part) {
      if (states[k].contains("momentum_buffer")) {
        old.push_back(k);
        oldBuffers.push_back(states[k].at("momentum_buffer"));
      } else {
        fresh.push_back(k);
        freshBuffers.push_back(at::empty_like(grads[k]));
      }
    }
    if (!fresh.empty()) {
      at::_fused_sgd_(
          take(params, fresh), take(grads, fresh), freshBuffers, weightDecay, momentum, lr, dampening, nesterov,
          maximize, true);
    }
    if (!old.empty()) {
      at::_fused_sgd_(
          take(params, old), take(grads, old), oldBuffers, weightDecay, momentum, lr, dampening, nesterov, maximize,
          false);
    }
    for (size_t j = 0; j < fresh.size(); ++j) {
      states[fresh[j]].insert("momentum_buffer", freshBuffers[j]);
    }
  }
}

// functional_optim._kernels.sparse_kernel_usable: whether the fused sparse kernels step this
// parameter (a contiguous CPU tensor of a fused dtype; the library is loaded by then).
bool sparseKernelUsable(const at::Tensor& param) {
  const auto dtype = param.scalar_type();
  return param.device().is_cpu() && param.is_contiguous() &&
      (dtype == at::kFloat || dtype == at::kDouble || dtype == at::kBFloat16 || dtype == at::kHalf);
}

// sgd()'s single-tensor path (functional_optim/sgd.py), which a group with a sparse gradient
// takes (its flags' implementation on the CPU).
void sgdSingle(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  const double lr = get(h, "lr"), momentum = get(h, "momentum"), dampening = get(h, "dampening");
  const double weightDecay = get(h, "weight_decay");
  const bool nesterov = flagOf(o, "nesterov"), maximize = flagOf(o, "maximize");
  static const auto sparseOp = functionalOptimOp<void(L, L, double, bool)>("gilfree_optim::sparse_sgd_");
  for (size_t k = 0; k < params.size(); ++k) {
    auto param = params[k];
    if (grads[k].is_sparse() && momentum == 0 && weightDecay == 0 && sparseKernelUsable(param)) {
      sparseOp.call({param}, {grads[k]}, lr, maximize);  // only the rows present
      continue;
    }
    at::Tensor grad = maximize ? grads[k].neg() : grads[k];
    if (weightDecay != 0) {
      grad = grad.add(param, weightDecay);
    }
    if (momentum != 0) {
      at::Tensor buf;
      if (!states[k].contains("momentum_buffer")) {
        buf = grad.detach().clone();
        states[k].insert("momentum_buffer", buf);
      } else {
        buf = states[k].at("momentum_buffer");
        buf.mul_(momentum).add_(grad, 1 - dampening);
      }
      grad = nesterov ? grad.add(buf, momentum) : buf;
    }
    param.add_(grad, -lr);
  }
}

// --- Adagrad -----------------------------------------------------------------------------

void adagradFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  for (const auto& part : splitByDeviceDtype(params)) {
    auto steps = stateList(states, part, "step");
    at::_foreach_add_(steps, 1.0);
    at::_fused_adagrad_(
        take(params, part), take(grads, part), stateList(states, part, "sum"), steps, get(h, "lr"),
        get(h, "lr_decay"), get(h, "weight_decay"), get(h, "eps"), flagOf(o, "maximize"));
  }
}

at::Tensor makeSparse(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& values) {
  return at::sparse_coo_tensor(indices, values, grad.sizes(), values.options().layout(at::kSparse));
}

// adagrad()'s single-tensor path (functional_optim/adagrad.py), sparse branch included.
void adagradSingle(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  const double lr = get(h, "lr"), weightDecay = get(h, "weight_decay"), lrDecay = get(h, "lr_decay");
  const double eps = get(h, "eps");
  const bool maximize = flagOf(o, "maximize");
  static const auto sparseOp =
      functionalOptimOp<void(L, L, L, L, double, double, double, bool)>("gilfree_optim::sparse_adagrad_");
  for (size_t k = 0; k < params.size(); ++k) {
    auto param = params[k];
    auto stateSum = states[k].at("sum");
    auto stepT = states[k].at("step");
    if (grads[k].is_sparse() && weightDecay == 0 && sparseKernelUsable(param)) {
      sparseOp.call({param}, {grads[k]}, {stateSum}, {stepT}, lr, lrDecay, eps, maximize);  // it counts the step
      continue;
    }
    stepT.add_(1);
    const double step = stepT.item<double>();
    at::Tensor grad = maximize ? grads[k].neg() : grads[k];
    if (weightDecay != 0) {
      TORCH_CHECK(!grad.is_sparse(), "weight_decay option is not compatible with sparse gradients");
      grad = grad.add(param, weightDecay);
    }
    const double clr = lr / (1 + (step - 1) * lrDecay);
    if (grad.is_sparse()) {
      grad = grad.coalesce();  // the update is non-linear so indices must be unique
      auto gradIndices = grad._indices();
      auto gradValues = grad._values();
      stateSum.add_(makeSparse(grad, gradIndices, gradValues.pow(2)));
      auto std = stateSum.sparse_mask(grad);
      auto stdValues = std._values().sqrt_().add_(eps);
      param.add_(makeSparse(grad, gradIndices, gradValues / stdValues), -clr);
    } else {
      stateSum.addcmul_(grad, grad, 1);
      auto std = stateSum.sqrt().add_(eps);
      param.addcdiv_(grad, std, -clr);
    }
  }
}

// --- Adam, AdamW (torch's kernels) ---------------------------------------------------------

void adamFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  const bool amsgrad = flagOf(o, "amsgrad");
  Fills fills{{"exp_avg", 0.0}, {"exp_avg_sq", 0.0}};
  if (amsgrad) {
    fills.emplace_back("max_exp_avg_sq", 0.0);
  }
  initState(params, states, fills);
  const bool decoupled = flagOf(o, "decoupled_weight_decay");
  for (const auto& part : splitByDeviceDtype(params)) {
    auto steps = stateList(states, part, "step");
    auto maxExpAvgSqs = amsgrad ? stateList(states, part, "max_exp_avg_sq") : std::vector<at::Tensor>();
    at::_foreach_add_(steps, 1.0);
    auto p = take(params, part);
    auto g = take(grads, part);
    auto expAvgs = stateList(states, part, "exp_avg");
    auto expAvgSqs = stateList(states, part, "exp_avg_sq");
    if (decoupled) {
      at::_fused_adamw_(
          p, g, expAvgs, expAvgSqs, maxExpAvgSqs, steps, get(h, "lr"), get(h, "beta1"), get(h, "beta2"),
          get(h, "weight_decay"), get(h, "eps"), amsgrad, flagOf(o, "maximize"));
    } else {
      at::_fused_adam_(
          p, g, expAvgs, expAvgSqs, maxExpAvgSqs, steps, get(h, "lr"), get(h, "beta1"), get(h, "beta2"),
          get(h, "weight_decay"), get(h, "eps"), amsgrad, flagOf(o, "maximize"));
    }
  }
}

// --- the six with functional_optim's kernels only -----------------------------------------

void rmspropFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  static const auto op =
      functionalOptimOp<void(L, L, L, L, L, L, double, double, double, double, double, bool, bool)>(
          "gilfree_optim::rmsprop_");
  const double momentum = get(h, "momentum");
  const bool centered = flagOf(o, "centered");
  Fills fills{{"square_avg", 0.0}};
  if (momentum > 0) {
    fills.emplace_back("momentum_buffer", 0.0);
  }
  if (centered) {
    fills.emplace_back("grad_avg", 0.0);
  }
  initState(params, states, fills);
  for (const auto& part : splitByDeviceDtype(params)) {
    op.call(
        take(params, part), take(grads, part), stateList(states, part, "square_avg"),
        centered ? stateList(states, part, "grad_avg") : std::vector<at::Tensor>(),
        momentum > 0 ? stateList(states, part, "momentum_buffer") : std::vector<at::Tensor>(),
        stateList(states, part, "step"), get(h, "lr"), get(h, "alpha"), get(h, "eps"), get(h, "weight_decay"),
        momentum, centered, flagOf(o, "maximize"));
  }
}

void adamaxFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  static const auto op =
      functionalOptimOp<void(L, L, L, L, L, double, double, double, double, double, bool)>("gilfree_optim::adamax_");
  initState(params, states, {{"exp_avg", 0.0}, {"exp_inf", 0.0}});
  for (const auto& part : splitByDeviceDtype(params)) {
    op.call(
        take(params, part), take(grads, part), stateList(states, part, "exp_avg"), stateList(states, part, "exp_inf"),
        stateList(states, part, "step"), get(h, "lr"), get(h, "beta1"), get(h, "beta2"), get(h, "eps"),
        get(h, "weight_decay"), flagOf(o, "maximize"));
  }
}

void adadeltaFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  static const auto op =
      functionalOptimOp<void(L, L, L, L, L, double, double, double, double, bool)>("gilfree_optim::adadelta_");
  initState(params, states, {{"square_avg", 0.0}, {"acc_delta", 0.0}});
  for (const auto& part : splitByDeviceDtype(params)) {
    op.call(
        take(params, part), take(grads, part), stateList(states, part, "square_avg"),
        stateList(states, part, "acc_delta"), stateList(states, part, "step"), get(h, "lr"), get(h, "rho"),
        get(h, "eps"), get(h, "weight_decay"), flagOf(o, "maximize"));
  }
}

void rpropFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  static const auto op =
      functionalOptimOp<void(L, L, L, L, L, double, double, double, double, bool)>("gilfree_optim::rprop_");
  initState(params, states, {{"prev", 0.0}, {"step_size", get(h, "lr")}});
  for (const auto& part : splitByDeviceDtype(params)) {
    op.call(
        take(params, part), take(grads, part), stateList(states, part, "prev"), stateList(states, part, "step_size"),
        stateList(states, part, "step"), get(h, "step_size_min"), get(h, "step_size_max"), get(h, "etaminus"),
        get(h, "etaplus"), flagOf(o, "maximize"));
  }
}

void nadamFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  static const auto op =
      functionalOptimOp<void(L, L, L, L, L, L, double, double, double, double, double, double, bool, bool)>(
          "gilfree_optim::nadam_");
  for (size_t k = 0; k < params.size(); ++k) {  // 'step' and 'mu_product' first: torch's key order
    if (!states[k].contains("step")) {
      states[k].insert("step", at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(params[k].device())));
    }
    if (!states[k].contains("mu_product")) {
      states[k].insert("mu_product", at::ones({}));  // the default dtype, on the CPU
    }
  }
  initState(params, states, {{"exp_avg", 0.0}, {"exp_avg_sq", 0.0}});
  for (const auto& part : splitByDeviceDtype(params)) {
    op.call(
        take(params, part), take(grads, part), stateList(states, part, "exp_avg"),
        stateList(states, part, "exp_avg_sq"), stateList(states, part, "mu_product"), stateList(states, part, "step"),
        get(h, "lr"), get(h, "beta1"), get(h, "beta2"), get(h, "weight_decay"), get(h, "momentum_decay"),
        get(h, "eps"), flagOf(o, "decoupled_weight_decay"), flagOf(o, "maximize"));
  }
}

void radamFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  static const auto op =
      functionalOptimOp<void(L, L, L, L, L, double, double, double, double, double, bool, bool)>(
          "gilfree_optim::radam_");
  initState(params, states, {{"exp_avg", 0.0}, {"exp_avg_sq", 0.0}});
  for (const auto& part : splitByDeviceDtype(params)) {
    op.call(
        take(params, part), take(grads, part), stateList(states, part, "exp_avg"),
        stateList(states, part, "exp_avg_sq"), stateList(states, part, "step"), get(h, "lr"), get(h, "beta1"),
        get(h, "beta2"), get(h, "weight_decay"), get(h, "eps"), flagOf(o, "decoupled_weight_decay"),
        flagOf(o, "maximize"));
  }
}

// --- SparseAdam (functional_optim's sparse kernel) ------------------------------------------

void sparseAdamFused(
    const Hyperparameters& h,
    const Options& o,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states) {
  static const auto op = functionalOptimOp<void(L, L, L, L, L, double, double, double, double, bool)>(
      "gilfree_optim::sparse_adam_");
  initState(params, states, {{"exp_avg", 0.0}, {"exp_avg_sq", 0.0}});
  for (const auto& part : splitByDeviceDtype(params)) {
    op.call(
        take(params, part), take(grads, part), stateList(states, part, "exp_avg"),
        stateList(states, part, "exp_avg_sq"), stateList(states, part, "step"), get(h, "lr"), get(h, "beta1"),
        get(h, "beta2"), get(h, "eps"), flagOf(o, "maximize"));
  }
}

}  // namespace

OptimizerKind optimizerKindNamed(const std::string& name) {
  static const std::pair<const char*, OptimizerKind> kNames[] = {
      {"sgd", OptimizerKind::kSgd},         {"adam", OptimizerKind::kAdam},   {"adamw", OptimizerKind::kAdamW},
      {"adagrad", OptimizerKind::kAdagrad}, {"rmsprop", OptimizerKind::kRmsprop},
      {"adamax", OptimizerKind::kAdamax},   {"adadelta", OptimizerKind::kAdadelta},
      {"rprop", OptimizerKind::kRprop},     {"nadam", OptimizerKind::kNAdam}, {"radam", OptimizerKind::kRAdam},
      {"sparse_adam", OptimizerKind::kSparseAdam},
  };
  for (const auto& [known, kind] : kNames) {
    if (name == known) {
      return kind;
    }
  }
  TORCH_CHECK_VALUE(
      false, "ValueError: LocalOptimizer: no optimizer named '", name,
      "' (known: sgd, adam, adamw, adagrad, rmsprop, adamax, adadelta, rprop, nadam, radam, sparse_adam)");
}

bool flagOf(const Options& options, const std::string& name) {
  auto it = options.find(name);
  return it != options.end() && it->value().has_value() && *it->value();
}

bool stepsFused(const Options& options) {
  auto fused = options.find("fused");
  auto foreach = options.find("foreach");
  const bool fusedSet = fused != options.end() && fused->value().has_value();
  const bool foreachSet = foreach != options.end() && foreach->value().has_value();
  return (fusedSet && *fused->value()) || (!fusedSet && !foreachSet);
}

std::optional<std::string> sparseErrorFor(OptimizerKind kind, const Hyperparameters& hparams, const Options& options) {
  const bool fused = flagOf(options, "fused");  // the flags' implementation is "fused" only for fused=True
  switch (kind) {
    case OptimizerKind::kSgd:
      if (fused) {
        return "`_fused_sgd` does not support sparse gradients";
      }
      if (hparams.at("weight_decay") != 0) {  // torch's grad.add(param) raises this
        return "add(sparse, dense) is not supported. Use add(dense, sparse) instead.";
      }
      return std::nullopt;
    case OptimizerKind::kAdagrad:
      if (hparams.at("weight_decay") != 0) {
        return "weight_decay option is not compatible with sparse gradients";
      }
      return fused ? std::optional<std::string>("`fused` does not support sparse grad or complex param") : std::nullopt;
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return "Adam does not support sparse gradients, please consider SparseAdam instead";
    case OptimizerKind::kRmsprop:
      return "RMSprop does not support sparse gradients";
    case OptimizerKind::kAdamax:
      return "Adamax does not support sparse gradients";
    case OptimizerKind::kAdadelta:
      return "Adadelta does not support sparse gradients";
    case OptimizerKind::kRprop:
      return "Rprop does not support sparse gradients";
    case OptimizerKind::kNAdam:
      return "NAdam does not support sparse gradients";
    case OptimizerKind::kRAdam:
      return "RAdam does not support sparse gradients";
    case OptimizerKind::kSparseAdam:
      return std::nullopt;
  }
  return std::nullopt;
}

std::optional<std::string> denseErrorFor(OptimizerKind kind) {
  if (kind == OptimizerKind::kSparseAdam) {
    return "SparseAdam does not support dense gradients, please consider Adam instead";
  }
  return std::nullopt;
}

void initStateAtConstruction(
    OptimizerKind kind,
    const std::vector<at::Tensor>& params,
    std::vector<ParamState>& states,
    double initialAccumulatorValue) {
  if (kind == OptimizerKind::kAdagrad) {
    initState(params, states, {{"sum", initialAccumulatorValue}});
  }
}

void stepGroup(
    OptimizerKind kind,
    const Hyperparameters& hparams,
    const Options& options,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states,
    bool sparse,
    double initialAccumulatorValue) {
  at::NoGradGuard noGrad;
  switch (kind) {
    case OptimizerKind::kSgd:
      return sparse ? sgdSingle(hparams, options, params, grads, states)
                    : sgdFused(hparams, options, params, grads, states);
    case OptimizerKind::kAdagrad:
      initState(params, states, {{"sum", initialAccumulatorValue}});
      return sparse ? adagradSingle(hparams, options, params, grads, states)
                    : adagradFused(hparams, options, params, grads, states);
    case OptimizerKind::kAdam:
    case OptimizerKind::kAdamW:
      return adamFused(hparams, options, params, grads, states);
    case OptimizerKind::kRmsprop:
      return rmspropFused(hparams, options, params, grads, states);
    case OptimizerKind::kAdamax:
      return adamaxFused(hparams, options, params, grads, states);
    case OptimizerKind::kAdadelta:
      return adadeltaFused(hparams, options, params, grads, states);
    case OptimizerKind::kRprop:
      return rpropFused(hparams, options, params, grads, states);
    case OptimizerKind::kNAdam:
      return nadamFused(hparams, options, params, grads, states);
    case OptimizerKind::kRAdam:
      return radamFused(hparams, options, params, grads, states);
    case OptimizerKind::kSparseAdam:
      return sparseAdamFused(hparams, options, params, grads, states);
  }
}

}  // namespace dist_engine
