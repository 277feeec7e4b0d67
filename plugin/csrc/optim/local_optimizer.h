// The native local optimizer's steps: one owner's share of a DistributedOptimizer, stepped in C++
// without the GIL and without TorchScript.
//
// It keeps what the steps need and nothing else: the parameters, each group's values as its
// group step takes them (functional_optim.configuration.StepPlan: names, values, the Tensor
// hyperparameters it follows, the sparse-gradient rule), each parameter's state tensors, and the
// state keys the op library gives for them. Everything else (the values as the optimizer class
// keeps them, their checks, loading and saving state) is functional_optim's, in Python, on the
// owner (plugin/optim/_native.py), which hands this object a group's plan whenever the group's
// values change (configure), and reads and replaces the state through it. A step checks the
// gradients, makes the state a parameter lacks and runs the group step, all with
// functional_optim's ops (group_step_ops.h: check_param_count at construction, check_gradients,
// new_state, group_step), so its results are bitwise the functional_optim class's default
// (fused) implementation's.
//
// Each object has a handle (unique in the process, never reused) in a registry of weak
// references; it lives as long as the Python NativeLocalOptimizer (kept by its caller's RRef), and the
// step ops reach it by handle, locally and by RPC (rpc/rpc_functions.h). Every call that reads or
// writes the parameters, their state or the plans holds the parameters' locks (param_locks.h), but
// prepare, which only reads and checks. Errors are typed c10 errors (ValueError for a gradient
// that does not fit, RuntimeError for a sparse one it does not take); the steps' ops append the
// error trailer (rpc/worker_error.h), from which a caller over RPC rebuilds the type
// (plugin/_errors.py); nothing changes when a check fails.
#pragma once

#include "param_locks.h"
#include "optim/step_status.h"

#include <ATen/core/Dict.h>
#include <torch/custom_class.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace gilfree_rpc {

// Milliseconds since the Unix epoch on the system clock: what a step's deadline is compared with.
inline int64_t wallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using ParamState = c10::Dict<std::string, at::Tensor>;
using OptimizerState = c10::Dict<int64_t, ParamState>;
using MaybeGradients = std::vector<std::optional<at::Tensor>>;

class NativeLocalOptimizer : public torch::CustomClassHolder {
 public:
  // `name`: the optimizer's name in the op library; `groups`: the parameters, group after group
  // (flat indices number them in this order); `denseError`: the RuntimeError message for a dense
  // gradient (SparseAdam's), or none. The groups' plans come with configure.
  NativeLocalOptimizer(std::string name, const std::vector<std::vector<at::Tensor>>& groups, std::optional<std::string> denseError);

  // Adds `self` to the registry under a new handle (called once, right after construction;
  // handle_registry.h).
  static c10::intrusive_ptr<NativeLocalOptimizer> registered(c10::intrusive_ptr<NativeLocalOptimizer> self);
  // The object with `handle` in this process; raises RuntimeError naming the handle when it
  // is gone.
  static c10::intrusive_ptr<NativeLocalOptimizer> find(int64_t handle);
  // Removes the registry's entry when the last strong reference goes.
  void release_resources() override;

  int64_t handle() const {
    return handle_;
  }

  // The steps (see ops.cpp for the ops' contracts). Each returns a StepStatus; bad gradients
  // raise (nothing applied). `deadlineMs`: ms since the Unix epoch, -1 for none.
  // One round trip: the context's gradients here (version -1), or the engine's gradients if
  // still at `version` (else kChanged), applied holding the locks before the deadline.
  int64_t step(int64_t contextId, int64_t version, int64_t deadlineMs);
  // Two phases: check and park the context's gradients (no lock), then apply them.
  int64_t prepare(int64_t contextId, int64_t leaseMs);
  int64_t commit(int64_t token, int64_t deadlineMs);
  void stepGradients(const MaybeGradients& gradients);

  // Under the locks, at once: the plans of `groups` (a group's names and values, the Tensor
  // hyperparameters it follows, its sparse-gradient rule: functional_optim's StepPlan), and,
  // when given, all state (flat index -> {key: tensor}: the tensors themselves, as
  // functional_optim made, checked and cast them). Called by plugin.optim.NativeLocalOptimizer only,
  // with values functional_optim validated; checks only that the lists fit.
  void configure(
      const std::vector<int64_t>& groups,
      const std::vector<std::vector<std::string>>& names,
      const std::vector<std::vector<double>>& values,
      const std::vector<std::vector<std::string>>& tensorNames,
      const std::vector<std::vector<at::Tensor>>& tensorValues,
      const std::vector<std::optional<std::string>>& sparseErrors,
      const std::optional<OptimizerState>& state);
  // Copies of the state (parameters that have some), under the locks.
  OptimizerState state();

 private:
  struct Plan {
    std::vector<std::string> names;
    std::vector<double> values;
    std::vector<std::string> tensorNames;
    std::vector<at::Tensor> tensorValues;
  };

  // Raises unless every gradient fits (functional_optim's check_gradients), the error's text
  // led by its Python type.
  void check(const MaybeGradients& gradients, const std::vector<std::optional<std::string>>& sparseErrors) const;
  // Checks and applies; the caller holds the locks.
  void applyLocked(const MaybeGradients& gradients);
  // Takes the locks; then applyLocked unless the deadline has passed. kApplied or kLate.
  int64_t applyBefore(const MaybeGradients& gradients, int64_t deadlineMs);
  // The state keys of every parameter of group `g` with its current plan.
  void setKeysLocked(size_t g);

  int64_t handle_ = -1;  // set by registered()
  const std::string name_;
  const std::vector<at::Tensor> params_;  // flat
  std::vector<int64_t> offsets_;          // group g: offsets_[g] <= i < offsets_[g + 1]
  std::vector<Plan> plans_;               // per group
  std::vector<ParamState> state_;         // per flat index
  std::vector<std::vector<std::string>> keys_;  // per flat index: its state keys, in order
  const std::optional<std::string> denseError_;
  const std::vector<std::shared_ptr<ParamLock>> locks_;
  // Guards sparseErrors_ for a prepare's check, which holds no parameter lock (writers hold
  // both, the parameters' locks first).
  mutable std::mutex sparseErrorsMu_;
  std::vector<std::optional<std::string>> sparseErrors_;
};

}  // namespace gilfree_rpc
