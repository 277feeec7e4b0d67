// The functions that workers call on each other by RPC, answered natively.
//
// torch's RPC agent answers a SCRIPT_CALL message (a call of a TorchScript function by its
// qualified name) by looking the name up in torch's process-wide compilation unit and
// running the function on one of its RPC threads, which hold no GIL. Each function defined
// here is a graph of one node: a call of one of this library's ops (schemas in ops.cpp)
// with the function's arguments, added to that unit from C++ when the library loads
// (compat.h, addOpFunction). No TorchScript source is compiled and none of torch.jit's
// Python entry points is called, so every worker that loads the library answers these
// calls, on a torch whose TorchScript frontend is gone too, and the owner's GIL is never
// taken. The op's own code does the work; an op that returns a Future is called with async
// execution (the RPC is answered when the future completes; no thread waits for it).
//
// Callers send them with callFunction (transport.h) or, from Python, with
// plugin._rpc_functions.call (torch's rpc_async of the function). Their errors reach the
// caller as text: each kernel that can raise wraps its body in withTrailer (worker_error.h), so
// that the text names the error's type and the worker. Every worker of a job must run the same
// library build.
#pragma once

#include <ATen/core/qualified_name.h>

#include <string>

namespace gilfree_rpc {

// The qualified name of the RPC function that calls the op gilfree_rpc::<op>:
// "gilfree_rpc.<op>".
c10::QualifiedName rpcFunctionName(const std::string& op);

// Whether `op` is one of the ops that RPC functions call (kRpcOps in rpc_functions.cpp).
bool isRpcFunctionOp(const std::string& op);

// Whether the RPC function of `op` returns a Future (called with async execution).
bool isAsyncRpcFunctionOp(const std::string& op);

// Adds every RPC function to torch's compilation unit, once per process. Runs when the
// library loads (ops.cpp, after the op schemas are declared); later calls do nothing.
void defineRpcFunctions();

}  // namespace gilfree_rpc
