// The native local optimizer: one owner's share of a DistributedOptimizer, stepped in C++
// without the GIL and without TorchScript. It keeps the parameters, each group's values and
// each parameter's state as functional_optim's GroupedState does, and steps a group through
// its optimizer's group step (the ops gilfree_optim::new_state and group_step, by name, through
// the dispatcher: functional_optim/csrc/group_step.h), which the functional_optim class runs by
// default: its results are bitwise the class's.
//
// The constructor takes what functional_optim.configure() gives (plugin/optim/_native.py): the
// parameters in groups; each group's hyperparameters (functional names), flags, Tensor
// hyperparameters (read with .item() before every step) and sparse-gradient RuntimeError
// message (None: taken); the dense-gradient message (None: taken); the state torch creates at
// construction (Adagrad's), kept as it is.
//
// Each object has a handle (unique in the process, never reused) in a registry of weak
// references; it lives as long as the Python LocalOptimizer (kept by its caller's RRef), and the
// ops reach it by handle, locally and by RPC (rpc/rpc_functions.h). Every call that reads or
// writes the parameters, their state or the group values holds the parameters' locks
// (step_lock.h), but prepare, which only reads and checks. Errors (see ops.cpp) begin with the
// Python exception type, which the caller rebuilds from the text (plugin/_errors.py); the
// messages are functional_optim's; nothing changes when a check fails.
#pragma once

#include "optim/step_lock.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/custom_class.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace gilfree_rpc {

// The outcome of an owner's part of a step, one table for every protocol (the caller's
// Python mirrors it: plugin/optim/_owners.py).
enum StepStatus : int64_t {
  kApplied = 0,
  kChanged = 1,     // the gradients changed since the backward pass checked them: nothing applied
  kLate = 2,        // the owner reached its locks after the deadline: nothing applied
  kRefused = 3,     // the optimizer's check failed (step in the pass): nothing applied
  kNotReached = 4,  // no part of the pass ran there (step in the pass): no gradient to apply
};

// Milliseconds since the Unix epoch on the system clock: what a step's deadline is compared with.
inline int64_t wallClockMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

using ParamState = c10::Dict<std::string, at::Tensor>;
using Hyperparameters = c10::Dict<std::string, double>;
using Options = c10::Dict<std::string, std::optional<bool>>;
using TensorHyperparameters = c10::Dict<std::string, at::Tensor>;
using OptimizerState = c10::Dict<int64_t, ParamState>;
using MaybeGradients = std::vector<std::optional<at::Tensor>>;

class LocalOptimizer : public torch::CustomClassHolder {
 public:
  LocalOptimizer(
      std::string name,
      const std::vector<std::vector<at::Tensor>>& groups,
      const c10::List<Hyperparameters>& hparams,
      const c10::List<Options>& options,
      const c10::List<TensorHyperparameters>& tensorHparams,
      const std::vector<std::optional<std::string>>& sparseErrors,
      std::optional<std::string> denseError,
      const OptimizerState& state);

  // Adds `self` to the registry under its handle (called once, right after construction).
  static c10::intrusive_ptr<LocalOptimizer> registered(c10::intrusive_ptr<LocalOptimizer> self);
  // The object with `handle` in this process; raises RuntimeError naming the handle when it
  // is gone.
  static c10::intrusive_ptr<LocalOptimizer> find(int64_t handle);
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

  std::tuple<OptimizerState, c10::List<Hyperparameters>, c10::List<Options>> state();
  // Replaces all state with copies of `state` (torch's casting rules) and sets each group's
  // values; checks every index, shape and name first.
  void loadState(
      const OptimizerState& state,
      const c10::List<Hyperparameters>& hparams,
      const c10::List<Options>& options,
      const std::vector<std::optional<std::string>>& sparseErrors);
  std::tuple<c10::List<Hyperparameters>, c10::List<Options>> hyperparameters();
  void setGroup(
      int64_t group,
      const Hyperparameters& hparams,
      const Options& options,
      const TensorHyperparameters& tensorHparams,
      std::optional<std::string> sparseError);
  bool acceptsSparse();

 private:
  struct Checked {
    std::vector<std::vector<size_t>> present;  // per group: flat indices with a gradient
  };

  // check_gradients: the count, then each gradient in flat order (shape, dtype, device;
  // sparse only where the group's sparse error is None; dense only without a dense error).
  Checked check(const MaybeGradients& gradients, const std::vector<std::optional<std::string>>& sparseErrors) const;
  // Checks and applies; the caller holds the locks.
  void applyLocked(const MaybeGradients& gradients);
  // Takes the locks; then applyLocked unless the deadline has passed. kApplied or kLate.
  int64_t applyBefore(const MaybeGradients& gradients, int64_t deadlineMs);
  void syncTensorHyperparametersLocked();
  std::tuple<c10::List<Hyperparameters>, c10::List<Options>> valuesLocked() const;
  // The state keys of every parameter of group `g` with its current values.
  void setKeysLocked(size_t g);
  int64_t groupOf(int64_t index) const;
  Hyperparameters updatedHyperparameters(int64_t group, const Hyperparameters& updates) const;
  Options updatedOptions(int64_t group, const Options& updates) const;

  const int64_t handle_;
  const std::string name_;
  std::vector<at::Tensor> params_;  // flat
  std::vector<int64_t> offsets_;    // group g: offsets_[g] <= i < offsets_[g + 1]
  std::vector<Hyperparameters> hparams_;
  std::vector<Options> options_;
  std::vector<TensorHyperparameters> tensorHparams_;
  std::vector<ParamState> state_;              // per flat index
  std::vector<std::vector<std::string>> keys_;  // per flat index: its state keys, in order
  const std::optional<std::string> denseError_;
  const std::vector<std::shared_ptr<ParamLock>> locks_;
  // Guards sparseErrors_ for a prepare's check, which holds no parameter lock (writers hold
  // both, the parameters' locks first).
  mutable std::mutex sparseErrorsMu_;
  std::vector<std::optional<std::string>> sparseErrors_;
};

}  // namespace gilfree_rpc
