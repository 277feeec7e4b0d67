// One optimizer step of one parameter group, as functional_optim's default path takes it.
//
// The native local optimizer (local_optimizer.h) keeps its parameters, their state and each
// group's values the way functional_optim's GroupedState keeps them, and calls stepGroup once
// per group that has gradients. What stepGroup does is what that optimizer's `_group_step`
// does for a group whose implementation is "fused" (functional_optim/_state.py,
// choose_group_impl): the same lazy state (GroupedState.init_state: 'step' a float32 0-dim
// tensor on the parameter's device, then the optimizer's fills in torch's key order), the same
// split by device and dtype (split_by_device_dtype), the same kernel calls in the same order:
//
// * sgd, adam, adamw, adagrad: torch's fused kernels (at::_fused_sgd_, _fused_adam_,
//   _fused_adamw_, _fused_adagrad_), the step counters first counted with
//   at::_foreach_add_(steps, 1) where functional_optim does that;
// * rmsprop, adamax, adadelta, rprop, nadam, radam: functional_optim's kernels
//   gilfree_optim::<name>_ (functional_optim/csrc), called through the dispatcher (the
//   library is loaded by importing functional_optim; they count the steps themselves).
//
// So the results are bitwise those of a functional_optim eager instance with the same
// arguments. Sparse (COO) gradients: SGD and Adagrad step a group with any sparse gradient
// with the single-tensor code of functional_optim's sgd() and adagrad() (ported to ATen calls,
// the same ops in the same order), in which a sparse gradient of a contiguous CPU parameter
// goes to the fused sparse kernel gilfree_optim::sparse_sgd_ (no momentum, no weight decay)
// or sparse_adagrad_ (no weight decay), as there; SparseAdam steps only sparse gradients, with
// gilfree_optim::sparse_adam_ (denseErrorFor); every other optimizer rejects them
// (sparseErrorFor, checked before anything changes). (On CUDA functional_optim steps such a group with its multi-tensor
// code, which makes the same per-tensor calls for sparse gradients; not checked on CUDA.)
#pragma once

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

namespace dist_engine {

// The eleven optimizers (functional_optim._kernels.OPTIMIZERS and SparseAdam).
enum class OptimizerKind {
  kSgd,
  kAdam,
  kAdamW,
  kAdagrad,
  kRmsprop,
  kAdamax,
  kAdadelta,
  kRprop,
  kNAdam,
  kRAdam,
  kSparseAdam
};

// The kind named `name` ("sgd", "adam", ...); raises ValueError for another name.
OptimizerKind optimizerKindNamed(const std::string& name);

// One parameter's state: torch's keys, in torch's order of creation.
using ParamState = c10::Dict<std::string, at::Tensor>;
using Hyperparameters = c10::Dict<std::string, double>;
using Options = c10::Dict<std::string, std::optional<bool>>;

// The message of the RuntimeError for a sparse gradient in a group with these values
// (the optimizer class's `_sparse_error` with its flags' implementation), or nullopt when
// the group takes sparse gradients (SGD and Adagrad, unless fused=True; Adagrad not with
// weight_decay != 0).
std::optional<std::string> sparseErrorFor(OptimizerKind kind, const Hyperparameters& hparams, const Options& options);

// The message of the RuntimeError for a dense gradient (SparseAdam's, torch's text), or
// nullopt when the optimizer takes dense gradients (all the others).
std::optional<std::string> denseErrorFor(OptimizerKind kind);

// Whether a group with these options steps dense gradients through a fused kernel (what
// GroupedState.choose_group_impl gives for parameters that a fused kernel takes, which the
// group's parameters are when it was built native): fused=True, or foreach and fused both
// unset.
bool stepsFused(const Options& options);

// `options[name]` as a bool (unset or None counts as false).
bool flagOf(const Options& options, const std::string& name);

// What the optimizer creates at construction for a group (Adagrad: 'step' and 'sum', the
// sum filled with `initialAccumulatorValue`, the constructor's value; the others: nothing).
void initStateAtConstruction(
    OptimizerKind kind,
    const std::vector<at::Tensor>& params,
    std::vector<ParamState>& states,
    double initialAccumulatorValue);

// One step of the parameters `params` (all of one group, each with its gradient in `grads`,
// checked by the caller: the parameter's shape, dtype and device; sparse only when the
// group takes sparse gradients) with the group's `hparams` and `options`; `states[k]` is the
// state of params[k] (created here as needed). `sparse`: some gradient is sparse.
// `initialAccumulatorValue`: Adagrad's fill for a sum created now. Runs under no_grad; the
// caller holds the parameters' locks.
void stepGroup(
    OptimizerKind kind,
    const Hyperparameters& hparams,
    const Options& options,
    const std::vector<at::Tensor>& params,
    const std::vector<at::Tensor>& grads,
    std::vector<ParamState>& states,
    bool sparse,
    double initialAccumulatorValue);

}  // namespace dist_engine
