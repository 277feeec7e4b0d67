// The registry of group steps and the kernels of the ops state_keys, new_state and
// group_step (group_step.h; schemas in ops.cpp).
#include "group_step.h"

#include "fused_optim.h"

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <c10/core/DefaultDtype.h>
#include <torch/library.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace gilfree_optim {
namespace {

std::map<std::string, OptimizerDef>& registry() {
  static auto* r = new std::map<std::string, OptimizerDef>();  // filled at load, then read only
  return *r;
}

std::vector<double> valuesOf(const std::vector<std::string>& names, const std::vector<double>& values) {
  TORCH_CHECK_VALUE(
      names.size() == values.size(), "gilfree_optim: got ", names.size(), " names but ", values.size(),
      " values of hyperparameters and flags");
  return values;
}

// The keys of each parameter (computed once per dimension count).
std::vector<size_t> keyCounts(const OptimizerDef& def, at::TensorList params, const GroupValues& v) {
  std::unordered_map<int64_t, size_t> byDim;
  std::vector<size_t> counts;
  for (const auto& p : params) {
    auto it = byDim.find(p.dim());
    if (it == byDim.end()) {
      it = byDim.emplace(p.dim(), def.keys(p.dim(), v).size()).first;
    }
    counts.push_back(it->second);
  }
  return counts;
}

// A parameter that the group step hands its optimizer's step as dense copies (see
// OptimizerDef::anyLayout), and the tensors the copies stand for, written back after the step.
struct GroupStepProxy {
  size_t k;
  at::Tensor param;                 // the parameter itself (undefined: stepped in place)
  std::vector<at::Tensor> state;    // its state tensors (an undefined one: stepped in place)
};

// Whether `t` holds its elements as `layout` does (same sizes and strides: this library's
// kernels check the strides as they are, also those of a dimension of one element).
bool groupStepSameStrides(const at::Tensor& t, const at::Tensor& layout) {
  return t.sizes().equals(layout.sizes()) && t.strides().equals(layout.strides());
}

// The parameters of `group` whose dense step the kernels cannot take as they are (a parameter
// with gaps or overlaps; a gradient or state tensor of other strides), each replaced in `group`
// by a dense copy in the parameter's layout (a contiguous one for a parameter with gaps), with
// its gradient and state tensors of its shape copied alike. Elementwise, the step of a copy is
// the step of the tensor (same values, same arithmetic per element).
std::vector<GroupStepProxy> groupStepProxies(Group& group) {
  std::vector<GroupStepProxy> out;
  for (size_t k = 0; k < group.params.size(); ++k) {
    const auto& p = group.params[k];
    if (group.grads[k].is_sparse() || p.layout() != at::kStrided) {
      continue;
    }
    // (an empty parameter of other strides than the contiguous ones: stepped as a contiguous
    // one, its counters counted)
    const bool dense =
        p.numel() > 0 ? p.is_non_overlapping_and_dense() : p.strides().equals(at::empty(p.sizes(), p.options()).strides());
    bool fits = dense && groupStepSameStrides(group.grads[k], p);
    for (const auto& t : group.state[k]) {
      fits = fits && (!t.sizes().equals(p.sizes()) || groupStepSameStrides(t, p));
    }
    if (fits) {
      continue;
    }
    GroupStepProxy proxy{k, {}, {}};
    const at::Tensor work = dense ? p : p.numel() == 0 ? at::empty(p.sizes(), p.options()) : p.contiguous();
    if (!dense) {
      proxy.param = p;
      group.params[k] = work;
    }
    if (!groupStepSameStrides(group.grads[k], work)) {
      group.grads[k] = at::empty_like(work).copy_(group.grads[k]);
    }
    for (auto& t : group.state[k]) {
      proxy.state.emplace_back();
      if (t.sizes().equals(p.sizes()) && !groupStepSameStrides(t, work)) {
        proxy.state.back() = t;
        t = at::empty_like(work).copy_(t);
      }
    }
    out.push_back(std::move(proxy));
  }
  return out;
}

StateKeysFn stateKeysKernel;
NewStateFn newStateKernel;
GroupStepFn groupStepKernel;

// What an in-place op does to a tensor it writes, as torch's ADInplaceOrView kernels do
// (increment_version): bump its version counter, but in inference mode or for an inference tensor.
void bumpVersion(const at::Tensor& t) {
  if (!c10::InferenceMode::is_enabled() && !t.is_inference()) {
    t.unsafeGetTensorImpl()->bump_version();
  }
}

std::vector<std::string> stateKeysKernel(
    const std::string& optimizer,
    int64_t dim,
    const std::vector<std::string>& names,
    const std::vector<double>& values) {
  const auto checked = valuesOf(names, values);
  return optimizerNamed(optimizer).keys(dim, GroupValues(names, checked));
}

// Every registered optimizer's choices (OptimizerDef::choices), by hyperparameter name.
c10::Dict<std::string, c10::List<std::string>> hyperparameterChoicesKernel() {
  std::map<std::string, std::vector<std::string>> all;
  for (const auto& [name, def] : registry()) {
    for (const auto& [hyperparameter, strings] : def.choices) {
      auto [it, added] = all.emplace(hyperparameter, strings);
      TORCH_CHECK(added || it->second == strings, "gilfree_optim: ", hyperparameter, " has other choices in ", name,
                  " than in another optimizer");
    }
  }
  c10::Dict<std::string, c10::List<std::string>> out;
  for (const auto& [hyperparameter, strings] : all) {
    out.insert(hyperparameter, c10::List<std::string>(strings));
  }
  return out;
}

std::vector<std::string> groupStepDevicesKernel(const std::string& optimizer) {
  auto it = registry().find(optimizer);
  return it == registry().end() ? std::vector<std::string>() : it->second.devices;
}

std::vector<at::Tensor> newStateKernel(
    const std::string& optimizer,
    at::TensorList params,
    at::TensorList grads,
    const std::vector<std::string>& names,
    const std::vector<double>& values) {
  const auto& def = optimizerNamed(optimizer);
  const auto checked = valuesOf(names, values);
  const GroupValues v(names, checked);
  TORCH_CHECK_VALUE(
      grads.size() == params.size(), "gilfree_optim::new_state: ", params.size(), " params but ", grads.size(),
      " grads");
  at::NoGradGuard noGrad;
  std::vector<at::Tensor> out;
  for (size_t k = 0; k < params.size(); ++k) {
    auto created = def.create(params[k], grads[k], v);
    out.insert(out.end(), created.begin(), created.end());
  }
  return out;
}

void groupStepKernel(
    const std::string& optimizer,
    at::TensorList params,
    at::TensorList grads,
    at::TensorList state,
    c10::List<bool> fresh,
    const std::vector<std::string>& names,
    const std::vector<double>& values,
    const std::vector<std::string>& tensorNames,
    at::TensorList tensorValues) {
  const auto& def = optimizerNamed(optimizer);
  const auto checked = valuesOf(names, values);
  TORCH_CHECK_VALUE(
      tensorNames.size() == tensorValues.size(), "gilfree_optim::group_step: ", tensorNames.size(),
      " tensor names but ", tensorValues.size(), " tensors");
  for (const auto& t : tensorValues) {
    TORCH_CHECK_VALUE(t.numel() == 1, "gilfree_optim::group_step: a Tensor hyperparameter must have one element");
  }
  const GroupValues v(names, checked, tensorNames, tensorValues);
  TORCH_CHECK_VALUE(
      grads.size() == params.size() && fresh.size() == params.size(), "gilfree_optim::group_step: ", params.size(),
      " params but ", grads.size(), " grads and ", fresh.size(), " fresh flags");
  const auto counts = keyCounts(def, params, v);
  size_t total = 0;
  for (size_t c : counts) {
    total += c;
  }
  TORCH_CHECK_VALUE(
      state.size() == total, "gilfree_optim::group_step: ", optimizer, " keeps ", total,
      " state tensors for these parameters (their keys, parameter after parameter); got ", state.size());
  Group group;
  size_t at = 0;
  for (size_t k = 0; k < params.size(); ++k) {
    group.params.push_back(params[k]);
    group.grads.push_back(grads[k]);
    group.state.emplace_back(state.begin() + at, state.begin() + at + counts[k]);
    group.fresh.push_back(fresh.get(k));
    group.sparse = group.sparse || grads[k].is_sparse();
    at += counts[k];
  }
  at::NoGradGuard noGrad;
  {
    // The kernels this step calls (this library's fused ops, torch's _fused_* and _foreach_*)
    // run below autograd: under no_grad its kernel has nothing to record, and this library's
    // ops, which have no autograd kernel, went through torch's boxed fallback, which copies
    // every list into a boxed stack and back (0.1 to 0.2 us per parameter: 200 parameters of
    // 16 floats, one thread, ASGD 327 -> 283 us per call, Adadelta 284 -> 245). And below
    // ADInplaceOrView: the step's ops bump no version counter (torch's fused kernels bump none
    // on the CPU, its other ops one or more per tensor, this library's none)...
    at::AutoDispatchBelowADInplaceOrView below;
    // The layouts a step assumes (OptimizerDef::anyLayout): any other parameter goes through
    // dense copies, written back after the step; the group's own tensors are what is bumped.
    const auto proxies = def.anyLayout ? std::vector<GroupStepProxy>() : groupStepProxies(group);
    def.step(group, v);
    for (const auto& proxy : proxies) {
      if (proxy.param.defined()) {
        proxy.param.copy_(group.params[proxy.k]);
        group.params[proxy.k] = proxy.param;
      }
      for (size_t j = 0; j < proxy.state.size(); ++j) {
        if (proxy.state[j].defined()) {
          proxy.state[j].copy_(group.state[proxy.k][j]);
          group.state[proxy.k][j] = proxy.state[j];
        }
      }
    }
  }
  // ...the group step bumps each tensor it writes once, as one in-place op over them does (a
  // parameter's, whatever the optimizer: a backward pass that saved it before the step then
  // raises torch's error instead of using the new values; its state's too). Before it returns:
  // a caller holding the parameters' locks bumps them before it releases them.
  for (size_t k = 0; k < group.params.size(); ++k) {
    bumpVersion(group.params[k]);
    for (const auto& t : group.state[k]) {
      bumpVersion(t);
    }
  }
}

// The state of a packed group (functional_optim/_state.py, GroupedState.pack): its tensors
// are views of a few buffers, and `layout` (int64, 1-D, on the CPU) says where: per state
// tensor, in group_step's order, its buffer's index, its offset in the buffer (elements), its
// number of dimensions and its sizes (contiguous; no two overlap). The views group_step takes
// are made once per layout and kept, so that a step passes a few tensors instead of every state
// tensor (under torch.compile each tensor of a step's lists is a guard, a size assert and a
// conversion). They are made on storages that do not own the buffers' memory, and used only
// while the entry's weak references show the same layout (same values) and buffers (same
// storages, same memory) alive: an entry keeps no buffer alive, and a dead one is dropped at
// the next miss. Each shares its buffer's version counter, as a view has it: the kernels'
// in-place updates bump it, and so the Python views' (torch bumps no argument of this op).
struct PackedViews {
  explicit PackedViews(c10::weak_intrusive_ptr<c10::StorageImpl> layoutStorage) : layout(std::move(layoutStorage)) {}
  c10::weak_intrusive_ptr<c10::StorageImpl> layout;
  std::vector<int64_t> spec;
  std::vector<c10::weak_intrusive_ptr<c10::StorageImpl>> storages;
  std::vector<const void*> data;
  std::vector<int64_t> numels;
  std::vector<at::Tensor> views;
};

std::mutex packedMutex;
std::unordered_map<const void*, std::shared_ptr<const PackedViews>>& packedCache() {
  static auto* cache = new std::unordered_map<const void*, std::shared_ptr<const PackedViews>>();
  return *cache;
}

bool packedCurrent(const PackedViews& entry, at::TensorList buffers, const at::Tensor& layout) {
  if (entry.layout.lock().get() != layout.storage().unsafeGetStorageImpl() || entry.storages.size() != buffers.size() ||
      static_cast<int64_t>(entry.spec.size()) != layout.numel() ||
      !std::equal(entry.spec.begin(), entry.spec.end(), layout.const_data_ptr<int64_t>())) {
    return false;
  }
  for (size_t b = 0; b < buffers.size(); ++b) {
    const auto storage = entry.storages[b].lock();
    if (storage.get() != buffers[b].storage().unsafeGetStorageImpl() || entry.data[b] != buffers[b].data_ptr() ||
        entry.numels[b] != buffers[b].numel()) {
      return false;
    }
  }
  return true;
}

void checkLayoutTensor(const at::Tensor& layout, at::TensorList buffers) {
  TORCH_CHECK_VALUE(
      layout.dim() == 1 && layout.scalar_type() == at::kLong && layout.device().is_cpu() && layout.is_contiguous(),
      "gilfree_optim::group_step_packed: layout must be a contiguous 1-D int64 tensor on the CPU");
  for (const auto& buffer : buffers) {
    TORCH_CHECK_VALUE(buffer.dim() == 1 && buffer.is_contiguous() && buffer.layout() == at::kStrided,
                      "gilfree_optim::group_step_packed: every buffer must be a contiguous 1-D dense tensor");
  }
}

std::shared_ptr<const PackedViews> makePackedViews(at::TensorList buffers, const at::Tensor& layout) {
  constexpr const char* kOp = "gilfree_optim::group_step_packed: ";
  auto entry = std::make_shared<PackedViews>(layout.storage().getWeakStorageImpl());
  const int64_t* spec = layout.const_data_ptr<int64_t>();
  const int64_t n = layout.numel();
  entry->spec.assign(spec, spec + n);
  std::vector<c10::Storage> unowned;
  for (const auto& buffer : buffers) {
    entry->storages.push_back(buffer.storage().getWeakStorageImpl());
    entry->data.push_back(buffer.data_ptr());
    entry->numels.push_back(buffer.numel());
    unowned.emplace_back(c10::Storage::use_byte_size_t(), buffer.numel() * buffer.element_size(),
                         c10::DataPtr(buffer.data_ptr(), buffer.device()), nullptr, false);
  }
  // Checked before any view is made: every entry inside its buffer, none overlapping another.
  struct Span {
    int64_t buffer, offset, numel;
    std::vector<int64_t> sizes;
  };
  std::vector<Span> spans;
  for (int64_t at = 0; at < n;) {
    TORCH_CHECK_VALUE(n - at >= 3 && spec[at + 2] >= 0 && spec[at + 2] <= n - at - 3, kOp, "layout is cut short");
    const int64_t b = spec[at], offset = spec[at + 1], dim = spec[at + 2];
    TORCH_CHECK_VALUE(b >= 0 && b < static_cast<int64_t>(buffers.size()), kOp, "layout names buffer ", b, " of ",
                      buffers.size());
    const int64_t limit = buffers[b].numel();
    Span span{b, offset, 1, std::vector<int64_t>(spec + at + 3, spec + at + 3 + dim)};
    // An empty state tensor (a size 0: an empty parameter's) holds no element, whatever its
    // other sizes: it takes no room in its buffer (which may have no element at all).
    bool empty = false;
    for (int64_t d : span.sizes) {
      TORCH_CHECK_VALUE(d >= 0, kOp, "layout has a negative size");
      empty = empty || d == 0;
    }
    if (empty) {
      span.numel = 0;
    }
    for (int64_t d : span.sizes) {
      if (empty) {
        break;
      }
      TORCH_CHECK_VALUE(d <= limit && span.numel <= limit / d, kOp, "layout reaches past buffer ", b);
      span.numel *= d;
    }
    TORCH_CHECK_VALUE(offset >= 0 && offset <= limit - span.numel, kOp, "layout reaches past buffer ", b);
    spans.push_back(std::move(span));
    at += 3 + dim;
  }
  std::vector<const Span*> order;
  for (const auto& span : spans) {
    order.push_back(&span);
  }
  std::sort(order.begin(), order.end(), [](const Span* x, const Span* y) {
    return x->buffer != y->buffer ? x->buffer < y->buffer : x->offset < y->offset;
  });
  for (size_t k = 1; k < order.size(); ++k) {
    const Span& before = *order[k - 1];
    TORCH_CHECK_VALUE(before.buffer != order[k]->buffer || before.numel == 0 ||
                          before.offset + before.numel <= order[k]->offset,
                      kOp, "layout overlaps two state tensors in buffer ", before.buffer);
  }
  at::AutoDispatchBelowADInplaceOrView belowViews;
  for (const auto& span : spans) {
    auto view = at::empty({0}, buffers[span.buffer].options()).set_(unowned[span.buffer], span.offset, span.sizes);
    const auto& version = buffers[span.buffer].unsafeGetTensorImpl()->version_counter();
    if (version.enabled() && !view.is_inference()) {
      view.unsafeGetTensorImpl()->set_version_counter(version);  // as a view of the buffer has it
    }
    entry->views.push_back(std::move(view));
  }
  return entry;
}

std::shared_ptr<const PackedViews> packedViews(at::TensorList buffers, const at::Tensor& layout) {
  checkLayoutTensor(layout, buffers);
  const void* key = layout.const_data_ptr();
  std::lock_guard<std::mutex> lock(packedMutex);
  auto& cache = packedCache();
  auto it = cache.find(key);
  if (it != cache.end() && packedCurrent(*it->second, buffers, layout)) {
    return it->second;
  }
  for (auto dead = cache.begin(); dead != cache.end();) {
    dead = dead->second->layout.expired() ? cache.erase(dead) : std::next(dead);
  }
  auto entry = makePackedViews(buffers, layout);
  cache[key] = entry;
  return entry;
}

void groupStepPackedKernel(
    const std::string& optimizer,
    at::TensorList params,
    at::TensorList grads,
    at::TensorList buffers,
    const at::Tensor& layout,
    c10::List<bool> fresh,
    const std::vector<std::string>& names,
    const std::vector<double>& values,
    const std::vector<std::string>& tensorNames,
    at::TensorList tensorValues) {
  const auto entry = packedViews(buffers, layout);
  groupStepKernel(optimizer, params, grads, entry->views, std::move(fresh), names, values, tensorNames, tensorValues);
}

void groupStepPackedMeta(
    const std::string&,
    at::TensorList,
    at::TensorList,
    at::TensorList,
    const at::Tensor&,
    c10::List<bool>,
    const std::vector<std::string>&,
    const std::vector<double>&,
    const std::vector<std::string>&,
    at::TensorList) {}

// On meta tensors (torch.compile's fake tensors run this): the state as new_state makes it,
// every tensor on the meta device (a state tensor kept on the CPU whatever the parameter's
// device, such as NAdam's mu_product, is made there: made again on meta, same shape and dtype).
std::vector<at::Tensor> newStateMeta(
    const std::string& optimizer,
    at::TensorList params,
    at::TensorList grads,
    const std::vector<std::string>& names,
    const std::vector<double>& values) {
  auto out = newStateKernel(optimizer, params, grads, names, values);
  for (auto& t : out) {
    if (!t.is_meta()) {
      t = at::empty_like(t, t.options().device(at::kMeta));
    }
  }
  return out;
}

// Under torch.compile (fake tensors) and on meta tensors: nothing to compute.
void groupStepMeta(
    const std::string&,
    at::TensorList,
    at::TensorList,
    at::TensorList,
    c10::List<bool>,
    const std::vector<std::string>&,
    const std::vector<double>&,
    const std::vector<std::string>&,
    at::TensorList) {}

}  // namespace

GroupValues::GroupValues(
    const std::vector<std::string>& names,
    const std::vector<double>& values,
    const std::vector<std::string>& tensorNames,
    at::TensorList tensors)
    : names_(names), values_(values), tensorNames_(tensorNames), tensors_(tensors.begin(), tensors.end()) {
  for (size_t t = 0; t < tensorNames_.size(); ++t) {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == tensorNames_[t]) {
        values_[i] = tensors_[t].item<double>();
      }
    }
  }
}

std::optional<at::Tensor> GroupValues::tensor(const char* name) const {
  for (size_t i = 0; i < tensorNames_.size(); ++i) {
    if (tensorNames_[i] == name) {
      return tensors_[i];
    }
  }
  return std::nullopt;
}

bool GroupValues::has(const char* name) const {
  return std::find(names_.begin(), names_.end(), name) != names_.end();
}

double GroupValues::get(const char* name) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == name) {
      return values_[i];
    }
  }
  TORCH_CHECK_VALUE(false, "gilfree_optim: the group's values have no '", name, "'");
}

std::vector<Positions> Group::parts() const {
  std::vector<std::pair<c10::Device, at::ScalarType>> keys;
  std::vector<Positions> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto key = std::make_pair(params[i].device(), params[i].scalar_type());
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

std::vector<at::Tensor> Group::column(size_t j, const Positions& positions) const {
  std::vector<at::Tensor> out;
  out.reserve(positions.size());
  for (size_t k : positions) {
    out.push_back(state[k].at(j));
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

bool registerOptimizer(const char* name, OptimizerDef def) {
  registry().emplace(name, def);
  return true;
}

const OptimizerDef& optimizerNamed(const std::string& name) {
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [n, d] : registry()) {
      known += (known.empty() ? "" : ", ") + n;
    }
    TORCH_CHECK_VALUE(false, "gilfree_optim: no group step named '", name, "' (known: ", known, ")");
  }
  return it->second;
}

at::ScalarType scalarDtype() {
  return c10::get_default_dtype_as_scalartype() == at::kDouble ? at::kDouble : at::kFloat;
}

at::Tensor newStep(const at::Tensor& param, const GroupValues& v) {
  if (v.has("fused") && !v.flag("fused")) {
    return at::zeros({}, at::TensorOptions().dtype(scalarDtype()));
  }
  return at::zeros({}, at::TensorOptions().dtype(at::kFloat).device(param.device()));
}

void countSteps(at::TensorList steps) {
  std::vector<at::Tensor> others;
  for (const auto& s : steps) {
    if (s.device().is_cpu() && s.layout() == at::kStrided && s.numel() == 1 && !s.requires_grad() &&
        (s.scalar_type() == at::kFloat || s.scalar_type() == at::kDouble)) {
      incrementStep(s);
    } else {
      others.push_back(s);
    }
  }
  if (!others.empty()) {
    at::_foreach_add_(others, 1.0);
  }
}

void inPieces(const std::vector<at::Tensor>& params, const Positions& positions,
              const std::function<void(const Positions&)>& fn) {
  Positions large, small;
  int64_t smallTotal = 0;
  for (size_t k : positions) {
    const auto& p = params[k];
    if (!p.device().is_cpu() || p.numel() >= kSmallNumel) {
      large.push_back(k);
    } else {
      small.push_back(k);
      smallTotal += p.numel();
    }
  }
  if (!large.empty()) {
    fn(large);
  }
  if (small.empty()) {
    return;
  }
  // Runs of at least 32K elements (less is not worth a thread), at most one per thread.
  constexpr int64_t kGrain = 32 * 1024;
  const int64_t runs = std::max<int64_t>(
      1, std::min<int64_t>({static_cast<int64_t>(at::get_num_threads()), static_cast<int64_t>(small.size()),
                            smallTotal / kGrain}));
  std::vector<Positions> pieces(runs);
  int64_t seen = 0;
  for (size_t k : small) {
    // the run whose share of smallTotal holds this parameter's first element
    const int64_t r = std::min<int64_t>(runs - 1, seen * runs / std::max<int64_t>(smallTotal, 1));
    pieces[r].push_back(k);
    seen += params[k].numel();
  }
  const at::ThreadLocalState state;
  // One run: parallel_for calls fn here, marked as inside a parallel region, so the
  // kernel's own parallel_for runs on this thread as well.
  at::parallel_for(0, runs, 1, [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard guard(state);
    for (int64_t r = begin; r < end; ++r) {
      if (!pieces[r].empty()) {
        fn(pieces[r]);
      }
    }
  });
}

at::Tensor like(const at::Tensor& param, double value) {
  return at::full_like(param, value, {}, at::MemoryFormat::Preserve);
}

void addSparseInto(const at::Tensor& dense, const at::Tensor& sparse, const at::Scalar& alpha) {
  if (dense.device().is_cpu() && dense.storage_offset() != 0 && dense.layout() == at::kStrided) {
    auto alias = at::from_blob(dense.data_ptr(), dense.sizes(), dense.strides(), dense.options());
    alias.add_(sparse, alpha);
    return;
  }
  dense.add_(sparse, alpha);
}

bool sparseKernelUsable(const at::Tensor& param) {
  return param.device().is_cpu() && param.is_contiguous() && fusedDtype(param.scalar_type());
}

// These take no tensor: one kernel for every dispatch key.
TORCH_LIBRARY_IMPL(gilfree_optim, CompositeImplicitAutograd, m) {
  m.impl("state_keys", TORCH_FN(stateKeysKernel));
  m.impl("group_step_devices", TORCH_FN(groupStepDevicesKernel));
  m.impl("fused_dtype", TORCH_FN(fusedDtype));
  m.impl("hyperparameter_choices", TORCH_FN(hyperparameterChoicesKernel));
}

TORCH_LIBRARY_IMPL(gilfree_optim, CompositeExplicitAutograd, m) {
  m.impl("new_state", TORCH_FN(newStateKernel));
  m.impl("group_step", TORCH_FN(groupStepKernel));
  m.impl("group_step_packed", TORCH_FN(groupStepPackedKernel));
}

TORCH_LIBRARY_IMPL(gilfree_optim, Meta, m) {
  m.impl("new_state", TORCH_FN(newStateMeta));
  m.impl("group_step", TORCH_FN(groupStepMeta));
  m.impl("group_step_packed", TORCH_FN(groupStepPackedMeta));
}

// A step with a sparse gradient on fake tensors dispatches here (its meta tensors' key).
TORCH_LIBRARY_IMPL(gilfree_optim, SparseMeta, m) {
  m.impl("new_state", TORCH_FN(newStateMeta));
  m.impl("group_step", TORCH_FN(groupStepMeta));
}

}  // namespace gilfree_optim
