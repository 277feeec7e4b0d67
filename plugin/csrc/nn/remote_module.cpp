// The registry of remote modules, their snapshots and their forward handler
// (remote_module.h); the kernels of their ops (schemas in ops.cpp).
#include "nn/remote_module.h"

#include "python_names.h"
#include "rpc/recorded_call.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace gilfree_rpc::nn {
namespace {

// The parameters a forward reads: one copy of each, at the versions they had.
struct Snapshot {
  std::vector<at::Tensor> params;
  std::vector<uint32_t> versions;
};

struct Module {
  Module(std::string name, std::vector<at::Tensor> params)
      : name(std::move(name)), params(std::move(params)), locks(paramLocksFor(this->params)) {}

  const std::string name;
  const std::vector<at::Tensor> params;
  const std::vector<std::shared_ptr<ParamLock>> locks;

  std::mutex mu;  // guards the fields below
  std::shared_ptr<const Snapshot> snapshot;
  c10::intrusive_ptr<ForwardProgram> programs[2];  // eval, train
  bool training = true;
  std::mutex buffersMu;  // the instructions that take a buffer
  std::atomic<int64_t> forwards{0};
  std::atomic<int64_t> snapshots{0};
};

std::mutex registryMu;
std::unordered_map<int64_t, std::shared_ptr<Module>>& registry() {
  static auto* modules = new std::unordered_map<int64_t, std::shared_ptr<Module>>();  // leaky: RPC threads outlive statics
  return *modules;
}
std::atomic<int64_t> nextHandle{0};

std::shared_ptr<Module> find(int64_t handle, const char* what) {
  std::lock_guard<std::mutex> lock(registryMu);
  auto it = registry().find(handle);
  TORCH_CHECK(
      it != registry().end(), what, ": handle ", handle,
      " is not a remote module on this worker (never registered, or released)");
  return it->second;
}

std::vector<uint32_t> versionsOf(const std::vector<at::Tensor>& params) {
  std::vector<uint32_t> versions;
  versions.reserve(params.size());
  for (const auto& p : params) {
    versions.push_back(p._version());
  }
  return versions;
}

// The snapshot of the module's parameters at their current versions (see remote_module.h).
std::shared_ptr<const Snapshot> snapshotOf(Module& module) {
  {
    auto versions = versionsOf(module.params);
    std::lock_guard<std::mutex> lock(module.mu);
    if (module.snapshot && module.snapshot->versions == versions) {
      return module.snapshot;
    }
  }
  // A step holds these locks while it writes the parameters and bumps their versions, so
  // what is read here is whole steps only.
  HeldParamLocks held(module.locks);
  auto versions = versionsOf(module.params);
  {
    std::lock_guard<std::mutex> lock(module.mu);
    if (module.snapshot && module.snapshot->versions == versions) {
      return module.snapshot;  // another forward took it meanwhile
    }
  }
  auto snapshot = std::make_shared<Snapshot>();
  snapshot->versions = std::move(versions);
  snapshot->params.reserve(module.params.size());
  for (const auto& p : module.params) {
    // In grad mode, so that the copy's gradient flows to the parameter (CloneBackward).
    at::AutoGradMode gradMode(p.requires_grad());
    snapshot->params.push_back(p.clone());
  }
  module.snapshots.fetch_add(1);
  std::lock_guard<std::mutex> lock(module.mu);
  module.snapshot = snapshot;
  return snapshot;
}

}  // namespace

int64_t registerModule(const std::string& name, const std::vector<at::Tensor>& params) {
  for (size_t i = 0; i < params.size(); ++i) {
    TORCH_CHECK(params[i].defined(), "register_module: parameter ", i, " of ", name, " is undefined");
  }
  auto module = std::make_shared<Module>(name, params);
  const int64_t handle = nextHandle.fetch_add(1);
  std::lock_guard<std::mutex> lock(registryMu);
  registry().emplace(handle, std::move(module));
  return handle;
}

bool releaseModule(int64_t handle) {
  std::shared_ptr<Module> gone;  // destroyed outside the registry's lock
  std::lock_guard<std::mutex> lock(registryMu);
  auto it = registry().find(handle);
  if (it == registry().end()) {
    return false;
  }
  gone = std::move(it->second);
  registry().erase(it);
  return true;
}

void setProgram(int64_t handle, bool training, const c10::intrusive_ptr<ForwardProgram>& program) {
  auto module = find(handle, "set_program");
  TORCH_CHECK(program, "set_program: no program");
  TORCH_CHECK(program->complete(), "set_program: the program of ", module->name, " is incomplete (no outputs set)");
  TORCH_CHECK(
      program->parametersRead() <= static_cast<int64_t>(module->params.size()), "set_program: the program of ",
      module->name, " reads parameter ", program->parametersRead() - 1, " of ", module->params.size());
  std::lock_guard<std::mutex> lock(module->mu);
  module->programs[training ? 1 : 0] = program;
}

void setTraining(int64_t handle, bool training) {
  auto module = find(handle, "set_training");
  std::lock_guard<std::mutex> lock(module->mu);
  TORCH_CHECK(
      module->programs[training ? 1 : 0], "set_training: ", module->name, " has no program for ",
      training ? "train" : "eval", " mode");
  module->training = training;
}

c10::Dict<std::string, int64_t> moduleInfo(int64_t handle) {
  auto module = find(handle, "module_info");
  c10::Dict<std::string, int64_t> info;
  info.insert("forwards", module->forwards.load());
  info.insert("snapshots", module->snapshots.load());
  std::lock_guard<std::mutex> lock(module->mu);
  info.insert("training", module->training ? 1 : 0);
  return info;
}

std::tuple<std::vector<at::Tensor>, std::vector<bool>, int64_t> forward(
    int64_t handle,
    int64_t contextId,
    int64_t requestId,
    std::vector<at::Tensor> inputs,
    const std::vector<bool>& requiresGrad,
    bool deviceMapSet) {
  // Every check comes before any work: a refused request runs and records nothing.
  auto module = find(handle, "remote_forward");
  const std::string prefix = "remote_forward of " + module->name + ": ";
  c10::intrusive_ptr<ForwardProgram> program;
  {
    std::lock_guard<std::mutex> lock(module->mu);
    program = module->programs[module->training ? 1 : 0];
  }
  TORCH_CHECK(program, prefix, "no program for ", module->training ? "train" : "eval", " mode");
  checkCallerContextId(prefix, contextId);
  checkRequestId(prefix, contextId, requestId);
  program->checkInputs(prefix, inputs);
  TORCH_CHECK_VALUE(
      requiresGrad.size() == inputs.size(), "ValueError: ", prefix, "requires_grad has ", requiresGrad.size(),
      " flags for ", inputs.size(), " inputs");
  const bool anyRequiresGrad = std::any_of(requiresGrad.begin(), requiresGrad.end(), [](bool b) { return b; });
  TORCH_CHECK_VALUE(
      (requestId >= 0) == anyRequiresGrad, "ValueError: ", prefix,
      requestId >= 0 ? "an autograd_message_id for a request in which no input requires grad"
                     : "inputs that require grad need an autograd_message_id");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto dtype = inputs[i].scalar_type();
    TORCH_CHECK_VALUE(
        !requiresGrad[i] || at::isFloatingType(dtype) || at::isComplexType(dtype), "ValueError: ", prefix, "inputs[", i,
        "] of dtype ", dtypeName(dtype), " cannot require grad (only floating point and complex tensors can)");
  }

  const bool record = contextId >= 0;
  at::AutoGradMode gradMode(record);
  HeldRequest held = holdRequest(contextId, requestId, inputs, requiresGrad);
  std::vector<at::Tensor> outputs;
  try {
    auto snapshot = snapshotOf(*module);
    outputs = program->run(prefix, snapshot->params, std::move(inputs), module->buffersMu);
    if (program->device().is_cuda() && !deviceMapSet) {
      // Without a device map only CPU tensors cross (torch's RemoteModule does the same).
      for (auto& output : outputs) {
        output = output.to(at::kCPU);
      }
    }
  } catch (...) {
    dropRequest(held);
    throw;
  }
  module->forwards.fetch_add(1);
  const int64_t answerId = record ? recordCallee(prefix, held, contextId, outputs) : -1;
  std::vector<bool> outputsRequireGrad;
  outputsRequireGrad.reserve(outputs.size());
  for (auto& output : outputs) {
    outputsRequireGrad.push_back(answerId >= 0 && output.requires_grad());
    if (answerId < 0) {
      output = output.detach();
    }
  }
  return {std::move(outputs), std::move(outputsRequireGrad), answerId};
}

}  // namespace gilfree_rpc::nn

// Kernels (schemas in ops.cpp).
TORCH_LIBRARY_IMPL(gilfree_rpc, CompositeImplicitAutograd, m) {
  m.impl("_nn_register", TORCH_FN(gilfree_rpc::nn::registerModule));
  m.impl("_nn_release", TORCH_FN(gilfree_rpc::nn::releaseModule));
  m.impl("_nn_set_training", TORCH_FN(gilfree_rpc::nn::setTraining));
  m.impl("_nn_info", TORCH_FN(gilfree_rpc::nn::moduleInfo));
  m.impl("_nn_forward", [](int64_t handle, int64_t contextId, int64_t requestId, std::vector<at::Tensor> inputs,
                           c10::List<bool> requiresGrad, bool deviceMapSet) {
    auto [outputs, outputsRequireGrad, answerId] = gilfree_rpc::nn::forward(
        handle, contextId, requestId, std::move(inputs), std::vector<bool>(requiresGrad.begin(), requiresGrad.end()),
        deviceMapSet);
    c10::List<bool> marks;
    for (const bool mark : outputsRequireGrad) {
      marks.push_back(mark);
    }
    return std::make_tuple(std::move(outputs), std::move(marks), answerId);
  });
}
