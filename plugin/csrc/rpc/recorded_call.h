// Native RPC calls recorded in a distributed autograd context, as torch's RPC layer records
// its own.
//
// torch's RPC records a call made inside a distributed autograd context: the caller's
// tensors that require grad get a send function and the callee's copies of them a recv
// function, under one autograd_message_id made by the caller; the answer the same way back,
// under an id made by the callee. Both workers then know each other in the context (its
// release reaches both). The native RPC functions (rpc_functions.h) carry no autograd
// metadata: those that take part in a backward pass (the embedding lookups,
// embedding/remote_lookup.h; the remote modules' forward, nn/remote_module.h) record it
// with the helpers here, so that the plugin's engine and torch's dist_autograd.backward carry
// gradients across them as across torch's own RPCs.
//
// The protocol, for a call in context C:
// 1. The caller makes the request's id (beginCall), if some of its tensors require grad, notes
//    the callee as a worker C knows (its release reaches the callee), and sends the call with C
//    and that id.
// 2. The callee checks everything it was sent (checkCallerContextId, checkAutogradMessageId), then
//    gives its copies of the tensors that require grad their recv function (holdRequest: the
//    context is made here if it is new, as torch's RPC layer's getOrCreateContext makes it)
//    and runs the call. Only once the call has succeeded does it record anything in the
//    context: the request's recv function and the answer's send function (recordCallee). A
//    refused call touches no context; a call that fails while it runs records nothing (a
//    context made for it is released with the caller's).
// 3. When the answer arrives, the caller records the request's send function and the
//    answer's recv function (recordCall), unless the callee recorded nothing (answer id -1).
//    A failed call records nothing on the caller. When C was released on the caller before
//    the answer arrived, nothing is recorded, the callee is told to release its side
//    (sendContextRelease), and recordCall raises.
//
// Untrusted input: ids come from another worker, so the callee checks that a context id is
// -1 or made by a worker of the group, and that an autograd_message_id is made by a worker of the
// group and recorded in the context neither as a recv function nor as a send function. (It
// cannot check that the id was made by the worker that sent it: the transport does not tell.)
//
// torch internals relied on: compat.h's recordSendFunction, makeRecvFunction, addRecvFunction,
// recordRecvFunction and sendContextRelease, workerIdOf (the ids' layout).
#pragma once

#include "compat.h"

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

namespace gilfree_rpc {

// --- the caller -------------------------------------------------------------------------

// Raises RuntimeError unless `contextId` is a live distributed autograd context on this worker,
// with the library's one message for it (the op _check_context: also the distributed
// optimizer's, plugin/optim/_owners.py): "<what>: no distributed autograd context <id> on this
// worker (worker '<name>' (id <n>); released, or never made here): <advice> inside the `with
// dist_autograd.context()` block that created it<after>".
void checkLiveContext(
    const std::string& what, int64_t contextId, const std::string& advice, const std::string& after = "");

// Before sending a call to worker `callee` in context `contextId` (-1: this thread's current
// context): the context to record the call in and, when some of `requiresGrad` is true, a new
// autograd_message_id for the request; (-1, -1) outside a context or, for the current context,
// with grad mode off. Makes `callee` a worker the context knows, as torch's RPC layer does when it
// sends a message with autograd metadata, so that the context's release reaches the callee also
// when the call fails after the callee recorded it (an answer that comes after the RPC timeout).
// Raises, naming `what`, when the context is not live on this worker.
std::tuple<int64_t, int64_t> beginCall(
    const std::string& what,
    int64_t contextId,
    int64_t callee,
    const std::vector<bool>& requiresGrad);

// When the answer of a call in context `contextId` arrived from worker `fromWorker`: records
// the send function of request `autogradMessageId` over `sent` (the tensors of the request that
// require grad, in the order the request listed them) and the recv function of the answer
// `answerId` over the tensors of `answer` marked in `answerRequiresGrad`, which then require
// grad. Nothing when answerId is -1 (the callee recorded nothing). Returns `answer`, now
// part of the context's graph. When the context is no longer live here, records nothing,
// tells `fromWorker` to release its side, and raises RuntimeError naming `what`. Raises,
// recording nothing, for an answer that does not fit: a mask of another length, a marked
// tensor that is not floating point or complex.
std::vector<at::Tensor> recordCall(
    const std::string& what,
    int64_t contextId,
    int64_t autogradMessageId,
    const std::vector<at::Tensor>& sent,
    int64_t answerId,
    int64_t fromWorker,
    std::vector<at::Tensor> answer,
    const std::vector<bool>& answerRequiresGrad);

// --- the callee -------------------------------------------------------------------------

// A context id from a caller: -1 (none), or an id made by a worker of this group (its id in
// bits 48 and up), which that worker's release (or the failed-worker watch) can end. Raises,
// each message after `prefix`.
void checkCallerContextId(const std::string& prefix, int64_t contextId);

// An autograd_message_id from a caller in context `contextId` (checked already): -1 (nothing of the
// request requires grad), or, with a context, an id made by a worker of the group that the
// context here (if there is one yet) has not recorded. Raises, each message after `prefix`.
void checkAutogradMessageId(const std::string& prefix, int64_t contextId, int64_t autogradMessageId);

// A request's tensors that require grad, given their recv function before the call runs (its
// operators record their graph on them), which enters the context only once the call succeeded
// (recordCallee); a failed call drops it (dropRequest).
struct HeldRequest {
  int64_t contextId = -1;
  int64_t autogradMessageId = -1;
  torch::distributed::autograd::ContextPtr ctx;  // null when nothing of the request requires grad
  RecvFunctionPtr recv;
};
// In the caller's context `contextId` (checked), for request `autogradMessageId` (checked): replaces each
// tensor of `tensors` marked in `requiresGrad` by a new tensor over the same data whose history
// is the request's recv function (from the worker that made the id). Makes the context here when
// it is new (the recv function must point at it), but records nothing in it.
HeldRequest holdRequest(
    int64_t contextId,
    int64_t autogradMessageId,
    std::vector<at::Tensor>& tensors,
    const std::vector<bool>& requiresGrad);

// After the call succeeded, in the caller's context `contextId` (made here if new): records the
// held request's recv function, the answer's send function over the tensors of `answer` that
// require grad, and returns the answer's autograd_message_id (made here); -1, recording nothing,
// when no tensor of the answer requires grad. Raises, naming `prefix`, when the context was
// released meanwhile here (the caller released it: nothing is recorded for good).
int64_t recordCallee(const std::string& prefix, HeldRequest& held, int64_t contextId, const std::vector<at::Tensor>& answer);

// After the call failed: forgets a held request (nothing of it is in the context).
void dropRequest(HeldRequest& held);

}  // namespace gilfree_rpc
