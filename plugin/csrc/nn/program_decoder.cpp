// The remote modules' program decoder: the builders of a ForwardProgram (program.h), which read
// the encoding plugin/nn/_lower.py writes (program_encoding.h: the argument codes, the integer
// operations; python_names.h: the dtype, layout and memory format names), check every slot and
// argument against the operator's schema, and turn them into instructions. What an instruction
// may do with the buffers, parameters and inputs it reads is the alias policy's
// (alias_policy.cpp); running the instructions is the interpreter's (interpreter.cpp).
#include "nn/program.h"
#include "nn/program_encoding.h"

#include "python_names.h"

#include <ATen/ATen.h>
#include <ATen/ScalarOps.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace gilfree_rpc::nn {
namespace {

at::ScalarType dtypeNamed(const std::string& name, const std::string& where) {
  const auto dtype = dtypeFromName(name);
  TORCH_CHECK(dtype.has_value(), where, ": no dtype is named ", name);
  return *dtype;
}

at::Layout layoutNamed(const std::string& name, const std::string& where) {
  const auto layout = layoutFromName(name);
  TORCH_CHECK(layout.has_value(), where, ": no layout is named ", name);
  return *layout;
}

at::MemoryFormat memoryFormatNamed(const std::string& name, const std::string& where) {
  const auto format = memoryFormatFromName(name);
  TORCH_CHECK(format.has_value(), where, ": no memory format is named ", name);
  return *format;
}

const IntOp* intOpNamed(const std::string& name) {
  for (const auto& [each, op] : kIntOps) {
    if (name == each) {
      return &op;
    }
  }
  return nullptr;
}

SlotKind kindOfResult(const c10::TypePtr& type) {
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return SlotKind::kTensor;
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      return SlotKind::kInt;
    case c10::TypeKind::FloatType:
      return SlotKind::kFloat;
    case c10::TypeKind::BoolType:
      return SlotKind::kBool;
    case c10::TypeKind::NumberType:
      return SlotKind::kScalar;
    case c10::TypeKind::ListType:
      if (type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
        return SlotKind::kTensorList;
      }
      return SlotKind::kOther;
    default:
      return SlotKind::kOther;
  }
}

}  // namespace

ForwardProgram::ForwardProgram(std::string module, int64_t numSlots, c10::Device device)
    : module_(std::move(module)), device_(device) {
  TORCH_CHECK(numSlots >= 0 && numSlots < (int64_t{1} << 24), "ForwardProgram: numSlots out of range: ", numSlots);
  slotKinds_.assign(numSlots, SlotKind::kUnset);
  marks_.assign(numSlots, 0);
  bound_.resize(numSlots);
}

void ForwardProgram::checkBuilding(const std::string& node) const {
  TORCH_CHECK(!complete_, "ForwardProgram: the outputs are set already (node ", node, ")");
}

void ForwardProgram::setSlot(int64_t slot, SlotKind kind, const std::string& node) {
  checkBuilding(node);
  TORCH_CHECK(
      slot >= 0 && slot < static_cast<int64_t>(slotKinds_.size()), "ForwardProgram: slot ", slot, " of node ", node,
      " out of range [0, ", slotKinds_.size(), ")");
  TORCH_CHECK(slotKinds_[slot] == SlotKind::kUnset, "ForwardProgram: slot ", slot, " of node ", node, " set twice");
  slotKinds_[slot] = kind;
}

void ForwardProgram::bindParameter(int64_t slot, int64_t index) {
  TORCH_CHECK(instructions_.empty(), "ForwardProgram: parameters are bound before the instructions");
  TORCH_CHECK(index >= 0, "ForwardProgram: parameter index ", index, " is negative");
  setSlot(slot, SlotKind::kTensor, "parameter " + std::to_string(index));
  marks_[slot] = kParameter;
  parameters_.emplace_back(slot, index);
}

void ForwardProgram::bindTensor(int64_t slot, at::Tensor value, bool buffer) {
  TORCH_CHECK(instructions_.empty(), "ForwardProgram: tensors are bound before the instructions");
  TORCH_CHECK(value.defined(), "ForwardProgram: an undefined tensor bound to slot ", slot);
  setSlot(slot, SlotKind::kTensor, buffer ? "a buffer" : "a constant");
  marks_[slot] = buffer ? kBuffer : 0;
  bound_[slot] = std::move(value);
}

void ForwardProgram::addSymbol(int64_t min, int64_t max) {
  TORCH_CHECK(inputs_.empty(), "ForwardProgram: symbols are added before the inputs");
  TORCH_CHECK(min >= 0 && (max == -1 || max >= min), "ForwardProgram: symbol range [", min, ", ", max, "] is empty");
  symbolRanges_.emplace_back(min, max);
}

void ForwardProgram::addInput(
    int64_t slot,
    const std::string& name,
    const std::string& dtype,
    std::vector<int64_t> symbols,
    std::vector<int64_t> scales,
    std::vector<int64_t> offsets) {
  TORCH_CHECK(instructions_.empty(), "ForwardProgram: inputs are added before the instructions");
  TORCH_CHECK(
      symbols.size() == scales.size() && symbols.size() == offsets.size(),
      "ForwardProgram: one symbol, scale and offset per dimension");
  for (size_t d = 0; d < symbols.size(); ++d) {
    TORCH_CHECK(
        symbols[d] >= -1 && symbols[d] < numSymbols(), "ForwardProgram: input ", inputs_.size(), " dimension ", d,
        " names symbol ", symbols[d], " of ", numSymbols());
    TORCH_CHECK(
        symbols[d] == -1 ? offsets[d] >= 0 : scales[d] > 0, "ForwardProgram: input ", inputs_.size(), " dimension ",
        d, " has no valid size");
  }
  setSlot(slot, SlotKind::kTensor, "input " + std::to_string(inputs_.size()));
  marks_[slot] = kInput;
  inputSlots_.push_back(slot);
  inputs_.push_back({name, dtypeNamed(dtype, "ForwardProgram: input " + name), std::move(symbols), std::move(scales), std::move(offsets)});
}

Arg ForwardProgram::parseArg(
    const c10::TypePtr& type,
    const c10::IValue* defaultValue,
    const std::vector<int64_t>& codes,
    size_t& pos,
    const std::vector<double>& floats,
    const std::vector<std::string>& strings,
    const std::string& where,
    uint8_t* marks) const {
  auto next = [&]() -> int64_t {
    TORCH_CHECK(pos < codes.size(), where, ": the argument codes end early");
    return codes[pos++];
  };
  auto constant = [](c10::IValue value) {
    Arg arg;
    arg.value = std::move(value);
    return arg;
  };
  auto slotOf = [&](std::initializer_list<SlotKind> kinds) {
    const int64_t slot = next();
    TORCH_CHECK(
        slot >= 0 && slot < static_cast<int64_t>(slotKinds_.size()), where, ": slot ", slot, " out of range");
    TORCH_CHECK(
        std::find(kinds.begin(), kinds.end(), slotKinds_[slot]) != kinds.end(), where, ": slot ", slot,
        " does not hold a value of type ", type->str(), " (not set yet, or of another kind)");
    if (marks != nullptr) {
      *marks |= marks_[slot];
    }
    Arg arg;
    arg.kind = Arg::kSlot;
    arg.slot = slot;
    return arg;
  };
  auto floatAt = [&](int64_t k) -> double {
    TORCH_CHECK(k >= 0 && k < static_cast<int64_t>(floats.size()), where, ": float constant ", k, " out of range");
    return floats[k];
  };
  auto stringAt = [&](int64_t k) -> const std::string& {
    TORCH_CHECK(k >= 0 && k < static_cast<int64_t>(strings.size()), where, ": string constant ", k, " out of range");
    return strings[k];
  };
  const int64_t tag = next();
  if (tag == kDefault) {
    TORCH_CHECK(defaultValue != nullptr, where, ": the argument has no default value");
    return constant(*defaultValue);
  }
  c10::TypePtr t = type;
  if (const auto* optional = t->castRaw<c10::OptionalType>()) {
    if (tag == kNone) {
      return constant(c10::IValue());
    }
    t = optional->getElementType();
  }
  auto refuse = [&]() -> Arg {
    TORCH_CHECK(false, where, ": code ", tag, " does not give a value of type ", type->str());
    return {};
  };
  switch (t->kind()) {
    case c10::TypeKind::TensorType:
      if (tag == kInt || tag == kFloat || tag == kBool) {
        // A number where the schema takes a Tensor (x.add_(1)): a 0-dim CPU tensor marked as a
        // wrapped number, as Python's argument parser makes one, so that type promotion treats it
        // as a scalar.
        const int64_t v = next();
        at::Tensor wrapped = tag == kInt ? at::scalar_to_tensor(v)
            : tag == kBool               ? at::scalar_to_tensor(v != 0)
                                         : at::scalar_to_tensor(floatAt(v));
        wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
        return constant(wrapped);
      }
      return tag == kSlotRef ? slotOf({SlotKind::kTensor}) : refuse();
    case c10::TypeKind::IntType:
    case c10::TypeKind::SymIntType:
      if (tag == kInt) {
        return constant(next());
      }
      return tag == kSlotRef ? slotOf({SlotKind::kInt}) : refuse();
    case c10::TypeKind::FloatType:
      if (tag == kInt) {
        return constant(static_cast<double>(next()));
      }
      if (tag == kFloat) {
        return constant(floatAt(next()));
      }
      return tag == kSlotRef ? slotOf({SlotKind::kFloat}) : refuse();
    case c10::TypeKind::NumberType:
      if (tag == kInt) {
        return constant(next());
      }
      if (tag == kFloat) {
        return constant(floatAt(next()));
      }
      if (tag == kBool) {
        return constant(next() != 0);
      }
      return tag == kSlotRef ? slotOf({SlotKind::kInt, SlotKind::kFloat, SlotKind::kBool, SlotKind::kScalar})
                             : refuse();
    case c10::TypeKind::BoolType:
      if (tag == kBool) {
        return constant(next() != 0);
      }
      return tag == kSlotRef ? slotOf({SlotKind::kBool}) : refuse();
    case c10::TypeKind::StringType:
      return tag == kStr ? constant(stringAt(next())) : refuse();
    case c10::TypeKind::DeviceObjType:
      return tag == kDevice ? constant(c10::Device(stringAt(next()))) : refuse();
    case c10::TypeKind::ScalarTypeType:
      return tag == kDtype ? constant(static_cast<int64_t>(dtypeNamed(stringAt(next()), where))) : refuse();
    case c10::TypeKind::LayoutType:
      return tag == kLayout ? constant(static_cast<int64_t>(layoutNamed(stringAt(next()), where))) : refuse();
    case c10::TypeKind::MemoryFormatType:
      return tag == kMemoryFormat ? constant(static_cast<int64_t>(memoryFormatNamed(stringAt(next()), where)))
                                  : refuse();
    case c10::TypeKind::ListType: {
      const auto element = t->castRaw<c10::ListType>()->getElementType();
      if (tag == kSlotRef && element->kind() == c10::TypeKind::TensorType) {
        return slotOf({SlotKind::kTensorList});
      }
      if (tag != kListOf) {
        return refuse();
      }
      const int64_t n = next();
      TORCH_CHECK(n >= 0 && n <= static_cast<int64_t>(codes.size()), where, ": list length ", n, " out of range");
      std::vector<Arg> items;
      for (int64_t i = 0; i < n; ++i) {
        items.push_back(parseArg(element, nullptr, codes, pos, floats, strings, where, marks));
      }
      const bool constants =
          std::all_of(items.begin(), items.end(), [](const Arg& item) { return item.kind == Arg::kConst; });
      Arg arg;
      arg.kind = Arg::kList;
      switch (element->kind()) {
        case c10::TypeKind::IntType:
        case c10::TypeKind::SymIntType:
          if (constants) {
            c10::List<int64_t> list;
            for (const auto& item : items) {
              list.push_back(item.value.toInt());
            }
            return constant(list);
          }
          arg.listKind = Arg::kInts;
          break;
        case c10::TypeKind::FloatType: {
          TORCH_CHECK(constants, where, ": a list of floats must be constant");
          c10::List<double> list;
          for (const auto& item : items) {
            list.push_back(item.value.toDouble());
          }
          return constant(list);
        }
        case c10::TypeKind::BoolType: {
          TORCH_CHECK(constants, where, ": a list of bools must be constant");
          c10::List<bool> list;
          for (const auto& item : items) {
            list.push_back(item.value.toBool());
          }
          return constant(list);
        }
        case c10::TypeKind::TensorType:
          for (const auto& item : items) {
            TORCH_CHECK(item.kind == Arg::kSlot, where, ": an element of a list of tensors that is not a value of the "
                        "program");
          }
          arg.listKind = Arg::kTensors;
          break;
        case c10::TypeKind::OptionalType:
          TORCH_CHECK(
              element->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType, where,
              ": arguments of type ", type->str(), " are not supported");
          for (const auto& item : items) {
            TORCH_CHECK(item.kind == Arg::kSlot || item.value.isNone(), where,
                        ": an element of a list of optional tensors that is neither None nor a value of the program");
          }
          arg.listKind = Arg::kOptionalTensors;
          break;
        default:
          TORCH_CHECK(false, where, ": arguments of type ", type->str(), " are not supported");
      }
      arg.items = std::move(items);
      return arg;
    }
    default:
      TORCH_CHECK(false, where, ": arguments of type ", type->str(), " are not supported");
  }
}

void ForwardProgram::addCall(
    const std::string& op,
    const std::string& overload,
    const std::string& node,
    bool gradOff,
    const std::vector<int64_t>& codes,
    const std::vector<double>& floats,
    const std::vector<std::string>& strings,
    const std::vector<int64_t>& outputs) {
  const std::string what = op + (overload.empty() ? "" : "." + overload);
  const std::string where = "ForwardProgram: node " + node + " (" + what + ")";
  auto handle = c10::Dispatcher::singleton().findSchema({op, overload});
  TORCH_CHECK(handle.has_value(), where, ": no such operator is registered on this worker");
  const auto& schema = handle->schema();
  TORCH_CHECK(!schema.is_vararg() && !schema.is_varret(), where, ": operators with variable arguments are not supported");
  checkBuilding(node);
  Instruction inst;
  inst.kind = Instruction::kOp;
  inst.node = node;
  inst.what = what;
  inst.gradOff = gradOff;
  size_t pos = 0;
  std::vector<uint8_t> argMarks;
  for (const auto& argument : schema.arguments()) {
    const c10::IValue* defaultValue = argument.default_value() ? &*argument.default_value() : nullptr;
    const std::string argWhere = where + ", argument " + argument.name();
    uint8_t marks = 0;
    inst.args.push_back(parseArg(argument.real_type(), defaultValue, codes, pos, floats, strings, argWhere, &marks));
    argMarks.push_back(marks);
    admitArgument(inst, argument, marks, where);
  }
  TORCH_CHECK(pos == codes.size(), where, ": ", codes.size() - pos, " argument codes left over");
  TORCH_CHECK(
      outputs.size() == schema.returns().size(), where, ": ", outputs.size(), " output slots for ",
      schema.returns().size(), " results");
  for (size_t j = 0; j < outputs.size(); ++j) {
    setSlot(outputs[j], kindOfResult(schema.returns()[j].real_type()), node);
    markResult(schema, j, argMarks, outputs[j]);
  }
  inst.outputs = outputs;
  inst.op = *handle;
  instructions_.push_back(std::move(inst));
}

void ForwardProgram::addListItem(const std::string& node, int64_t list, int64_t index, int64_t output) {
  checkBuilding(node);
  TORCH_CHECK(
      list >= 0 && list < static_cast<int64_t>(slotKinds_.size()) && slotKinds_[list] == SlotKind::kTensorList,
      "ForwardProgram: node ", node, ": slot ", list, " holds no list of tensors");
  setSlot(output, SlotKind::kTensor, node);
  marks_[output] = marks_[list];  // an element of a list that aliases a buffer (split) aliases it
  Instruction inst;
  inst.kind = Instruction::kListItem;
  inst.node = node;
  inst.what = "operator.getitem";
  Arg arg;
  arg.kind = Arg::kSlot;
  arg.slot = list;
  inst.args.push_back(arg);
  inst.code = index;
  inst.outputs = {output};
  instructions_.push_back(std::move(inst));
}

void ForwardProgram::addIntOp(
    const std::string& node,
    const std::string& op,
    const std::vector<int64_t>& codes,
    int64_t output) {
  checkBuilding(node);
  const IntOp* found = intOpNamed(op);
  const std::string where = "ForwardProgram: node " + node + " (operator." + op + ")";
  TORCH_CHECK(found != nullptr, where, ": not an integer operation this program runs");
  Instruction inst;
  inst.kind = Instruction::kIntOp;
  inst.node = node;
  inst.what = "operator." + op;
  inst.code = *found;
  size_t pos = 0;
  const int64_t operands = *found == kNeg ? 1 : 2;
  for (int64_t i = 0; i < operands; ++i) {
    inst.args.push_back(parseArg(c10::IntType::get(), nullptr, codes, pos, {}, {}, where, nullptr));
  }
  TORCH_CHECK(pos == codes.size(), where, ": ", codes.size() - pos, " operand codes left over");
  setSlot(output, SlotKind::kInt, node);
  inst.outputs = {output};
  instructions_.push_back(std::move(inst));
}

void ForwardProgram::setOutputs(const std::vector<int64_t>& slots) {
  for (const int64_t slot : slots) {
    TORCH_CHECK(
        slot >= 0 && slot < static_cast<int64_t>(slotKinds_.size()) && slotKinds_[slot] == SlotKind::kTensor,
        "ForwardProgram: output slot ", slot, " holds no tensor");
  }
  outputs_ = slots;
  complete_ = true;
}

void ForwardProgram::checkBuilt() const {
  TORCH_CHECK(complete_, "ForwardProgram of ", module_, ": its outputs were never set (an incomplete program)");
}


c10::Dict<std::string, c10::Dict<std::string, int64_t>> programTables() {
  c10::Dict<std::string, c10::Dict<std::string, int64_t>> tables;
  c10::Dict<std::string, int64_t> codes, intOps, dtypes, layouts, formats;
  for (const auto& [name, code] : kCodes) {
    codes.insert(name, code);
  }
  for (const auto& [name, op] : kIntOps) {
    intOps.insert(name, op);
  }
  for (const auto& [name, dtype] : dtypeNames()) {
    dtypes.insert(name, static_cast<int64_t>(dtype));
  }
  for (const auto& [layout, name] : kLayoutNames) {
    layouts.insert(name, static_cast<int64_t>(layout));
  }
  for (const auto& [format, name] : kMemoryFormatNames) {
    formats.insert(name, static_cast<int64_t>(format));
  }
  tables.insert("codes", codes);
  tables.insert("int_ops", intOps);
  tables.insert("dtypes", dtypes);
  tables.insert("layouts", layouts);
  tables.insert("memory_formats", formats);
  return tables;
}

}  // namespace gilfree_rpc::nn
