#include "engine/python_errors.h"

// Both builds (setup.py, CMake) compile with Python's headers: the functions below read
// Python exceptions. Without them (a build for a process with no Python) they do nothing,
// and a hook's error reads "an exception of type python_error without a message".
#if __has_include(<Python.h>)

// python_error (global namespace) is declared in torch's Python bindings header (an internal
// header, checked on torch 2.11 and 2.13): a std::exception with public PyObject*
// members `type`, `value`, `traceback`, set once the Python error was fetched
// (python_error::persist, which torch's autograd.Function nodes call before
// throwing; hooks throw it with the members unset and the error still pending).
#include <torch/csrc/Exceptions.h>

#include <Python.h>

namespace gilfree_rpc {

void keepPythonErrorsOnThisThread() {
  static thread_local bool done = false;
  if (done) {
    return;
  }
  done = true;
  if (!Py_IsInitialized() || PyGILState_GetThisThreadState() != nullptr) {
    return;
  }
  // PyGILState_Ensure creates the thread state (and takes the GIL); PyEval_SaveThread
  // gives the GIL back but keeps the state, which is never released. Torch's hooks
  // take the GIL with pybind11's gil_scoped_acquire, which finds this state through
  // PyGILState_GetThisThreadState and, as its count never drops to zero, leaves it
  // (and the pending exception in it) in place when the hook returns or throws.
  PyGILState_Ensure();
  PyEval_SaveThread();
}

namespace {

std::string utf8(PyObject* object) {
  if (object == nullptr) {
    return "";
  }
  PyObject* text = PyObject_Str(object);
  std::string result;
  if (text != nullptr) {
    const char* bytes = PyUnicode_AsUTF8(text);
    if (bytes != nullptr) {
      result = bytes;
    }
    Py_DECREF(text);
  }
  PyErr_Clear();  // a failing __str__ must not leave an error behind
  return result;
}

// Hands `value` (an exception) to plugin._errors._keep_original_error(context_id, value).
// Does nothing when that module cannot be imported (the library loaded without the
// package). Caller holds the GIL.
void keepOriginal(int64_t contextId, PyObject* value) {
  PyObject* module = PyImport_ImportModule("plugin._errors");
  if (module == nullptr) {
    PyErr_Clear();
    return;
  }
  PyObject* result =
      PyObject_CallMethod(module, "_keep_original_error", "LO", static_cast<long long>(contextId), value);
  Py_XDECREF(result);
  PyErr_Clear();
  Py_DECREF(module);
}

}  // namespace

std::optional<PythonError> describePythonError(const std::exception& e, std::optional<int64_t> keepForContext) {
  const auto* pythonError = dynamic_cast<const ::python_error*>(&e);
  if (pythonError == nullptr || !Py_IsInitialized()) {
    return std::nullopt;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  PyObject* type = pythonError->type;
  PyObject* value = pythonError->value;
  PyObject* traceback = pythonError->traceback;
  const bool fromFunction = type != nullptr;  // persisted by torch's autograd.Function node
  PyObject *fetchedType = nullptr, *fetchedValue = nullptr, *fetchedTraceback = nullptr;
  if (type == nullptr) {
    // A hook: the exception is still this thread's pending error (see above).
    PyErr_Fetch(&fetchedType, &fetchedValue, &fetchedTraceback);
    PyErr_NormalizeException(&fetchedType, &fetchedValue, &fetchedTraceback);
    type = fetchedType;
    value = fetchedValue;
    traceback = fetchedTraceback;
  }
  std::optional<PythonError> result;
  if (type != nullptr && PyType_Check(type)) {
    result = PythonError{reinterpret_cast<PyTypeObject*>(type)->tp_name, utf8(value), fromFunction};
    if (keepForContext.has_value() && value != nullptr && PyExceptionInstance_Check(value)) {
      PyObject* existing = PyException_GetTraceback(value);  // a new reference, or null
      if (existing == nullptr && traceback != nullptr) {
        PyException_SetTraceback(value, traceback);
      }
      Py_XDECREF(existing);
      keepOriginal(*keepForContext, value);
    }
  }
  Py_XDECREF(fetchedType);
  Py_XDECREF(fetchedValue);
  Py_XDECREF(fetchedTraceback);
  PyGILState_Release(gil);
  return result;
}

}  // namespace gilfree_rpc

#else  // no Python headers

namespace gilfree_rpc {

void keepPythonErrorsOnThisThread() {}

std::optional<PythonError> describePythonError(const std::exception&, std::optional<int64_t>) {
  return std::nullopt;
}

}  // namespace gilfree_rpc

#endif
