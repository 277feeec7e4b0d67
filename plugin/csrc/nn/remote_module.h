// Remote modules' forward pass, answered natively on the owner (plugin/nn: RemoteModule).
//
// An owner registers a module under a handle (a NativeModule: its class's name and its
// parameters) and gives it one ForwardProgram per mode (program.h; train and eval, made by
// torch.export on the owner, plugin/nn/_lower.py). A caller sends forward by RPC
// (rpc_functions.h): the owner checks the request, runs the program of the module's current
// mode on its RPC thread, without its GIL, and answers with the outputs. Inside a
// distributed autograd context (context_id >= 0) the program runs in grad mode and the call
// is recorded as torch's RPC records one (rpc/recorded_call.h): a recv function for the
// inputs that require grad, a send function for the outputs that do, so that a backward
// pass brings the parameters' gradients into the context here. Outside a context nothing
// is recorded and grad mode is off.
//
// Parameters: the program reads a snapshot of the module's parameters, not the parameters
// themselves. A snapshot is one copy of every parameter (made in grad mode, so that its
// gradient flows to the parameter: a clone), taken under the parameters' locks
// (param_locks.h, the locks every optimizer step of this library holds while it writes
// them), so it never holds half a step; it is shared by every forward until a parameter's
// version counter moves (a step, or any in-place write, bumps it), and then the next forward
// takes a new one. A forward's graph keeps the snapshot it read, so its backward computes the
// gradients at the weights that forward used, whatever steps came between (asynchronous SGD's
// semantics). A step waits for a forward only while that forward copies the parameters, never
// for a backward. Cost: one copy of the parameters per version that some forward reads, and the
// memory of the versions that some graph still holds.
//
// Buffers: the program reads and writes the live buffers (BatchNorm's running statistics
// update in place, as in eager mode); the instructions that take a buffer run one at a time
// per module (program.h).
//
// Streams (a module on a GPU): a snapshot is copied on the current stream of the forward that
// takes it, under the parameters' locks (which order it after the last step's writes and the
// next step after it: param_locks.h), and every forward that reads it first makes its own
// stream wait for the copy; each instruction that takes a buffer waits for the work of the
// previous one (another forward's, on another stream) and records its own (stream_order.h).
#pragma once

#include "nn/program.h"
#include "param_locks.h"
#include "stream_order.h"

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>
#include <torch/custom_class.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace gilfree_rpc::nn {

struct Snapshot;

// A module registered on its owner: its parameters (the order the programs' bindParameter
// indices refer to), their locks and snapshot, its programs (eval, train) and mode.
// torch.classes.gilfree_rpc.NativeModule(name, params): `name` is the module's class, for
// messages. Reached by its handle (handle_registry.h); it lives as long as the Python object
// that holds it (plugin/nn/_owner.py keeps it with the module), so the handle goes with the
// module.
class NativeModule : public torch::CustomClassHolder {
 public:
  NativeModule(std::string name, std::vector<at::Tensor> params);
  // Adds `self` to the registry; returns it.
  static c10::intrusive_ptr<NativeModule> registered(c10::intrusive_ptr<NativeModule> self);
  // The module of `handle`; raises RuntimeError (after `what`) when there is none.
  static c10::intrusive_ptr<NativeModule> find(int64_t handle, const std::string& what);
  void release_resources() override;

  int64_t handle() const {
    return handle_;
  }
  const std::string& name() const {
    return name_;
  }
  // Gives the module its program for train mode (`training`) or eval mode; raises for a
  // program that is incomplete or reads a parameter the module does not have.
  void setProgram(bool training, const c10::intrusive_ptr<ForwardProgram>& program);
  // Switches the mode whose program the next forwards run; raises when it has none.
  void setTraining(bool training);
  // Counters: forwards (run), snapshots (taken), training (0 or 1).
  c10::Dict<std::string, int64_t> info();

  // The program of the current mode (null when none).
  c10::intrusive_ptr<ForwardProgram> program();
  // The snapshot of the parameters at their current versions (see the top of this file).
  std::shared_ptr<const Snapshot> snapshot();
  // The mutex of the instructions that take a buffer, and the order of their streams (guarded
  // by the mutex).
  std::mutex& buffersMutex() {
    return buffersMu_;
  }
  StreamOrder& buffersOrder() {
    return buffersOrder_;
  }
  // One more forward of this module (and of the worker's, in plugin.debug_info()).
  void countForward();

 private:
  int64_t handle_ = -1;
  const std::string name_;
  const std::vector<at::Tensor> params_;
  const std::vector<std::shared_ptr<ParamLock>> locks_;
  std::mutex mu_;  // guards the fields below
  std::shared_ptr<const Snapshot> snapshot_;
  c10::intrusive_ptr<ForwardProgram> programs_[2];  // eval, train
  bool training_ = true;
  std::mutex buffersMu_;
  StreamOrder buffersOrder_;
  std::atomic<int64_t> forwards_{0};
  std::atomic<int64_t> snapshots_{0};
};

// RPC handler: module `handle`'s forward on `inputs` (the caller's tensor inputs, flattened)
// in the caller's context `contextId` (-1: none), the inputs marked in `requiresGrad`
// requiring grad under the caller's autograd_message_id `autogradMessageId` (-1: none); outputs moved to the
// CPU unless `deviceMapSet` (the caller's device map brings them back). Returns the outputs,
// which of them require grad, and the autograd_message_id of their send function (-1: none
// recorded). Raises before anything runs or is recorded, naming the argument, for an unknown
// or released handle, ids that no worker of the group made, or inputs that do not fit the
// program (its input checks); an operator's error while the program runs records nothing
// either.
std::tuple<std::vector<at::Tensor>, std::vector<bool>, int64_t> remoteForward(
    int64_t handle,
    int64_t contextId,
    int64_t autogradMessageId,
    std::vector<at::Tensor> inputs,
    const std::vector<bool>& requiresGrad,
    bool deviceMapSet);

}  // namespace gilfree_rpc::nn
