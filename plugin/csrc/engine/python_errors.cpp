#include "engine/python_errors.h"

#include "compat.h"

#include <c10/util/Type.h>

#include <typeinfo>

namespace gilfree_rpc {

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

// The Python exception `e` stands for, when `e` is torch's python_error and the exception
// can still be found (the caller knows `e` is one); see describeException.
std::optional<RaisedError> describePythonError(const std::exception& e, std::optional<int64_t> keepForContext) {
  if (!Py_IsInitialized()) {
    return std::nullopt;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  PythonException python = takePythonException(e);
  std::optional<RaisedError> result;
  if (python.type != nullptr && PyType_Check(python.type)) {
    result = RaisedError{
        reinterpret_cast<PyTypeObject*>(python.type)->tp_name,
        utf8(python.value),
        python.fromFunction ? "a Python autograd.Function" : "a Python hook"};
    if (keepForContext.has_value() && python.value != nullptr && PyExceptionInstance_Check(python.value)) {
      PyObject* existing = PyException_GetTraceback(python.value);  // a new reference, or null
      if (existing == nullptr && python.traceback != nullptr) {
        PyException_SetTraceback(python.value, python.traceback);
      }
      Py_XDECREF(existing);
      keepOriginal(*keepForContext, python.value);
    }
  }
  Py_XDECREF(python.type);
  Py_XDECREF(python.value);
  Py_XDECREF(python.traceback);
  PyGILState_Release(gil);
  return result;
}

}  // namespace

RaisedError describeException(const std::exception& e, std::optional<int64_t> keepOriginalFor) {
  if (const auto* error = dynamic_cast<const c10::Error*>(&e)) {
    return {pythonTypeOf(*error), error->what_without_backtrace(), ""};
  }
  if (isPythonError(e)) {
    if (auto python = describePythonError(e, keepOriginalFor)) {
      return *python;
    }
  }
  std::string text = e.what();
  if (text.empty()) {
    text = "(no message)";
  }
  return {c10::demangle(typeid(e).name()), text, ""};
}

}  // namespace gilfree_rpc
