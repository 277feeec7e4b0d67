// What the engine says about an exception raised while it ran a node: its type as Python
// names it, its message, and what raised it (C++ code, a Python hook, a custom
// autograd.Function). A Python exception raised on the worker that called backward is also
// handed to plugin/_errors.py, where plugin.autograd.backward chains it to the error it
// raises.
//
// The torch internals this relies on (python_error's members, the Python error a hook leaves
// pending, how torch's bindings name c10::Error's subclasses) are compat.h's helpers
// (pythonTypeOf, isPythonError, takePythonException; keepPythonErrorsOnThisThread, which
// the engine calls before running a node with hooks, keeps a hook's error until it is read).
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace gilfree_rpc {

// What an exception raised while running a node says (engine.cpp turns it into torch's
// "Error on Node <n>: <message>", worker_error.h).
struct RaisedError {
  std::string type;      // as Python names it: "ValueError", "RuntimeError" (c10::Error), ...
  std::string message;   // the exception's own message, nothing added
  std::string raisedBy;  // "a Python hook", "a Python autograd.Function", or "" (C++ code)
};

// Describes `e`: a c10::Error by the Python type torch's bindings would raise and its message
// without a backtrace; torch's python_error by the Python exception it stands for (takes the
// GIL to read it, and clears the thread's pending error), which with `keepOriginalFor` is
// also handed, with its traceback, to plugin._errors._keep_original_error for that context
// (on the worker that called backward: the only one where that call is in the same process);
// anything else by its demangled C++ type and what().
RaisedError describeException(const std::exception& e, std::optional<int64_t> keepOriginalFor);

}  // namespace gilfree_rpc
