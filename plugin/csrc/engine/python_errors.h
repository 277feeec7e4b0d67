// Keeping the message of an exception raised by Python code the engine runs.
//
// A Python tensor hook, pre-hook or post-hook, or a custom autograd.Function's
// backward, reports failure to C++ by throwing python_error (torch/csrc/Exceptions.h). The Python
// exception itself stays in the calling thread's Python error indicator (hooks) or
// in the python_error object (autograd.Function, which fetches it before throwing);
// torch's own engine turns it into a message on its autograd threads, ours has to do
// it itself, and on a thread that Python does not know, the indicator lives only as
// long as the thread state that torch's hook creates for the call and destroys
// before the exception reaches the engine.
#pragma once

#include <exception>
#include <optional>
#include <cstdint>
#include <string>

namespace gilfree_rpc {

// Gives this thread a Python thread state that outlives every hook call on it, so
// that a hook's exception is still in it when the engine catches the error. Does
// nothing on a thread Python knows already (the one that called backward), after
// the first call on a thread, or in a process without an interpreter. The first call
// on a new thread takes the GIL once; later calls cost one thread-local test.
void keepPythonErrorsOnThisThread();

// A Python exception raised by code the engine ran.
struct PythonError {
  std::string type;      // the exception type's name, e.g. "ValueError"
  std::string message;   // str() of the exception
  bool fromFunction;     // raised by a custom autograd.Function (else by a hook)
};

// The Python exception of `e` when `e` is a python_error whose Python exception can still
// be found (takes the GIL to read it, and clears the thread's error indicator); nullopt
// otherwise. With `keepForContext`, the exception object itself (with its traceback) is
// handed to plugin/_errors.py (_keep_original_error), where plugin.autograd.backward finds
// it for that context to chain it to the error it raises (on the worker that called
// backward: the only one where that call is in the same process).
std::optional<PythonError> describePythonError(const std::exception& e, std::optional<int64_t> keepForContext);

}  // namespace gilfree_rpc
