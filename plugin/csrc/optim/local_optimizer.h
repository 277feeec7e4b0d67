// The native local optimizer: one owner's share of a DistributedOptimizer over one of the
// eleven built-in optimizers, stepped in C++ through the fused kernels (optimizer_steps.h),
// without the GIL and without TorchScript.
//
// torch.classes.dist_engine.LocalOptimizer(name, groups, hparams, options, tensor_hparams,
// defaults) holds what a functional_optim eager instance holds in its GroupedState after
// construction (plugin/optim/_native.py builds that instance first, for its validation and
// param-group parsing, and passes its values): the parameters in groups, each group's
// hyperparameters (functional names: lr, beta1, ...), flags, and the 1-element Tensors that
// some hyperparameters follow (read with .item() before every step, as
// GroupedState.sync_tensor_hparams), and per-parameter state with torch's keys.
//
// Each object gets a handle (unique in the process, never reused) in a per-process registry
// of weak references: the object lives as long as its owners (the Python LocalOptimizer, kept
// by the RRef its caller holds), and the ops below reach it by handle, locally and by RPC
// (rpc_functions.h). A handle whose object is gone raises a RuntimeError naming the handle
// and this worker.
//
// Locks: every call that reads or writes the parameters, their state or the group values holds
// the parameters' locks (step_lock.h: shared with every other local optimizer over the same
// parameters in this process, taken in one global order, waited for without the GIL). A
// prepare reads and checks without them.
//
// Errors: the text of every error raised here begins with the Python exception type it stands
// for ("ValueError: gradients[3]: expected shape [4, 5], ..."; "RuntimeError: ..."): over RPC
// only the text survives, and the caller rebuilds the type from it (plugin/_errors.py). The
// messages after the type are functional_optim's (functional_optim/_validation.py,
// _state.py). Nothing changes when a check fails.
#pragma once

#include "optim/optimizer_steps.h"
#include "optim/step_lock.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>
#include <torch/custom_class.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

namespace dist_engine {

using TensorHyperparameters = c10::Dict<std::string, at::Tensor>;
using OptimizerState = c10::Dict<int64_t, ParamState>;
using MaybeGradients = std::vector<std::optional<at::Tensor>>;

class LocalOptimizer : public torch::CustomClassHolder {
 public:
  // `name`: one of functional_optim._kernels.OPTIMIZERS. `groups[g]`: group g's parameters
  // (flat index: group after group). `hparams`, `options`, `tensorHparams`: one entry per
  // group, validated by the caller, every group stepping through a fused kernel (stepsFused).
  // `defaults`: the constructor's values that apply to every group (Adagrad's
  // "initial_accumulator_value": every sum starts from it, as in torch). Creates what the
  // optimizer creates at construction (Adagrad's 'step' and 'sum').
  LocalOptimizer(
      const std::string& name,
      const std::vector<std::vector<at::Tensor>>& groups,
      const c10::List<Hyperparameters>& hparams,
      const c10::List<Options>& options,
      const c10::List<TensorHyperparameters>& tensorHparams,
      const Hyperparameters& defaults);

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

  // The ops (see ops.cpp for their contracts).
  void step(int64_t contextId);
  int64_t prepare(int64_t contextId, int64_t leaseMs);
  void commit(int64_t token);
  int64_t stepChecked(int64_t contextId, int64_t version, int64_t deadlineMs);
  // The step in the backward pass (pass_end.h): step(contextId) if, once it holds
  // the locks, deadlineMs (ms since the Unix epoch; -1: none) has not passed. Returns 0
  // (applied) or 2 (late: nothing applied); bad gradients raise, nothing applied.
  int64_t stepBefore(int64_t contextId, int64_t deadlineMs);
  void stepGradients(const MaybeGradients& gradients);
  std::tuple<OptimizerState, c10::List<Hyperparameters>, c10::List<Options>> state();
  void loadState(
      const OptimizerState& state,
      const c10::List<Hyperparameters>& hparams,
      const c10::List<Options>& options);
  std::tuple<c10::List<Hyperparameters>, c10::List<Options>> hyperparameters();
  void setGroup(
      int64_t group,
      const Hyperparameters& hparams,
      const Options& options,
      const TensorHyperparameters& tensorHparams);
  bool acceptsSparse();

 private:
  struct Checked {
    std::vector<std::vector<size_t>> present;  // per group: flat indices with a gradient
    std::vector<bool> sparse;                  // per group: one of them is sparse
  };

  // check_gradients: the count, then each gradient in flat order (shape, dtype, device;
  // sparse only where `sparseErrors[g]` is nullopt; dense only where denseErrorFor(kind_) is
  // nullopt, i.e. not for SparseAdam). Raises the first failure.
  Checked check(const MaybeGradients& gradients, const std::vector<std::optional<std::string>>& sparseErrors) const;
  // Checks and applies; the caller holds the locks.
  void applyLocked(const MaybeGradients& gradients);
  // Takes the locks; then applyLocked unless deadlineMs (-1: none) has passed. Returns 0
  // (applied) or 2 (late: nothing applied).
  int64_t applyBefore(const MaybeGradients& gradients, int64_t deadlineMs);
  void syncTensorHyperparametersLocked();
  int64_t groupOf(int64_t index) const;
  void checkGroup(int64_t group) const;
  // A copy of `current` with `updates` (unknown names: ValueError, functional_optim's message).
  Hyperparameters updatedHyperparameters(int64_t group, const Hyperparameters& updates) const;
  Options updatedOptions(int64_t group, const Options& updates) const;

  const int64_t handle_;
  const OptimizerKind kind_;
  std::vector<at::Tensor> params_;  // flat
  std::vector<int64_t> offsets_;    // group g: offsets_[g] <= i < offsets_[g + 1]
  std::vector<Hyperparameters> hparams_;
  std::vector<Options> options_;
  std::vector<TensorHyperparameters> tensorHparams_;
  std::vector<ParamState> state_;  // per flat index
  double initialAccumulatorValue_ = 0.0;
  const std::vector<std::shared_ptr<ParamLock>> locks_;
  // Guards sparseErrors_ for a prepare's check, which holds no parameter lock (writers hold
  // both, the parameters' locks first).
  mutable std::mutex sparseErrorsMu_;
  std::vector<std::optional<std::string>> sparseErrors_;
};

}  // namespace dist_engine
