// The registry of remote modules, their snapshots and their forward handler
// (remote_module.h); the kernels of their ops (schemas in ops.cpp).
#include "nn/remote_module.h"
#include "nn/program_encoding.h"

#include "debug_counters.h"
#include "handle_registry.h"
#include "python_names.h"
#include "rpc/recorded_call.h"
#include "rpc/worker_error.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>
#include <utility>

namespace gilfree_rpc::nn {

// The parameters a forward reads: one copy of each, at the versions they had.
struct Snapshot {
  std::vector<at::Tensor> params;
  std::vector<uint32_t> versions;
  StreamOrder ready;  // the copies' work (set before the snapshot is shared)
};

namespace {

HandleRegistry<NativeModule>& registry() {
  static auto* modules = new HandleRegistry<NativeModule>();  // leaky: RPC threads outlive statics
  return *modules;
}

// The remote modules' counters in plugin.debug_info() (debug_counters.h): the native modules
// alive on this worker, and the forwards and parameter snapshots of all of them since the
// worker started.
std::atomic<int64_t> totalForwards{0};
std::atomic<int64_t> totalSnapshots{0};

const DebugCounters kNativeModuleCounters("nn", [] {
  return Counters{{"num_native_modules", registry().numLive()},
                  {"num_native_forwards", totalForwards.load()},
                  {"num_snapshots", totalSnapshots.load()}};
});

std::vector<uint32_t> versionsOf(const std::vector<at::Tensor>& params) {
  std::vector<uint32_t> versions;
  versions.reserve(params.size());
  for (const auto& p : params) {
    versions.push_back(p._version());
  }
  return versions;
}

}  // namespace

NativeModule::NativeModule(std::string name, std::vector<at::Tensor> params)
    : name_(std::move(name)), params_(std::move(params)), locks_(paramLocksFor(params_)) {
  for (size_t i = 0; i < params_.size(); ++i) {
    TORCH_CHECK(params_[i].defined(), "NativeModule: parameter ", i, " of ", name_, " is undefined");
  }
}

c10::intrusive_ptr<NativeModule> NativeModule::registered(c10::intrusive_ptr<NativeModule> self) {
  self->handle_ = registry().add(self);
  return self;
}

c10::intrusive_ptr<NativeModule> NativeModule::find(int64_t handle, const std::string& what) {
  auto found = registry().find(handle);
  TORCH_CHECK(
      found, what, ": handle ", handle, " is not a remote module on this worker (never registered, or released)");
  return found;
}

void NativeModule::release_resources() {
  registry().remove(handle_);
}

void NativeModule::setProgram(bool training, const c10::intrusive_ptr<ForwardProgram>& program) {
  TORCH_CHECK(program, "set_program: no program");
  TORCH_CHECK(program->complete(), "set_program: the program of ", name_, " is incomplete (no outputs set)");
  TORCH_CHECK(
      program->parametersRead() <= static_cast<int64_t>(params_.size()), "set_program: the program of ", name_,
      " reads parameter ", program->parametersRead() - 1, " of ", params_.size());
  std::lock_guard<std::mutex> lock(mu_);
  programs_[training ? 1 : 0] = program;
}

void NativeModule::setTraining(bool training) {
  std::lock_guard<std::mutex> lock(mu_);
  TORCH_CHECK(
      programs_[training ? 1 : 0], "set_training: ", name_, " has no program for ", training ? "train" : "eval",
      " mode");
  training_ = training;
}

void NativeModule::countForward() {
  forwards_.fetch_add(1);
  totalForwards.fetch_add(1);
}

c10::Dict<std::string, int64_t> NativeModule::info() {
  c10::Dict<std::string, int64_t> info;
  info.insert("forwards", forwards_.load());
  info.insert("snapshots", snapshots_.load());
  std::lock_guard<std::mutex> lock(mu_);
  info.insert("training", training_ ? 1 : 0);
  return info;
}

c10::intrusive_ptr<ForwardProgram> NativeModule::program() {
  std::lock_guard<std::mutex> lock(mu_);
  return programs_[training_ ? 1 : 0];
}

std::shared_ptr<const Snapshot> NativeModule::snapshot() {
  {
    auto versions = versionsOf(params_);
    std::lock_guard<std::mutex> lock(mu_);
    if (snapshot_ && snapshot_->versions == versions) {
      return snapshot_;
    }
  }
  // A step holds these locks while it writes the parameters and bumps their versions, so
  // what is read here is whole steps only.
  HeldParamLocks held(locks_);
  auto versions = versionsOf(params_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (snapshot_ && snapshot_->versions == versions) {
      return snapshot_;  // another forward took it meanwhile
    }
  }
  auto fresh = std::make_shared<Snapshot>();
  fresh->versions = std::move(versions);
  fresh->params.reserve(params_.size());
  for (const auto& p : params_) {
    // In grad mode, so that the copy's gradient flows to the parameter (CloneBackward).
    at::AutoGradMode gradMode(p.requires_grad());
    fresh->params.push_back(p.clone());
  }
  fresh->ready.record(fresh->params);
  snapshots_.fetch_add(1);
  totalSnapshots.fetch_add(1);
  std::lock_guard<std::mutex> lock(mu_);
  snapshot_ = fresh;
  return fresh;
}

std::tuple<std::vector<at::Tensor>, std::vector<bool>, int64_t> remoteForward(
    int64_t handle,
    int64_t contextId,
    int64_t autogradMessageId,
    std::vector<at::Tensor> inputs,
    const std::vector<bool>& requiresGrad,
    bool deviceMapSet) {
  // Every check comes before any work: a refused request runs and records nothing.
  auto module = NativeModule::find(handle, "remote_forward");
  const std::string prefix = "remote_forward of " + module->name() + ": ";
  auto program = module->program();
  TORCH_CHECK(program, prefix, "no program for the module's mode");
  checkCallerContextId(prefix, contextId);
  checkAutogradMessageId(prefix, contextId, autogradMessageId);
  program->checkInputs(prefix, inputs);
  TORCH_CHECK_VALUE(
      requiresGrad.size() == inputs.size(), prefix, "requires_grad has ", requiresGrad.size(),
      " flags for ", inputs.size(), " inputs");
  const bool anyRequiresGrad = std::any_of(requiresGrad.begin(), requiresGrad.end(), [](bool b) { return b; });
  TORCH_CHECK_VALUE(
      (autogradMessageId >= 0) == anyRequiresGrad, prefix,
      autogradMessageId >= 0 ? "an autograd_message_id for a request in which no input requires grad"
                     : "inputs that require grad need an autograd_message_id");
  for (size_t i = 0; i < inputs.size(); ++i) {
    const auto dtype = inputs[i].scalar_type();
    TORCH_CHECK_VALUE(
        !requiresGrad[i] || at::isFloatingType(dtype) || at::isComplexType(dtype), prefix, "inputs[", i,
        "] of dtype ", dtypeName(dtype), " cannot require grad (only floating point and complex tensors can)");
  }

  const bool record = contextId >= 0;
  at::AutoGradMode gradMode(record);
  HeldRequest held = holdRequest(contextId, autogradMessageId, inputs, requiresGrad);
  std::vector<at::Tensor> outputs;
  try {
    auto snapshot = module->snapshot();
    snapshot->ready.wait();  // copied on another forward's stream, maybe
    usedOnCurrentStream(snapshot->params);  // and freed only after this forward's work on it
    outputs = program->run(prefix, snapshot->params, std::move(inputs), module->buffersMutex(), module->buffersOrder());
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
  module->countForward();
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
  m.impl("_remote_forward", [](int64_t handle, int64_t contextId, int64_t autogradMessageId, std::vector<at::Tensor> inputs,
                           c10::List<bool> requiresGrad, bool deviceMapSet) {
    return gilfree_rpc::withTrailer("in gilfree_rpc::_remote_forward", [&] {
      auto [outputs, outputsRequireGrad, answerId] = gilfree_rpc::nn::remoteForward(
          handle, contextId, autogradMessageId, std::move(inputs), std::vector<bool>(requiresGrad.begin(), requiresGrad.end()),
          deviceMapSet);
      c10::List<bool> marks;
      for (const bool mark : outputsRequireGrad) {
        marks.push_back(mark);
      }
      return std::make_tuple(std::move(outputs), std::move(marks), answerId);
    });
  });
  m.impl("_nn_program_tables", TORCH_FN(gilfree_rpc::nn::programTables));
}
