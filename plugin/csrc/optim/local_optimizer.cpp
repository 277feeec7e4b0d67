// The native local optimizer (local_optimizer.h), its registry, and the kernels of its
// by-handle ops (schemas in ops.cpp).
#include "optim/local_optimizer.h"

#include "engine/gradients.h"
#include "optim/prepared_steps.h"
#include "rpc/worker_error.h"

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <atomic>
#include <sstream>
#include <unordered_map>

namespace gilfree_rpc {
namespace {

// --- the registry ------------------------------------------------------------------------

struct Registry {
  std::mutex mu;
  std::unordered_map<int64_t, c10::weak_intrusive_ptr<LocalOptimizer>> entries;
};

Registry& registry() {
  static auto* r = new Registry();  // leaky: RPC threads may call in while the process exits
  return *r;
}

int64_t newHandle() {
  static std::atomic<int64_t> next{1};
  return next++;
}

// --- functional_optim's messages ----------------------------------------------------------

// functional_optim._validation.dtype_name
std::string dtypeName(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kLong: return "torch.int64";
    case at::kInt: return "torch.int32";
    case at::kShort: return "torch.int16";
    case at::kChar: return "torch.int8";
    case at::kByte: return "torch.uint8";
    case at::kBool: return "torch.bool";
    default: return std::string("dtype ") + c10::toString(dtype);
  }
}

std::string shapeText(c10::IntArrayRef sizes) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < sizes.size(); ++i) {
    out << (i ? ", " : "") << sizes[i];
  }
  out << "]";
  return out.str();
}

// functional_optim._validation.describe: "shape [4, 5], dtype torch.float32, device cpu".
std::string describe(const at::Tensor& t) {
  std::string shape = t.is_nested() ? "(nested)" : shapeText(t.sizes());
  return "shape " + shape + ", dtype " + dtypeName(t.scalar_type()) + ", device " + t.device().str() +
      (t.is_sparse() ? ", sparse" : "");
}

// Python's str() of a list of names: "['lr', 'momentum']".
template <typename Dict>
std::string namesOf(const Dict& d) {
  std::string out = "[";
  bool first = true;
  for (const auto& item : d) {
    out += (first ? "'" : ", '") + item.key() + "'";
    first = false;
  }
  return out + "]";
}

// The parameters' locks, held for a scope (taken in the global order, released in reverse).
class Held {
 public:
  explicit Held(const std::vector<std::shared_ptr<ParamLock>>& locks) : locks_(locks) {
    for (const auto& lock : locks_) {
      lock->mutex.lock();
    }
  }
  ~Held() {
    for (auto it = locks_.rbegin(); it != locks_.rend(); ++it) {
      (*it)->mutex.unlock();
    }
  }
  Held(const Held&) = delete;
  Held& operator=(const Held&) = delete;

 private:
  const std::vector<std::shared_ptr<ParamLock>>& locks_;
};

std::vector<at::Tensor> flatten(const std::vector<std::vector<at::Tensor>>& groups) {
  std::vector<at::Tensor> flat;
  for (const auto& group : groups) {
    flat.insert(flat.end(), group.begin(), group.end());
  }
  return flat;
}

// functional_optim's generic ops (functional_optim/csrc/group_step.h), called boxed by name:
// functional_optim loads them (plugin/optim/_native.py imports it first).
c10::IValue callGroupOp(const char* op, std::vector<c10::IValue> args) {
  static std::mutex mu;
  static std::unordered_map<std::string, c10::OperatorHandle> handles;
  std::optional<c10::OperatorHandle> handle;
  {
    std::lock_guard<std::mutex> guard(mu);
    auto it = handles.find(op);
    if (it == handles.end()) {
      it = handles.emplace(op, c10::Dispatcher::singleton().findSchemaOrThrow(op, "")).first;
    }
    handle = it->second;
  }
  torch::jit::Stack stack(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  handle->callBoxed(&stack);
  return stack.empty() ? c10::IValue() : std::move(stack[0]);
}

// A group's values as the ops take them: the hyperparameters, then each flag that is set
// (1.0 or 0.0), by name (functional_optim's GroupedState.set_op_values).
std::pair<std::vector<std::string>, std::vector<double>> opValues(const Hyperparameters& h, const Options& o) {
  std::vector<std::string> names;
  std::vector<double> values;
  for (const auto& item : h) {
    names.push_back(item.key());
    values.push_back(item.value());
  }
  for (const auto& item : o) {
    if (item.value().has_value()) {
      names.push_back(item.key());
      values.push_back(*item.value() ? 1.0 : 0.0);
    }
  }
  return {names, values};
}

// Whether a group with these flags runs the fused implementation (fused=True, or foreach and
// fused both unset): the one a native local optimizer runs.
bool runsFused(const Options& options) {
  auto fused = options.find("fused");
  auto foreach = options.find("foreach");
  const bool fusedSet = fused != options.end() && fused->value().has_value();
  const bool foreachSet = foreach != options.end() && foreach->value().has_value();
  return (fusedSet && *fused->value()) || (!fusedSet && !foreachSet);
}

}  // namespace

// --- construction and the registry --------------------------------------------------------

LocalOptimizer::LocalOptimizer(
    std::string name,
    const std::vector<std::vector<at::Tensor>>& groups,
    const c10::List<Hyperparameters>& hparams,
    const c10::List<Options>& options,
    const c10::List<TensorHyperparameters>& tensorHparams,
    const std::vector<std::optional<std::string>>& sparseErrors,
    std::optional<std::string> denseError,
    const OptimizerState& state)
    : handle_(newHandle()),
      name_(std::move(name)),
      params_(flatten(groups)),
      denseError_(std::move(denseError)),
      locks_(paramLocksFor(params_)),
      sparseErrors_(sparseErrors) {
  TORCH_CHECK_VALUE(
      hparams.size() == groups.size() && options.size() == groups.size() && tensorHparams.size() == groups.size() &&
          sparseErrors.size() == groups.size(),
      "ValueError: LocalOptimizer: expected one dict of hyperparameters, options and Tensor hyperparameters and one "
      "sparse-gradient rule per group (", groups.size(), " groups); got ", hparams.size(), ", ", options.size(), ", ",
      tensorHparams.size(), ", ", sparseErrors.size());
  TORCH_CHECK_VALUE(!params_.empty(), "ValueError: optimizer got an empty parameter list");
  offsets_.push_back(0);
  state_.resize(params_.size());
  keys_.resize(params_.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    offsets_.push_back(offsets_.back() + static_cast<int64_t>(groups[g].size()));
    hparams_.push_back(hparams.get(g).copy());
    options_.push_back(options.get(g).copy());
    tensorHparams_.push_back(tensorHparams.get(g).copy());
    TORCH_CHECK(
        runsFused(options_.back()), "RuntimeError: LocalOptimizer: parameter group ", g,
        " does not run the fused implementation (its foreach and fused flags); a native local optimizer runs only "
        "that one");
    setKeysLocked(g);
  }
  for (const auto& item : state) {
    TORCH_CHECK_VALUE(
        item.key() >= 0 && item.key() < static_cast<int64_t>(params_.size()), "ValueError: LocalOptimizer: state of ",
        "parameter ", item.key(), ", which does not exist");
    state_[item.key()] = item.value().copy();  // the tensors themselves: no copies
  }
}

c10::intrusive_ptr<LocalOptimizer> LocalOptimizer::registered(c10::intrusive_ptr<LocalOptimizer> self) {
  auto& r = registry();
  std::lock_guard<std::mutex> guard(r.mu);
  r.entries.emplace(self->handle_, c10::weak_intrusive_ptr<LocalOptimizer>(self));
  return self;
}

c10::intrusive_ptr<LocalOptimizer> LocalOptimizer::find(int64_t handle) {
  auto& r = registry();
  c10::intrusive_ptr<LocalOptimizer> found;
  {
    std::lock_guard<std::mutex> guard(r.mu);
    auto it = r.entries.find(handle);
    if (it != r.entries.end()) {
      found = it->second.lock();
    }
  }
  TORCH_CHECK(
      found,
      "RuntimeError: ",
      workerError(
          "in a call of a native local optimizer",
          "there is no local optimizer with handle " + std::to_string(handle) +
              " here (it was destroyed with the last reference to it, such as its RRef, or never existed)"));
  return found;
}

void LocalOptimizer::release_resources() {
  auto& r = registry();
  c10::weak_intrusive_ptr<LocalOptimizer> entry(c10::intrusive_ptr<LocalOptimizer>{});
  {
    std::lock_guard<std::mutex> guard(r.mu);
    auto it = r.entries.find(handle_);
    if (it != r.entries.end()) {
      entry = std::move(it->second);  // released after the mutex
      r.entries.erase(it);
    }
  }
}

// --- checks ----------------------------------------------------------------------------

LocalOptimizer::Checked LocalOptimizer::check(
    const MaybeGradients& gradients,
    const std::vector<std::optional<std::string>>& sparseErrors) const {
  TORCH_CHECK_VALUE(
      gradients.size() == params_.size(), "ValueError: step: expected ", params_.size(),
      " gradients (one per parameter, None to skip one); got ", gradients.size());
  Checked checked;
  const size_t numGroups = offsets_.size() - 1;
  checked.present.resize(numGroups);
  for (size_t g = 0; g < numGroups; ++g) {
    for (int64_t i = offsets_[g]; i < offsets_[g + 1]; ++i) {
      const auto& grad = gradients[i];
      if (!grad.has_value() || !grad->defined()) {
        continue;
      }
      const auto& param = params_[i];
      const bool fits = (grad->layout() == c10::kStrided || grad->layout() == c10::kSparse) && !grad->is_nested() &&
          grad->scalar_type() == param.scalar_type() && grad->device() == param.device() &&
          grad->sizes().equals(param.sizes());
      TORCH_CHECK_VALUE(
          fits, "ValueError: gradients[", i, "]: expected ", describe(param), " (like its parameter); got ",
          describe(*grad));
      if (grad->is_sparse()) {
        TORCH_CHECK(!sparseErrors[g].has_value(), "RuntimeError: ", *sparseErrors[g]);
      } else {
        TORCH_CHECK(!denseError_.has_value(), "RuntimeError: ", *denseError_);
      }
      checked.present[g].push_back(static_cast<size_t>(i));
    }
  }
  return checked;
}

int64_t LocalOptimizer::groupOf(int64_t index) const {
  int64_t g = 0;
  while (offsets_[g + 1] <= index) {
    ++g;
  }
  return g;
}

Hyperparameters LocalOptimizer::updatedHyperparameters(int64_t group, const Hyperparameters& updates) const {
  auto h = hparams_[group].copy();
  for (const auto& item : updates) {
    TORCH_CHECK_VALUE(
        h.contains(item.key()), "ValueError: unknown hyperparameter '", item.key(), "'; this optimizer has ",
        namesOf(hparams_[group]));
    h.insert_or_assign(item.key(), item.value());
  }
  return h;
}

Options LocalOptimizer::updatedOptions(int64_t group, const Options& updates) const {
  auto o = options_[group].copy();
  for (const auto& item : updates) {
    TORCH_CHECK_VALUE(
        o.contains(item.key()), "ValueError: unknown option '", item.key(), "'; this optimizer has ",
        namesOf(options_[group]));
    TORCH_CHECK_VALUE(
        item.value().has_value() || item.key() == "foreach" || item.key() == "fused", "ValueError: option '",
        item.key(), "' must be True or False, not None");
    o.insert_or_assign(item.key(), item.value());
  }
  auto flag = [&o](const char* name) -> std::string {
    auto it = o.find(name);
    return it == o.end() || !it->value().has_value() ? "None" : *it->value() ? "True" : "False";
  };
  TORCH_CHECK(
      runsFused(o), "RuntimeError: parameter group ", group, " would no longer run the fused implementation with "
      "foreach=", flag("foreach"), " and fused=", flag("fused"), "; a native local optimizer steps only fused groups");
  return o;
}

// --- steps ----------------------------------------------------------------------------

void LocalOptimizer::syncTensorHyperparametersLocked() {
  for (size_t g = 0; g < tensorHparams_.size(); ++g) {
    for (const auto& item : tensorHparams_[g]) {
      hparams_[g].insert_or_assign(item.key(), item.value().item<double>());
    }
  }
}

void LocalOptimizer::setKeysLocked(size_t g) {
  const auto [names, values] = opValues(hparams_[g], options_[g]);
  std::unordered_map<int64_t, std::vector<std::string>> byDim;
  for (int64_t i = offsets_[g]; i < offsets_[g + 1]; ++i) {
    const int64_t dim = params_[i].dim();
    auto it = byDim.find(dim);
    if (it == byDim.end()) {
      auto keys = callGroupOp("gilfree_optim::state_keys", {name_, dim, names, values}).toList();
      std::vector<std::string> list;
      for (const auto& key : keys) {
        list.push_back(key.get().toStringRef());
      }
      it = byDim.emplace(dim, std::move(list)).first;
    }
    keys_[i] = it->second;
  }
}

void LocalOptimizer::applyLocked(const MaybeGradients& gradients) {
  auto checked = check(gradients, sparseErrors_);
  syncTensorHyperparametersLocked();
  at::NoGradGuard noGrad;
  for (size_t g = 0; g < checked.present.size(); ++g) {
    const auto& present = checked.present[g];
    if (present.empty()) {
      continue;
    }
    const auto [names, values] = opValues(hparams_[g], options_[g]);
    // the state these parameters lack, as torch makes it at a parameter's first step
    std::vector<at::Tensor> params, grads, lackingParams, lackingGrads;
    std::vector<size_t> lacking;
    c10::List<bool> fresh;
    for (size_t i : present) {
      params.push_back(params_[i]);
      grads.push_back(*gradients[i]);
      size_t have = 0;
      for (const auto& key : keys_[i]) {
        have += state_[i].contains(key) ? 1 : 0;
      }
      fresh.push_back(have == 0 && !keys_[i].empty());
      if (have < keys_[i].size()) {
        lacking.push_back(i);
        lackingParams.push_back(params_[i]);
        lackingGrads.push_back(*gradients[i]);
      }
    }
    if (!lacking.empty()) {
      auto made = callGroupOp("gilfree_optim::new_state", {name_, lackingParams, lackingGrads, names, values})
                      .toTensorVector();
      size_t at = 0;
      for (size_t i : lacking) {
        for (const auto& key : keys_[i]) {
          if (!state_[i].contains(key)) {
            state_[i].insert(key, made[at]);
          }
          ++at;
        }
      }
    }
    std::vector<at::Tensor> state;
    for (size_t i : present) {
      for (const auto& key : keys_[i]) {
        state.push_back(state_[i].at(key));
      }
    }
    std::vector<std::string> tensorNames;
    std::vector<at::Tensor> tensorValues;
    for (const auto& item : tensorHparams_[g]) {
      tensorNames.push_back(item.key());
      tensorValues.push_back(item.value());
    }
    callGroupOp("gilfree_optim::group_step", {name_, params, grads, state, fresh, names, values, tensorNames, tensorValues});
  }
}

int64_t LocalOptimizer::applyBefore(const MaybeGradients& gradients, int64_t deadlineMs) {
  Held held(locks_);
  if (deadlineMs >= 0 && wallClockMs() >= deadlineMs) {
    return kLate;
  }
  applyLocked(gradients);
  return kApplied;
}

int64_t LocalOptimizer::step(int64_t contextId, int64_t version, int64_t deadlineMs) {
  if (version < 0) {
    return applyBefore(gradientsFor(contextId, params_), deadlineMs);
  }
  auto grads = gradientsAtVersion(contextId, version);
  if (!grads.has_value()) {
    return kChanged;  // changed since the backward pass checked them
  }
  return applyBefore(gradientsOf(*grads, params_), deadlineMs);
}

int64_t LocalOptimizer::prepare(int64_t contextId, int64_t leaseMs) {
  auto gradients = gradientsFor(contextId, params_);
  std::vector<std::optional<std::string>> sparseErrors;
  {
    std::lock_guard<std::mutex> guard(sparseErrorsMu_);
    sparseErrors = sparseErrors_;
  }
  check(gradients, sparseErrors);
  return parkStep(std::move(gradients), leaseMs, handle_);
}

int64_t LocalOptimizer::commit(int64_t token, int64_t deadlineMs) {
  // checks again under the locks: the values may have changed since the prepare
  return applyBefore(takeStep(token, handle_), deadlineMs);
}

void LocalOptimizer::stepGradients(const MaybeGradients& gradients) {
  Held held(locks_);
  applyLocked(gradients);
}

// --- state and values ---------------------------------------------------------------------

std::tuple<OptimizerState, c10::List<Hyperparameters>, c10::List<Options>> LocalOptimizer::state() {
  Held held(locks_);
  syncTensorHyperparametersLocked();
  OptimizerState out;
  for (size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].size() == 0) {
      continue;
    }
    ParamState entry;
    for (const auto& item : state_[i]) {
      entry.insert(item.key(), item.value().clone());  // copies: sent after the locks are released
    }
    out.insert(static_cast<int64_t>(i), entry);
  }
  auto [hparams, options] = valuesLocked();
  return {out, hparams, options};
}

std::tuple<c10::List<Hyperparameters>, c10::List<Options>> LocalOptimizer::valuesLocked() const {
  c10::List<Hyperparameters> hparams;
  c10::List<Options> options;
  for (size_t g = 0; g < hparams_.size(); ++g) {
    hparams.push_back(hparams_[g].copy());
    options.push_back(options_[g].copy());
  }
  return {hparams, options};
}

void LocalOptimizer::loadState(
    const OptimizerState& state,
    const c10::List<Hyperparameters>& hparams,
    const c10::List<Options>& options,
    const std::vector<std::optional<std::string>>& sparseErrors) {
  Held held(locks_);
  const size_t numGroups = hparams_.size();
  TORCH_CHECK_VALUE(
      hparams.size() == numGroups && options.size() == numGroups && sparseErrors.size() == numGroups,
      "ValueError: load_state: expected ", numGroups,
      " dicts of hyperparameters and of options and sparse-gradient rules (one per parameter group); got ",
      hparams.size(), ", ", options.size(), " and ", sparseErrors.size());
  std::vector<Hyperparameters> newHparams;
  std::vector<Options> newOptions;
  for (size_t g = 0; g < numGroups; ++g) {
    newHparams.push_back(updatedHyperparameters(static_cast<int64_t>(g), hparams.get(g)));
    newOptions.push_back(updatedOptions(static_cast<int64_t>(g), options.get(g)));
  }
  // GroupedState.set_state's checks (each state tensor dense, and as the optimizer keeps it:
  // the shape and kind of dtype of the state new_state makes for the parameter, on the meta
  // device, with the new values), then its copies (torch's casting rules, with the new flags)
  const int64_t numParams = static_cast<int64_t>(params_.size());
  for (const auto& item : state) {
    const int64_t i = item.key();
    TORCH_CHECK_VALUE(
        i >= 0 && i < numParams, "ValueError: set_state: no parameter with index ", i, " (the optimizer has ",
        numParams, " parameters)");
    const auto& param = params_[i];
    const auto [names, values] = opValues(newHparams[groupOf(i)], newOptions[groupOf(i)]);
    const auto meta = at::empty_strided(param.sizes(), param.strides(), param.options().device(at::kMeta));
    const auto keys = callGroupOp("gilfree_optim::state_keys", {name_, param.dim(), names, values}).toList();
    const auto made = callGroupOp("gilfree_optim::new_state", {name_, std::vector<at::Tensor>{meta},
                                                               std::vector<at::Tensor>{meta}, names, values})
                          .toTensorVector();
    for (const auto& value : item.value()) {
      const auto& v = value.value();
      TORCH_CHECK_VALUE(
          v.layout() == c10::kStrided && !v.is_nested(), "ValueError: set_state: state[", i, "]['", value.key(),
          "'] is not a dense tensor (", describe(v), ")");
      for (size_t j = 0; j < keys.size(); ++j) {
        if (keys.get(j).toStringRef() != value.key()) {
          continue;
        }
        TORCH_CHECK_VALUE(
            v.sizes().equals(made[j].sizes()), "ValueError: set_state: state[", i, "]['", value.key(), "'] has shape ",
            shapeText(v.sizes()), " but this optimizer keeps it with shape ", shapeText(made[j].sizes()),
            " for its parameter of shape ", shapeText(param.sizes()));
        TORCH_CHECK_VALUE(
            v.is_floating_point() || !made[j].is_floating_point(), "ValueError: set_state: state[", i, "]['",
            value.key(), "'] has dtype ", dtypeName(v.scalar_type()), "; this optimizer keeps a floating-point one");
      }
    }
  }
  std::vector<ParamState> newState(params_.size());
  for (const auto& item : state) {
    const int64_t i = item.key();
    const auto& param = params_[i];
    const auto fused = newOptions[groupOf(i)].find("fused");
    const bool fusedTrue = fused != newOptions[groupOf(i)].end() && fused->value().value_or(false);
    ParamState copied;
    for (const auto& value : item.value()) {
      const auto& v = value.value();
      if (value.key() == "step") {
        copied.insert(value.key(), fusedTrue ? v.to(param.device(), at::kFloat, false, true) : v.clone());
      } else if (param.is_floating_point()) {
        copied.insert(value.key(), v.to(param.device(), param.scalar_type(), false, true));
      } else {
        copied.insert(value.key(), v.to(param.device(), v.scalar_type(), false, true));
      }
    }
    newState[i] = copied;
  }
  // nothing below raises (but for the library's state_keys)
  state_ = std::move(newState);
  std::lock_guard<std::mutex> guard(sparseErrorsMu_);
  for (size_t g = 0; g < numGroups; ++g) {
    for (const auto& item : hparams.get(g)) {
      (void)tensorHparams_[g].erase(item.key());  // a number replaces a Tensor hyperparameter
    }
    hparams_[g] = newHparams[g];
    options_[g] = newOptions[g];
    sparseErrors_[g] = sparseErrors[g];
    setKeysLocked(g);
  }
}

std::tuple<c10::List<Hyperparameters>, c10::List<Options>> LocalOptimizer::hyperparameters() {
  Held held(locks_);
  syncTensorHyperparametersLocked();
  return valuesLocked();
}

void LocalOptimizer::setGroup(
    int64_t group,
    const Hyperparameters& hparams,
    const Options& options,
    const TensorHyperparameters& tensorHparams,
    std::optional<std::string> sparseError) {
  Held held(locks_);
  const int64_t numGroups = static_cast<int64_t>(offsets_.size()) - 1;
  TORCH_CHECK_VALUE(
      group >= 0 && group < numGroups, "ValueError: parameter group ", group, " does not exist (the optimizer has ",
      numGroups, " groups)");
  auto h = updatedHyperparameters(group, hparams);
  auto o = updatedOptions(group, options);
  for (const auto& item : tensorHparams) {
    TORCH_CHECK_VALUE(
        h.contains(item.key()), "ValueError: unknown hyperparameter '", item.key(), "'; this optimizer has ",
        namesOf(hparams_[group]));
    TORCH_CHECK_VALUE(
        item.value().numel() == 1, "ValueError: hyperparameter '", item.key(),
        "' given as a Tensor must have one element; got shape ", shapeText(item.value().sizes()));
  }
  for (const auto& item : tensorHparams) {
    h.insert_or_assign(item.key(), item.value().item<double>());
  }
  std::lock_guard<std::mutex> guard(sparseErrorsMu_);
  for (const auto& item : hparams) {
    (void)tensorHparams_[group].erase(item.key());
  }
  for (const auto& item : tensorHparams) {
    tensorHparams_[group].insert_or_assign(item.key(), item.value());
  }
  hparams_[group] = h;
  options_[group] = o;
  sparseErrors_[group] = std::move(sparseError);
  setKeysLocked(group);
}

bool LocalOptimizer::acceptsSparse() {
  std::lock_guard<std::mutex> guard(sparseErrorsMu_);
  for (const auto& error : sparseErrors_) {
    if (error.has_value()) {
      return false;
    }
  }
  return true;
}

// --- the ops' kernels ----------------------------------------------------------------------

TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_optimizer_step", [](int64_t handle, int64_t contextId, int64_t version, int64_t deadlineMs) {
    return LocalOptimizer::find(handle)->step(contextId, version, deadlineMs);
  });
  m.impl("_optimizer_prepare", [](int64_t handle, int64_t contextId, int64_t leaseMs) {
    return LocalOptimizer::find(handle)->prepare(contextId, leaseMs);
  });
  m.impl("_optimizer_commit", [](int64_t handle, int64_t token, int64_t deadlineMs) {
    return LocalOptimizer::find(handle)->commit(token, deadlineMs);
  });
  m.impl("_optimizer_drop", [](int64_t handle, int64_t token) {
    const bool dropped = dropStep(token, handle);  // forgotten even when the optimizer is gone
    LocalOptimizer::find(handle);
    return dropped;
  });
  m.impl("_optimizer_step_gradients", [](int64_t handle, const c10::List<std::optional<at::Tensor>>& gradients) {
    LocalOptimizer::find(handle)->stepGradients(MaybeGradients(gradients.begin(), gradients.end()));
  });
  m.impl("_optimizer_state", [](int64_t handle) { return LocalOptimizer::find(handle)->state(); });
  // load_state and set_group answer whether the optimizer takes sparse gradients after the change (see ops.cpp)
  m.impl(
      "_optimizer_load_state",
      [](int64_t handle, const OptimizerState& state, const c10::List<Hyperparameters>& hparams,
         const c10::List<Options>& options, const std::vector<std::optional<std::string>>& sparseErrors) {
        auto optimizer = LocalOptimizer::find(handle);
        optimizer->loadState(state, hparams, options, sparseErrors);
        return optimizer->acceptsSparse();
      });
  m.impl("_optimizer_hyperparameters", [](int64_t handle) { return LocalOptimizer::find(handle)->hyperparameters(); });
  m.impl(
      "_optimizer_set_group",
      [](int64_t handle, int64_t group, const Hyperparameters& hparams, const Options& options,
         const TensorHyperparameters& tensorHparams, std::optional<std::string> sparseError) {
        auto optimizer = LocalOptimizer::find(handle);
        optimizer->setGroup(group, hparams, options, tensorHparams, std::move(sparseError));
        return optimizer->acceptsSparse();
      });
  m.impl("_optimizer_accepts_sparse", [](int64_t handle) { return LocalOptimizer::find(handle)->acceptsSparse(); });
}

}  // namespace gilfree_rpc
