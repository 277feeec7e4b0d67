// One optimizer step of one parameter group, written once per optimizer (steps/<name>.cpp):
// the parameter state it keeps (torch's keys, in torch's order of creation), how that state
// starts, and the step itself (the split by device and dtype, the kernel calls, dense and
// sparse). Three ops serve every optimizer by name (schemas in ops.cpp): state_keys,
// new_state and group_step. functional_optim's classes call them for their default (fused)
// implementation, eagerly, under TorchScript and under torch.compile; the plugin's native
// local optimizers call them through the dispatcher. The single-tensor and multi-tensor
// Python paths of functional_optim stay as the reference the tests compare against.
//
// A group's hyperparameters and flags reach the ops by name, as two lists (names, values;
// a flag as 1.0 or 0.0): the names are functional_optim's (lr, beta1, beta2, amsgrad...).
#pragma once

#include "group_step_ops.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/dispatch/Dispatcher.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace gilfree_optim {

// A group's values as a step reads them. A hyperparameter given as a Tensor (`tensorNames`,
// `tensors`) is read from its Tensor when this is made (its value now, as torch.optim reads a
// Tensor lr at each step), whatever `values` says for it.
class GroupValues {
 public:
  GroupValues(
      const std::vector<std::string>& names,
      const std::vector<double>& values,
      const std::vector<std::string>& tensorNames = {},
      at::TensorList tensors = {});
  // The value of `name`; raises ValueError naming it when the group has no such value.
  double get(const char* name) const;
  bool flag(const char* name) const {
    return get(name) != 0;
  }
  // Whether the group has a value named `name` (a flag left None has none).
  bool has(const char* name) const;
  // The 1-element Tensor that hyperparameter `name` was given as, if it was.
  std::optional<at::Tensor> tensor(const char* name) const;

 private:
  const std::vector<std::string>& names_;
  std::vector<double> values_;
  std::vector<std::string> tensorNames_;
  std::vector<at::Tensor> tensors_;
};

using Positions = std::vector<size_t>;

// The parameters of one step, with their gradients and state.
struct Group {
  std::vector<at::Tensor> params, grads;
  // state[k]: params[k]'s state tensors, in the order of its keys.
  std::vector<std::vector<at::Tensor>> state;
  // fresh[k]: params[k]'s state was created for this step (its first).
  std::vector<bool> fresh;
  bool sparse = false;  // some gradient is sparse (COO)

  // Positions grouped by (device, dtype), in first-seen order: one fused call each.
  std::vector<Positions> parts() const;
  // The state tensors at position `j` of the keys of the parameters at `positions`.
  std::vector<at::Tensor> column(size_t j, const Positions& positions) const;
};

std::vector<at::Tensor> take(const std::vector<at::Tensor>& tensors, const Positions& positions);

struct OptimizerDef {
  // torch's state keys of a parameter with `dim` dimensions, in torch's order of creation.
  std::vector<std::string> (*keys)(int64_t dim, const GroupValues& v);
  // A parameter's state at its first step (a tensor per key; `grad`: its first gradient).
  std::vector<at::Tensor> (*create)(const at::Tensor& param, const at::Tensor& grad, const GroupValues& v);
  // One step of `group` (checked by the caller: every gradient fits its parameter, sparse
  // only where the optimizer takes sparse gradients; every state tensor present). Runs
  // under no_grad, below autograd and ADInplaceOrView: its ops bump no version counter (the
  // group step bumps each parameter and state tensor once when it returns).
  void (*step)(Group& group, const GroupValues& v);
  // The device types whose tensors `step` takes ("cpu"; "cuda" too where it calls torch's
  // fused kernels, which have CUDA builds).
  std::vector<std::string> devices;
  // Whether `step` steps every strided layout exactly itself (it runs torch's ops, or kernels
  // that address each tensor by its own strides): then the group step hands it the tensors as
  // they are. Otherwise (the default) `step` may assume, for each parameter with a dense
  // gradient, that the parameter is dense (non-overlapping, no gaps) and that its gradient
  // and every state tensor of its shape have its strides (torch's _fused_* CPU kernels walk
  // all of a call's tensors by one flat index: a channels_last parameter with a contiguous
  // gradient would pair the wrong elements); the group step routes any other parameter
  // through dense copies in the parameter's layout (groupStepKernel).
  bool anyLayout = false;
  // Its hyperparameters that torch.optim takes as None or one of some strings (Muon's
  // adjust_lr_fn), each with its strings, in order: a group's values hold None as 0 and
  // strings[k] as k + 1. The one table of them: the op hyperparameter_choices gives it to
  // functional_optim's Python (read at import).
  std::vector<std::pair<std::string, std::vector<std::string>>> choices = {};
};

// Registers `def` under `name` when the library loads (each steps/<name>.cpp does).
bool registerOptimizer(const char* name, OptimizerDef def);
// Raises ValueError naming the registered optimizers for an unknown name.
const OptimizerDef& optimizerNamed(const std::string& name);

// torch's scalar dtype for step counters and the like (torch.optim's _get_scalar_dtype()):
// float64 when that is the default dtype, else float32.
at::ScalarType scalarDtype();
// A parameter's step counter at its first step, holding 0, by torch's rule for the group's
// `fused` flag: a group whose `fused` is given as 0 (False: torch's single-tensor and foreach
// implementations, whose state functional_optim's Python paths ask new_state for with
// `fused` set to 0) gets torch's 0-dim counter of its scalar dtype on the CPU; any other (the
// fused implementations: `fused` 1, or not given where the group step is the default) a 0-dim
// float32 counter on the parameter's device, as torch's fused kernels take it.
at::Tensor newStep(const at::Tensor& param, const GroupValues& v);
// `step += 1` for each step counter, as torch's `torch._foreach_add_(state_steps, 1)`
// before its fused kernels: a float32/float64 counter on the CPU in place (in its own
// dtype), the others (CUDA) with _foreach_add_ (a dispatcher
// call per 0-dim tensor costs microseconds: 0.14 ms for 50 counters, as much as a fused
// step of 50 x 16K floats).
void countSteps(at::TensorList steps);

// Calls fn on pieces of `positions` (parameters of one device and dtype) that together cover
// them once, for torch's fused kernels, which start a parallel region per tensor (their
// per-element loop is torch's; results do not depend on the pieces): large or non-CPU
// parameters in one call; small CPU parameters (below kSmallNumel elements each) in runs of
// about equal size, one per intra-op thread, each run on one thread (SGD with momentum on 2
// threads, 200 parameters of 4K floats: 0.48 ms against 0.83 ms in one call of torch's
// kernel; 50 of 16K: 0.34 against 0.38 ms). The threads carry the caller's thread-local
// state (grad mode, dispatch keys); fn's exceptions reach the caller.
constexpr int64_t kSmallNumel = 128 * 1024;
void inPieces(const std::vector<at::Tensor>& params, const Positions& positions,
              const std::function<void(const Positions&)>& fn);
// A tensor like `param` (shape, dtype, device, memory format) filled with `value`.
at::Tensor like(const at::Tensor& param, double value);

// A Python number as torch's Python API hands it to an op: a wrapped-number tensor. A group
// step that repeats torch.optim's ops calls `t.mul_(number(x))` where torch's code reads
// `t.mul_(x)`: that is the Tensor overload (mul_.Tensor), whose reduced-precision CPU kernels
// round otherwise than the Scalar overload's (seen on bfloat16, torch 2.13).
inline at::Tensor number(const at::Scalar& value) {
  return at::native::wrapped_scalar_tensor(value);  // ATen/ScalarOps.h (checked on torch 2.13)
}

// An op of this library (a fused kernel), looked up by name.
template <typename Fn>
c10::TypedOperatorHandle<Fn> kernel(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<Fn>();
}
using L = at::TensorList;

// dense += sparse * alpha, as dense.add_(sparse, alpha) in torch's CPU kernels, also where
// `dense` has a storage offset: torch 2.13's kernel for a sparse tensor of no dense dimension
// (add_dense_sparse_worker_non_hybrid_cpu: a 1-D parameter, or a gradient sparse in every
// dimension) adds the offset twice, and writes outside the storage (a packed state tensor is
// a view at an offset of its buffer). Such a `dense` is added to through an alias of its
// elements at offset 0 (at::from_blob: the same memory, the same kernel and arithmetic).
void addSparseInto(const at::Tensor& dense, const at::Tensor& sparse, const at::Scalar& alpha = 1);

// Whether the fused sparse kernels (cpu/fused_sparse.cpp) step this parameter: a contiguous
// CPU tensor of a fused dtype.
bool sparseKernelUsable(const at::Tensor& param);

}  // namespace gilfree_optim
