// Remote modules' forward pass, answered natively on the owner (plugin/nn: RemoteModule).
//
// An owner registers a module under a handle (registerModule: its class's name and its
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
// (optim/step_lock.h, the locks every optimizer step of this library holds while it writes
// them), so it never holds half a step; it is shared by every forward until a parameter's
// version counter moves (a step, or any in-place write, bumps it), and then the next forward
// takes a new one. A forward's graph keeps the snapshot it read, so its backward computes the
// gradients at the weights that forward used, whatever steps came between (asynchronous SGD's
// semantics), and no step ever waits for a forward or a backward. Cost: one copy of the
// parameters per version that some forward reads, and the memory of the versions that some
// graph still holds.
//
// Buffers: the program reads and writes the live buffers (BatchNorm's running statistics
// update in place, as in eager mode); the instructions that take a buffer run one at a time
// per module (program.h).
#pragma once

#include "nn/program.h"
#include "optim/step_lock.h"

#include <ATen/core/Dict.h>
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

namespace gilfree_rpc::nn {

// Registers a module (`name`: its class, for messages) with its parameters (the order the
// programs' bindParameter indices refer to); returns its handle (unique in the process,
// never reused). The registry holds the parameters until releaseModule.
int64_t registerModule(const std::string& name, const std::vector<at::Tensor>& params);
// Forgets a handle; whether it was registered.
bool releaseModule(int64_t handle);
// Gives module `handle` its program for train mode (`training`) or eval mode; raises for an
// unknown handle, or a program that reads a parameter the module does not have.
void setProgram(int64_t handle, bool training, const c10::intrusive_ptr<ForwardProgram>& program);
// Switches the mode whose program the next forwards run; raises when it has none.
void setTraining(int64_t handle, bool training);
// Counters of module `handle`: forwards (run), snapshots (taken), training (0 or 1).
c10::Dict<std::string, int64_t> moduleInfo(int64_t handle);

// RPC handler: module `handle`'s forward on `inputs` (the caller's tensor inputs, flattened)
// in the caller's context `contextId` (-1: none), the inputs marked in `requiresGrad`
// requiring grad under the caller's request id `requestId` (-1: none); outputs moved to the
// CPU unless `deviceMapSet` (the caller's device map brings them back). Returns the outputs,
// which of them require grad, and the autograd_message_id of their send function (-1: none
// recorded). Raises before anything runs or is recorded, naming the argument, for an unknown
// handle, ids that no worker of the group made, or inputs that do not fit the program (its
// input checks); an operator's error while the program runs records nothing either.
std::tuple<std::vector<at::Tensor>, std::vector<bool>, int64_t> forward(
    int64_t handle,
    int64_t contextId,
    int64_t requestId,
    std::vector<at::Tensor> inputs,
    const std::vector<bool>& requiresGrad,
    bool deviceMapSet);

}  // namespace gilfree_rpc::nn
