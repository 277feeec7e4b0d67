// The schemas of functional_optim's ops, declared in one place.
//
// * The group steps (group_step.h): state_keys, new_state, group_step, group_step_packed and
//   group_step_devices serve every optimizer by name; check_gradients is the check every step
//   makes first, check_param_count the one every constructor makes (gradient_check.cpp). functional_optim's Python calls them (ops.py); the
//   plugin's native local optimizers call them from C++ through group_step_ops.h.
// * This package's kernels, <name>_ (fused_optim.h and one file per optimizer,
//   cpu/fused_<name>.cpp, compiled once per instruction set; each also has a meta kernel that
//   only checks its arguments): the group steps of the optimizers that torch has no fused
//   kernel for call them (SGD, Adam, AdamW and Adagrad run torch's). Each performs one whole
//   step of `params` in place: it checks every list before mutating anything, increments the
//   step counters (`state_steps`, float32/float64 CPU scalars, one per parameter) and updates
//   parameters and state with torch.optim's single-tensor math. Tensors of one parameter share
//   its dtype (float32, float64, bfloat16, float16: the last two with float32 math), device and
//   shape; optional state lists are empty when their option is off.
//
// Schemas mark what each op mutates, so the default alias analysis (from the schema) applies,
// but for check_gradients and check_param_count, which return nothing and mutate nothing: CONSERVATIVE, so that
// TorchScript never drops a call of it as dead code.
#include <torch/library.h>

TORCH_LIBRARY(gilfree_optim, m) {
  m.def(
      "rmsprop_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] grad_avgs, "
      "Tensor(d!)[] momentum_buffers, Tensor(e!)[] state_steps, *, float lr, float alpha, float eps, "
      "float weight_decay, float momentum, bool centered, bool maximize) -> ()");
  m.def(
      "adamax_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_infs, "
      "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float eps, float weight_decay, "
      "bool maximize) -> ()");
  m.def(
      "adadelta_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] square_avgs, Tensor(c!)[] acc_deltas, "
      "Tensor(d!)[] state_steps, *, float lr, float rho, float eps, float weight_decay, bool maximize) -> ()");
  m.def(
      "rprop_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] prevs, Tensor(c!)[] step_sizes, "
      "Tensor(d!)[] state_steps, *, float step_size_min, float step_size_max, float etaminus, "
      "float etaplus, bool maximize) -> ()");
  m.def(
      "nadam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] mu_products, Tensor(e!)[] state_steps, *, float lr, float beta1, float beta2, "
      "float weight_decay, float momentum_decay, float eps, bool decoupled_weight_decay, "
      "bool maximize) -> ()");
  m.def(
      "radam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float weight_decay, float eps, "
      "bool decoupled_weight_decay, bool maximize) -> ()");
  // ASGD (cpu/fused_asgd.cpp): `mus`, `etas` are one-element tensors per parameter (any
  // floating dtype, CPU), read before the update and rewritten from the new step count.
  m.def(
      "asgd_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] axs, Tensor(c!)[] mus, Tensor(d!)[] etas, "
      "Tensor(e!)[] state_steps, *, float lambd, float lr, float t0, float alpha, float weight_decay, "
      "bool maximize) -> ()");
  // Sparse-gradient steps (cpu/fused_sparse.cpp): `grads` are sparse COO tensors; the
  // parameters (and state) dense and contiguous; only the rows present are read and written.
  m.def(
      "sparse_adam_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] exp_avgs, Tensor(c!)[] exp_avg_sqs, "
      "Tensor(d!)[] state_steps, *, float lr, float beta1, float beta2, float eps, bool maximize) -> ()");
  m.def(
      "sparse_adagrad_(Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] state_sums, Tensor(c!)[] state_steps, "
      "*, float lr, float lr_decay, float eps, bool maximize) -> ()");
  m.def("sparse_sgd_(Tensor(a!)[] params, Tensor[] grads, *, float lr, bool maximize) -> ()");

  // One step of one parameter group of `optimizer` ("adam", "sgd", ...: the names registered
  // by steps/<name>.cpp), as functional_optim's default (fused) implementation takes it
  // (group_step.h). `names`, `values`: the group's hyperparameters and flags (a flag as 1.0
  // or 0.0), by functional_optim's names.
  // The device types whose parameters `optimizer`'s group step takes ([] for a name that has
  // no group step here).
  m.def("group_step_devices(str optimizer) -> str[]");
  // The hyperparameters that torch.optim takes as None or one of some strings, each with its
  // strings in order (a group's values hold None as 0, the k-th string as k + 1): the
  // optimizers' own tables (OptimizerDef::choices, group_step.h), which functional_optim reads
  // at import.
  m.def("hyperparameter_choices() -> Dict(str, str[])");
  // Whether the fused implementations take parameters of `dtype` (fused_optim.h: fusedDtype).
  m.def("fused_dtype(ScalarType dtype) -> bool");
  // The state keys of a parameter of `dim` dimensions, in torch's order of creation.
  m.def("state_keys(str optimizer, int dim, str[] names, float[] values) -> str[]");
  // The state of each of `params` at its first step (`grads`: those gradients), parameter
  // after parameter, each in the order of its keys.
  m.def("new_state(str optimizer, Tensor[] params, Tensor[] grads, str[] names, float[] values) -> Tensor[]");
  // One step: `state` holds every parameter's state tensors (new_state's layout); `fresh[k]`:
  // params[k]'s state was made by new_state for this step. Gradients checked by the caller
  // (shape, dtype, device like the parameter; sparse only where the optimizer takes them).
  // `tensor_names`, `tensor_values`: the hyperparameters given as 1-element Tensors (their
  // values are in `values` too), for a step that computes with them as torch does.
  m.def(
      "group_step(str optimizer, Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] state, bool[] fresh, "
      "str[] names, float[] values, str[] tensor_names, Tensor[] tensor_values) -> ()");
  // group_step on a packed group: its state tensors are views of `buffers` where `layout` says
  // (group_step.cpp); the rest as group_step.
  m.def(
      "group_step_packed(str optimizer, Tensor(a!)[] params, Tensor[] grads, Tensor(b!)[] buffers, Tensor layout, "
      "bool[] fresh, str[] names, float[] values, str[] tensor_names, Tensor[] tensor_values) -> ()");
  // The check every step makes of its gradients (gradient_check.cpp): every gradient fits its
  // parameter (group_step_ops.h: gradientFits) and its group's rule: a sparse one only where
  // sparse_errors[g] is None, a dense one only where dense_error is None. `offsets`: group g
  // holds params offsets[g] <= i < offsets[g + 1]; messages name gradient `first_index + i`.
  // gradient_error answers the first failure as (its Python exception type, "ValueError" or
  // "RuntimeError", its message), ("", "") when none fails; check_gradients raises it.
  m.def(
      "gradient_error(Tensor[] params, Tensor?[] gradients, int[] offsets, str?[] sparse_errors, str? dense_error, "
      "int first_index=0) -> (str, str)");
  m.def(torch::schema(
      "check_gradients(Tensor[] params, Tensor?[] gradients, int[] offsets, str?[] sparse_errors, str? dense_error, "
      "int first_index=0) -> ()",
      c10::AliasAnalysisKind::CONSERVATIVE));
  // The check every optimizer makes of its parameters' number (gradient_check.cpp):
  // check_param_count raises ValueError("optimizer got an empty parameter list"), torch's, for
  // a `count` of 0 (or less), CONSERVATIVE as check_gradients; param_count_error answers that
  // message ("" when `count` passes), for TorchScript code, which raises it itself (as
  // gradient_error).
  m.def(torch::schema("check_param_count(int count) -> ()", c10::AliasAnalysisKind::CONSERVATIVE));
  m.def("param_count_error(int count) -> str");
  // The words of those checks' messages (gradient_check.cpp), for functional_optim's Python
  // messages: a dtype as Python prints it ("torch.float32"), a tensor as "shape [4, 5], dtype
  // torch.float32, device cpu" (", sparse" for a sparse COO tensor; "shape (nested)").
  m.def("dtype_name(ScalarType dtype) -> str");
  m.def("describe_tensor(Tensor t) -> str");
}
