// A module's forward pass as a list of operator calls, run by C++ through the dispatcher.
//
// plugin/nn/_lower.py turns the program that torch.export made of a module (its training
// IR: ATen operators, with parameters, buffers and inputs as placeholders) into a
// ForwardProgram, one builder call per graph node: values live in numbered slots (the
// parameters, the buffers and tensor constants, the inputs, then every node's results), and
// each instruction calls one operator with arguments read from slots or given as constants,
// typed as the operator's schema wants them (checked when the instruction is added: an
// argument the schema does not take is refused then, not when the program runs). run() calls
// each operator boxed (c10::OperatorHandle::callBoxed), as the JIT interpreter calls
// TorchScript's operators: autograd records what it records in eager mode, and no Python
// runs. Besides operators, the program has the few FX nodes torch.export leaves that are not
// operators: an element of an operator's list result (operator.getitem), integer arithmetic
// on sizes (operator.add, sub, mul, floordiv, mod, neg on sym_size results), and grad-mode
// regions (torch.no_grad() and torch.enable_grad() become wrap_with_set_grad_enabled, whose
// sub-graph is inlined: the instructions of the innermost no_grad region run with grad mode
// off, the others in the call's grad mode).
//
// Four files, one job each: the decoder of the encoding plugin/nn/_lower.py writes (the
// builders, program_decoder.cpp; the encoding's tables, program_encoding.h), the alias policy
// (alias_policy.cpp), the admission check of the caller's inputs (input_check.cpp) and the
// interpreter (interpreter.cpp).
//
// Inputs: the program checks what a caller sends (an untrusted worker) before anything runs:
// their number; each one defined, dense (strided), of the example's dtype and number of
// dimensions; each dimension the export's size for it: a fixed number, or a symbol (a
// dimension torch.export kept dynamic) a * s + b with s in the range the export allows
// (range_constraints), one value for all the dimensions that share s. Nothing is read from
// the inputs' data.
//
// Buffers: the instructions that take a buffer, or a view or in-place result of one (the
// operators' alias annotations say which results alias which arguments), run one at a time
// per module, holding a mutex the caller passes, so that the updates of concurrent forwards
// (BatchNorm's running statistics, which the training IR updates in place) do not race. An
// instruction that writes a parameter or an input in place, directly or through a view, is
// refused when it is added.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>
#include <c10/core/Device.h>
#include <torch/custom_class.h>

#include "stream_order.h"

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace gilfree_rpc::nn {

// How a slot's value was made, for the checks of the instructions that read it.
enum class SlotKind : uint8_t { kUnset, kTensor, kInt, kFloat, kBool, kScalar, kTensorList, kOther };

// One argument of an instruction: a constant, a slot, or a list of them (built at each run).
struct Arg {
  enum Kind : uint8_t { kConst, kSlot, kList } kind = kConst;
  enum ListKind : uint8_t { kInts, kTensors, kOptionalTensors } listKind = kInts;
  c10::IValue value;       // kConst
  int64_t slot = -1;       // kSlot
  std::vector<Arg> items;  // kList: each kConst or kSlot
};

struct Instruction {
  enum Kind : uint8_t { kOp, kListItem, kIntOp } kind = kOp;
  std::optional<c10::OperatorHandle> op;  // kOp
  std::vector<Arg> args;                  // kOp: one per schema argument; kIntOp: the operands
  std::vector<int64_t> outputs;           // the slots of the results
  std::string node;                       // the FX node's name, for errors
  std::string what;                       // the operator or function, for errors
  bool gradOff = false;                   // inside a torch.no_grad() region of the forward
  bool holdsBuffers = false;              // takes a buffer (or a view of one): runs holding the buffers' mutex
  int64_t code = 0;                       // kListItem: the index; kIntOp: the operation
};

// One input's expected form.
struct InputSpec {
  std::string name;  // the forward's argument and the path in it: "x", "pair[1]"
  at::ScalarType dtype;
  // per dimension: symbol -1 for a fixed size (offset), else size = scale * s + offset
  std::vector<int64_t> symbols, scales, offsets;
};

class ForwardProgram : public torch::CustomClassHolder {
 public:
  // `module`: the module's class, for messages; `numSlots`: slots 0 .. numSlots - 1; the
  // program runs on `device` (its parameters' and buffers' device).
  ForwardProgram(std::string module, int64_t numSlots, c10::Device device);

  // Builders (plugin/nn/_lower.py), in order: bindings and inputs first, then the
  // instructions in the order they run, then the outputs. Each raises for a slot out of range
  // or already set, or an argument the schema does not take.
  // Slot `slot` holds the module's parameter number `index` (of the list the module was
  // registered with), read from the module's current snapshot at each run.
  void bindParameter(int64_t slot, int64_t index);
  // Slot `slot` holds `value`, one of the module's buffers (`buffer`) or a tensor constant.
  void bindTensor(int64_t slot, at::Tensor value, bool buffer);
  // Symbol number `symbols()` ranges over [min, max] (max -1: no bound).
  void addSymbol(int64_t min, int64_t max);
  // The next input, `name` (the forward's argument and the path in it), goes into `slot`: its
  // dtype (as Python names it, "torch.float32") and, per dimension, symbol (-1: fixed), scale
  // and offset.
  void addInput(int64_t slot, const std::string& name, const std::string& dtype, std::vector<int64_t> symbols, std::vector<int64_t> scales,
                std::vector<int64_t> offsets);
  // A call of operator `op` (its qualified name, "aten::linear") overload `overload`, node
  // `node`, its arguments encoded in `codes` (with the float constants `floats` and the string
  // constants `strings`, see program_encoding.h), its results into `outputs` (one slot per result of
  // the schema).
  void addCall(const std::string& op, const std::string& overload, const std::string& node, bool gradOff,
               const std::vector<int64_t>& codes, const std::vector<double>& floats,
               const std::vector<std::string>& strings, const std::vector<int64_t>& outputs);
  // Element `index` of the list in slot `list` into slot `output`.
  void addListItem(const std::string& node, int64_t list, int64_t index, int64_t output);
  // Integer arithmetic `op` ("add", "sub", "mul", "floordiv", "mod", "neg") of operands
  // encoded in `codes` (slots or constants), into slot `output`.
  void addIntOp(const std::string& node, const std::string& op, const std::vector<int64_t>& codes, int64_t output);
  // The forward's results (tensors), in the order of its flattened outputs.
  void setOutputs(const std::vector<int64_t>& slots);

  int64_t numInputs() const {
    return static_cast<int64_t>(inputs_.size());
  }
  int64_t numSymbols() const {
    return static_cast<int64_t>(symbolRanges_.size());
  }
  int64_t numInstructions() const {
    return static_cast<int64_t>(instructions_.size());
  }
  // 1 + the largest parameter index the program reads (0: none).
  int64_t parametersRead() const {
    int64_t n = 0;
    for (const auto& binding : parameters_) {
      n = std::max(n, binding.second + 1);
    }
    return n;
  }
  // Whether its outputs are set (the last builder call).
  bool complete() const {
    return complete_;
  }
  const std::string& module() const {
    return module_;
  }
  c10::Device device() const {
    return device_;
  }

  // The caller's inputs, checked (see above); raises ValueError or TypeError (the text begins
  // with the type's name), each message after `prefix`, naming the input.
  void checkInputs(const std::string& prefix, const std::vector<at::Tensor>& inputs) const;
  // Runs the program on `params` (the module's parameters, as registered) and `inputs`
  // (checked; moved to the program's device first), in the grad mode of the calling thread;
  // the instructions that take buffers hold `buffersMu`, their streams ordered by
  // `buffersOrder` (each waits for the previous one's work and records its own; nothing on the
  // CPU). Returns the outputs. An operator's
  // error is raised with its text first, then the node, the operator and `prefix`.
  std::vector<at::Tensor> run(const std::string& prefix, const std::vector<at::Tensor>& params,
                              std::vector<at::Tensor> inputs, std::mutex& buffersMu, StreamOrder& buffersOrder) const;

 private:
  // What a slot holds, beside its kind: the module's buffer, parameter or an input, or a view or
  // an in-place result of one (the schema's alias annotations carry the marks on).
  enum Mark : uint8_t { kBuffer = 1, kParameter = 2, kInput = 4 };

  void setSlot(int64_t slot, SlotKind kind, const std::string& node);
  void checkBuilding(const std::string& node) const;
  // One argument of type `type` from `codes` at `pos`; `marks` (optional) gathers the marks of
  // the slots it reads.
  Arg parseArg(const c10::TypePtr& type, const c10::IValue* defaultValue, const std::vector<int64_t>& codes,
               size_t& pos, const std::vector<double>& floats, const std::vector<std::string>& strings,
               const std::string& where, uint8_t* marks) const;
  void checkBuilt() const;
  // The alias policy (alias_policy.cpp): an argument of `inst` that reads slots marked `marks`
  // (the instruction then holds the buffers' mutex; raises, after `where`, for a write to a
  // parameter or an input); the marks of result number `result` of `schema`, in `slot`, from the
  // arguments it aliases (`argMarks`, one per argument).
  void admitArgument(Instruction& inst, const c10::Argument& argument, uint8_t marks, const std::string& where) const;
  void markResult(const c10::FunctionSchema& schema, size_t result, const std::vector<uint8_t>& argMarks, int64_t slot);

  const std::string module_;
  const c10::Device device_;
  std::vector<SlotKind> slotKinds_;
  std::vector<uint8_t> marks_;  // per slot: Mark bits
  std::vector<c10::IValue> bound_;                     // per slot: the bound tensors (buffers, constants)
  std::vector<std::pair<int64_t, int64_t>> parameters_;  // (slot, parameter index)
  std::vector<std::pair<int64_t, int64_t>> symbolRanges_;
  std::vector<InputSpec> inputs_;
  std::vector<int64_t> inputSlots_;
  std::vector<Instruction> instructions_;
  std::vector<int64_t> outputs_;
  bool complete_ = false;
};

}  // namespace gilfree_rpc::nn
