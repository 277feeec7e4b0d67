// The native local optimizer (local_optimizer.h), its registry, and the kernels of its
// by-handle ops (schemas in ops.cpp).
#include "optim/local_optimizer.h"

#include "engine/gradients.h"
#include "handle_registry.h"
#include "optim/prepared_steps.h"
#include "rpc/worker_error.h"

#include "functional_optim/csrc/group_step_ops.h"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/library.h>


namespace gilfree_rpc {
namespace {

HandleRegistry<NativeLocalOptimizer>& registry() {
  static auto* optimizers = new HandleRegistry<NativeLocalOptimizer>();  // leaky: RPC threads may call in while the process exits
  return *optimizers;
}

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& groups) {
  std::vector<at::Tensor> flat;
  for (const auto& group : groups) {
    flat.insert(flat.end(), group.begin(), group.end());
  }
  return flat;
}

bool present(const std::optional<at::Tensor>& gradient) {
  return gradient.has_value() && gradient->defined();
}

}  // namespace

// --- construction and the registry --------------------------------------------------------

NativeLocalOptimizer::NativeLocalOptimizer(
    std::string name,
    const std::vector<std::vector<at::Tensor>>& groups,
    std::optional<std::string> denseError)
    : name_(std::move(name)),
      params_(flatten(groups)),
      denseError_(std::move(denseError)),
      locks_(paramLocksFor(params_)) {
  gilfree_optim::checkParamCount(static_cast<int64_t>(params_.size()));
  offsets_.push_back(0);
  for (const auto& group : groups) {
    offsets_.push_back(offsets_.back() + static_cast<int64_t>(group.size()));
  }
  plans_.resize(groups.size());
  sparseErrors_.resize(groups.size());
  state_.resize(params_.size());
  keys_.resize(params_.size());
}

c10::intrusive_ptr<NativeLocalOptimizer> NativeLocalOptimizer::registered(c10::intrusive_ptr<NativeLocalOptimizer> self) {
  self->handle_ = registry().add(self);
  return self;
}

c10::intrusive_ptr<NativeLocalOptimizer> NativeLocalOptimizer::find(int64_t handle) {
  auto found = registry().find(handle);
  TORCH_CHECK(
      found,
      workerError(
          "in a call of a native local optimizer",
          "there is no local optimizer with handle " + std::to_string(handle) +
              " here (it was destroyed with the last reference to it, such as its RRef, or never existed)"));
  return found;
}

void NativeLocalOptimizer::release_resources() {
  registry().remove(handle_);
}

// --- the plans and the state ----------------------------------------------------------------

void NativeLocalOptimizer::configure(
    const std::vector<int64_t>& groups,
    const std::vector<std::vector<std::string>>& names,
    const std::vector<std::vector<double>>& values,
    const std::vector<std::vector<std::string>>& tensorNames,
    const std::vector<std::vector<at::Tensor>>& tensorValues,
    const std::vector<std::optional<std::string>>& sparseErrors,
    const std::optional<OptimizerState>& state) {
  const size_t n = groups.size();
  TORCH_CHECK_VALUE(
      names.size() == n && values.size() == n && tensorNames.size() == n && tensorValues.size() == n &&
          sparseErrors.size() == n,
      "NativeLocalOptimizer.configure: one plan per group named (", n, " groups)");
  for (size_t k = 0; k < n; ++k) {
    TORCH_CHECK_VALUE(
        groups[k] >= 0 && groups[k] < static_cast<int64_t>(plans_.size()) && names[k].size() == values[k].size() &&
            tensorNames[k].size() == tensorValues[k].size(),
        "NativeLocalOptimizer.configure: the plan of group ", groups[k], " does not fit");
  }
  if (state.has_value()) {
    for (const auto& item : *state) {
      TORCH_CHECK_VALUE(
          item.key() >= 0 && item.key() < static_cast<int64_t>(params_.size()),
          "NativeLocalOptimizer.configure: state of parameter ", item.key(), ", which does not exist");
    }
  }
  HeldParamLocks held(locks_);
  if (state.has_value()) {
    std::vector<ParamState> replaced(params_.size());
    for (const auto& item : *state) {
      replaced[item.key()] = item.value().copy();  // the tensors themselves: no copies
    }
    state_ = std::move(replaced);
  }
  std::lock_guard<std::mutex> guard(sparseErrorsMu_);
  for (size_t k = 0; k < n; ++k) {
    plans_[groups[k]] = Plan{names[k], values[k], tensorNames[k], tensorValues[k]};
    sparseErrors_[groups[k]] = sparseErrors[k];
    setKeysLocked(groups[k]);
  }
}

OptimizerState NativeLocalOptimizer::state() {
  HeldParamLocks held(locks_);
  OptimizerState out;
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].size() == 0) {
      continue;
    }
    ParamState entry;
    for (const auto& item : state_[i]) {
      entry.insert(item.key(), item.value().clone());  // copies: read after the locks are released
    }
    out.insert(static_cast<int64_t>(i), entry);
  }
  return out;
}

void NativeLocalOptimizer::setKeysLocked(size_t g) {
  const auto& plan = plans_[g];
  std::unordered_map<int64_t, std::vector<std::string>> byDim;
  for (int64_t i = offsets_[g]; i < offsets_[g + 1]; ++i) {
    const int64_t dim = params_[i].dim();
    auto it = byDim.find(dim);
    if (it == byDim.end()) {
      it = byDim.emplace(dim, gilfree_optim::stateKeys(name_, dim, plan.names, plan.values)).first;
    }
    keys_[i] = it->second;
  }
}

// --- steps ----------------------------------------------------------------------------

void NativeLocalOptimizer::check(const MaybeGradients& gradients, const std::vector<std::optional<std::string>>& sparseErrors)
    const {
  // raises ValueError or RuntimeError, as the functional_optim class's step does
  gilfree_optim::checkGradients(
      params_, c10::List<std::optional<at::Tensor>>(gradients), offsets_, sparseErrors, denseError_);
}

void NativeLocalOptimizer::applyLocked(const MaybeGradients& gradients) {
  check(gradients, sparseErrors_);
  at::NoGradGuard noGrad;
  for (size_t g = 0; g + 1 < offsets_.size(); ++g) {
    const auto& plan = plans_[g];
    std::vector<at::Tensor> params, grads, lackingParams, lackingGrads;
    std::vector<int64_t> lacking;
    c10::List<bool> fresh;
    for (int64_t i = offsets_[g]; i < offsets_[g + 1]; ++i) {
      if (!present(gradients[i])) {
        continue;
      }
      params.push_back(params_[i]);
      grads.push_back(*gradients[i]);
      size_t have = 0;
      for (const auto& key : keys_[i]) {
        have += state_[i].contains(key) ? 1 : 0;
      }
      // the state this parameter lacks, made as torch makes it at a parameter's first step
      fresh.push_back(have == 0 && !keys_[i].empty());
      if (have < keys_[i].size()) {
        lacking.push_back(i);
        lackingParams.push_back(params_[i]);
        lackingGrads.push_back(*gradients[i]);
      }
    }
    if (params.empty()) {
      continue;
    }
    if (!lacking.empty()) {
      const auto made = gilfree_optim::newState(name_, lackingParams, lackingGrads, plan.names, plan.values);
      size_t at = 0;
      for (int64_t i : lacking) {
        for (const auto& key : keys_[i]) {
          if (!state_[i].contains(key)) {
            state_[i].insert(key, made[at]);
          }
          ++at;
        }
      }
    }
    std::vector<at::Tensor> state;
    for (int64_t i = offsets_[g]; i < offsets_[g + 1]; ++i) {
      if (present(gradients[i])) {
        for (const auto& key : keys_[i]) {
          state.push_back(state_[i].at(key));
        }
      }
    }
    gilfree_optim::groupStep(
        name_, params, grads, state, std::move(fresh), plan.names, plan.values, plan.tensorNames, plan.tensorValues);
  }
}

int64_t NativeLocalOptimizer::applyBefore(const MaybeGradients& gradients, int64_t deadlineMs) {
  HeldParamLocks held(locks_);
  if (deadlineMs >= 0 && wallClockMs() >= deadlineMs) {
    return kLate;
  }
  applyLocked(gradients);
  return kApplied;
}

int64_t NativeLocalOptimizer::step(int64_t contextId, int64_t version, int64_t deadlineMs) {
  if (version < 0) {
    return applyBefore(gradientsFor(contextId, params_), deadlineMs);
  }
  auto grads = gradientsAtVersion(contextId, version);
  if (!grads.has_value()) {
    return kChanged;  // changed since the backward pass checked them
  }
  return applyBefore(gradientsOf(*grads, params_), deadlineMs);
}

int64_t NativeLocalOptimizer::prepare(int64_t contextId, int64_t leaseMs) {
  auto gradients = gradientsFor(contextId, params_);
  std::vector<std::optional<std::string>> sparseErrors;
  {
    std::lock_guard<std::mutex> guard(sparseErrorsMu_);
    sparseErrors = sparseErrors_;
  }
  check(gradients, sparseErrors);
  return parkStep(std::move(gradients), leaseMs, handle_);
}

int64_t NativeLocalOptimizer::commit(int64_t token, int64_t deadlineMs) {
  // checks again under the locks: the values may have changed since the prepare
  return applyBefore(takeStep(token, handle_), deadlineMs);
}

void NativeLocalOptimizer::stepGradients(const MaybeGradients& gradients) {
  HeldParamLocks held(locks_);
  applyLocked(gradients);
}

// --- the ops' kernels ----------------------------------------------------------------------

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  // the steps' ops are answered as RPC functions: their errors leave with the trailer
  // (rpc/worker_error.h)
  m.impl("_optimizer_step", [](int64_t handle, int64_t contextId, int64_t version, int64_t deadlineMs) {
    return withTrailer("in gilfree_rpc::_optimizer_step", [&] {
      return NativeLocalOptimizer::find(handle)->step(contextId, version, deadlineMs);
    });
  });
  m.impl("_optimizer_prepare", [](int64_t handle, int64_t contextId, int64_t leaseMs) {
    return withTrailer("in gilfree_rpc::_optimizer_prepare", [&] {
      return NativeLocalOptimizer::find(handle)->prepare(contextId, leaseMs);
    });
  });
  m.impl("_optimizer_commit", [](int64_t handle, int64_t token, int64_t deadlineMs) {
    return withTrailer("in gilfree_rpc::_optimizer_commit", [&] {
      return NativeLocalOptimizer::find(handle)->commit(token, deadlineMs);
    });
  });
  m.impl("_optimizer_drop", [](int64_t handle, int64_t token) {
    return withTrailer("in gilfree_rpc::_optimizer_drop", [&] {
      const bool dropped = dropStep(token, handle);  // forgotten even when the optimizer is gone
      NativeLocalOptimizer::find(handle);
      return dropped;
    });
  });
  m.impl("_optimizer_step_gradients", [](int64_t handle, const c10::List<std::optional<at::Tensor>>& gradients) {
    NativeLocalOptimizer::find(handle)->stepGradients(MaybeGradients(gradients.begin(), gradients.end()));
  });
}

}  // namespace gilfree_rpc
