// The forward program (program.h): its builders, the checks of the caller's inputs, and the
// interpreter.
//
// An instruction's arguments come encoded as a stream of int64 codes (plugin/nn/_lower.py
// writes it), one value per argument of the operator's schema, in the schema's order:
//   0        None
//   1 v      the int v
//   2 k      the float floats[k]
//   3 b      the bool b (0 or 1)
//   4 k      the string strings[k]
//   5 s      the value in slot s
//   6 n ...  a list of the n values that follow
//   7 k      the dtype named strings[k] ("torch.float32")
//   8 k      the device strings[k] ("cpu", "cuda:0")
//   9 k      the layout named strings[k] ("torch.strided")
//   10 k     the memory format named strings[k] ("torch.channels_last")
//   11       the schema's default value of the argument
// Each value is converted to the type the schema gives the argument (its real type: SymInt,
// ScalarType, ...) when the instruction is added, and refused there if it does not fit.
#include "nn/program.h"

#include "compat.h"
#include "python_names.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/ScalarOps.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>
#include <string_view>
#include <utility>
#include <unordered_map>

namespace gilfree_rpc::nn {
namespace {

enum Code : int64_t {
  kNone = 0,
  kInt = 1,
  kFloat = 2,
  kBool = 3,
  kStr = 4,
  kSlotRef = 5,
  kListOf = 6,
  kDtype = 7,
  kDevice = 8,
  kLayout = 9,
  kMemoryFormat = 10,
  kDefault = 11,
};

enum IntOp : int64_t { kAdd, kSub, kMul, kFloorDiv, kMod, kNeg };

const std::unordered_map<std::string, IntOp>& intOps() {
  static const std::unordered_map<std::string, IntOp> ops{
      {"add", kAdd}, {"sub", kSub}, {"mul", kMul}, {"floordiv", kFloorDiv}, {"mod", kMod}, {"neg", kNeg}};
  return ops;
}

// The dtype, layout and memory format Python names "torch.<name>".
std::string withoutTorch(const std::string& name) {
  return name.rfind("torch.", 0) == 0 ? name.substr(6) : name;
}

at::ScalarType dtypeNamed(const std::string& name, const std::string& where) {
  const std::string bare = withoutTorch(name);
  for (int i = 0; i < static_cast<int>(at::ScalarType::NumOptions); ++i) {
    const auto dtype = static_cast<at::ScalarType>(i);
    std::pair<std::string_view, std::string_view> names;
    try {
      names = c10::getDtypeNames(dtype);
    } catch (const c10::Error&) {
      continue;  // a dtype Python has no name for
    }
    if (bare == names.first || (!names.second.empty() && bare == names.second)) {
      return dtype;
    }
  }
  TORCH_CHECK(false, where, ": no dtype is named ", name);
  return at::ScalarType::Undefined;
}

at::Layout layoutNamed(const std::string& name, const std::string& where) {
  for (const auto layout : {at::kStrided, at::kSparse, at::kSparseCsr, at::kSparseCsc, at::kSparseBsr, at::kSparseBsc,
                            at::kMkldnn, at::kJagged}) {
    if (name == layoutName(layout)) {
      return layout;
    }
  }
  TORCH_CHECK(false, where, ": no layout is named ", name);
  return at::kStrided;
}

at::MemoryFormat memoryFormatNamed(const std::string& name, const std::string& where) {
  static const std::unordered_map<std::string, at::MemoryFormat> formats{
      {"contiguous_format", at::MemoryFormat::Contiguous},
      {"preserve_format", at::MemoryFormat::Preserve},
      {"channels_last", at::MemoryFormat::ChannelsLast},
      {"channels_last_3d", at::MemoryFormat::ChannelsLast3d}};
  const auto found = formats.find(withoutTorch(name));
  TORCH_CHECK(found != formats.end(), where, ": no memory format is named ", name);
  return found->second;
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

// Python's floor division and modulo of ints.
int64_t floorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t pythonMod(int64_t a, int64_t b) {
  const int64_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

c10::IValue materialize(const Arg& arg, const std::vector<c10::IValue>& frame) {
  switch (arg.kind) {
    case Arg::kConst:
      return arg.value;
    case Arg::kSlot:
      return frame[arg.slot];
    case Arg::kList:
      break;
  }
  switch (arg.listKind) {
    case Arg::kInts: {
      c10::List<int64_t> list;
      list.reserve(arg.items.size());
      for (const auto& item : arg.items) {
        list.push_back(item.kind == Arg::kConst ? item.value.toInt() : frame[item.slot].toInt());
      }
      return list;
    }
    case Arg::kTensors: {
      c10::List<at::Tensor> list;
      list.reserve(arg.items.size());
      for (const auto& item : arg.items) {
        list.push_back(frame[item.slot].toTensor());
      }
      return list;
    }
    case Arg::kOptionalTensors: {
      c10::List<std::optional<at::Tensor>> list;
      list.reserve(arg.items.size());
      for (const auto& item : arg.items) {
        if (item.kind == Arg::kConst) {
          list.push_back(std::nullopt);
        } else {
          list.push_back(frame[item.slot].toTensor());
        }
      }
      return list;
    }
  }
  TORCH_INTERNAL_ASSERT(false, "unknown list kind");
  return {};
}

int64_t intValue(const Arg& arg, const std::vector<c10::IValue>& frame) {
  return arg.kind == Arg::kConst ? arg.value.toInt() : frame[arg.slot].toInt();
}

// An input's memory, checked before any operator reads it: its elements lie inside its storage
// (sizes, strides and offset came from another worker), and no two of them share memory (an
// expanded tensor, stride 0: a few bytes sent would stand for any number of rows to compute).
void checkMemory(const std::string& prefix, const std::string& name, const at::Tensor& t) {
  if (t.numel() == 0) {
    return;
  }
  int64_t last = t.storage_offset();  // the index of its last element in the storage
  bool overflow = last < 0;
  for (int64_t d = 0; d < t.dim() && !overflow; ++d) {
    int64_t span = 0;
    overflow = t.stride(d) < 0 || __builtin_mul_overflow(t.size(d) - 1, t.stride(d), &span) ||
        __builtin_add_overflow(last, span, &last);
  }
  int64_t bytes = 0;
  overflow = overflow || __builtin_mul_overflow(last + 1, static_cast<int64_t>(t.element_size()), &bytes);
  TORCH_CHECK_VALUE(
      !overflow && t.has_storage() && bytes <= static_cast<int64_t>(t.storage().nbytes()), "ValueError: ", prefix,
      name, " reaches outside its storage (shape ", t.sizes(), ", strides ", t.strides(), ", offset ",
      t.storage_offset(), ")");
  TORCH_CHECK_VALUE(
      at::has_internal_overlap(t) != at::MemOverlap::Yes, "ValueError: ", prefix, name,
      " overlaps itself (an expanded tensor, with stride 0: strides ", t.strides(),
      "); send one whose elements each have their own memory (.contiguous())");
}

// Raises the error `e` of an instruction again, its text first, then where it happened; of
// the same Python type, which leads the text when it is not RuntimeError (the caller rebuilds
// it: plugin/_errors.py).
[[noreturn]] void raiseFrom(const std::exception& e, const Instruction& inst, const std::string& prefix) {
  // Operators run here raise c10 errors (no Python runs on this path).
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  const std::string type = error != nullptr ? pythonTypeOf(*error) : "RuntimeError";
  const std::string message = error != nullptr ? error->what_without_backtrace() : e.what();
  const std::string where = " [" + prefix + "node " + inst.node + ", " + inst.what + "]";
  if (type == "ValueError") {
    TORCH_CHECK_VALUE(false, "ValueError: ", message, where);
  } else if (type == "TypeError") {
    TORCH_CHECK_TYPE(false, "TypeError: ", message, where);
  } else if (type == "IndexError") {
    TORCH_CHECK_INDEX(false, "IndexError: ", message, where);
  } else if (type == "NotImplementedError") {
    TORCH_CHECK_NOT_IMPLEMENTED(false, "NotImplementedError: ", message, where);
  }
  TORCH_CHECK(false, message, where);
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
    inst.holdsBuffers |= (marks & kBuffer) != 0;
    const auto* alias = argument.alias_info();
    TORCH_CHECK(
        alias == nullptr || !alias->isWrite() || (marks & (kParameter | kInput)) == 0, where, ": writes ",
        (marks & kParameter) ? "a parameter" : "an input", " (argument ", argument.name(),
        ", or a view of it) in place");
  }
  TORCH_CHECK(pos == codes.size(), where, ": ", codes.size() - pos, " argument codes left over");
  TORCH_CHECK(
      outputs.size() == schema.returns().size(), where, ": ", outputs.size(), " output slots for ",
      schema.returns().size(), " results");
  for (size_t j = 0; j < outputs.size(); ++j) {
    setSlot(outputs[j], kindOfResult(schema.returns()[j].real_type()), node);
    // A result that aliases an argument (a view, an in-place op's result) carries its marks.
    const auto* returned = schema.returns()[j].alias_info();
    if (returned == nullptr) {
      continue;
    }
    for (size_t i = 0; i < schema.arguments().size(); ++i) {
      const auto* taken = schema.arguments()[i].alias_info();
      if (taken == nullptr) {
        continue;
      }
      for (const auto& set : returned->beforeSets()) {
        if (taken->beforeSets().count(set) != 0) {
          marks_[outputs[j]] |= argMarks[i];
        }
      }
    }
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
  const auto found = intOps().find(op);
  const std::string where = "ForwardProgram: node " + node + " (operator." + op + ")";
  TORCH_CHECK(found != intOps().end(), where, ": not an integer operation this program runs");
  Instruction inst;
  inst.kind = Instruction::kIntOp;
  inst.node = node;
  inst.what = "operator." + op;
  inst.code = found->second;
  size_t pos = 0;
  const int64_t operands = found->second == kNeg ? 1 : 2;
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

void ForwardProgram::checkInputs(const std::string& prefix, const std::vector<at::Tensor>& inputs) const {
  checkBuilt();
  TORCH_CHECK_VALUE(
      inputs.size() == inputs_.size(), "ValueError: ", prefix, "expected ", inputs_.size(),
      " input tensors (the forward's tensor inputs, flattened), got ", inputs.size());
  std::vector<int64_t> values(symbolRanges_.size(), -1);
  std::vector<std::string> setBy(symbolRanges_.size());
  for (const bool derived : {false, true}) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      const at::Tensor& t = inputs[i];
      const InputSpec& spec = inputs_[i];
      const std::string name = "input " + spec.name + " (inputs[" + std::to_string(i) + "])";
      if (!derived) {
        TORCH_CHECK_VALUE(t.defined(), "ValueError: ", prefix, name, " is undefined");
        TORCH_CHECK_VALUE(
            t.layout() == at::kStrided && !t.is_nested(), "ValueError: ", prefix, name,
            " must be a dense (strided) tensor, got layout ", t.is_nested() ? "torch.jagged" : layoutName(t.layout()));
        TORCH_CHECK_VALUE(
            t.device().is_cpu() || t.device() == device_, "ValueError: ", prefix, name, " must be on the CPU or on ",
            device_, ", got ", t.device());
        TORCH_CHECK_VALUE(
            t.scalar_type() == spec.dtype, "ValueError: ", prefix, name, " must have dtype ", dtypeName(spec.dtype),
            " (the example's), got ", dtypeName(t.scalar_type()));
        TORCH_CHECK_VALUE(
            t.dim() == static_cast<int64_t>(spec.symbols.size()), "ValueError: ", prefix, name, " must have ",
            spec.symbols.size(), " dimensions (the example's), got ", t.dim(), " (shape ", t.sizes(), ")");
        checkMemory(prefix, name, t);
      }
      for (size_t d = 0; d < spec.symbols.size(); ++d) {
        const int64_t size = t.size(static_cast<int64_t>(d));
        const int64_t s = spec.symbols[d];
        if (s == -1) {
          TORCH_CHECK_VALUE(
              derived || size == spec.offsets[d], "ValueError: ", prefix, name, " dimension ", d, " must have size ",
              spec.offsets[d], " (fixed when the module was exported), got ", size, " (shape ", t.sizes(), ")");
          continue;
        }
        const bool plain = spec.scales[d] == 1 && spec.offsets[d] == 0;
        if (plain == derived) {
          continue;  // plain dimensions first: they give the symbols' values
        }
        const std::string form = plain ? std::string("s") + std::to_string(s)
                                       : std::to_string(spec.scales[d]) + "*s" + std::to_string(s) + " + " +
                std::to_string(spec.offsets[d]);
        if (values[s] == -1) {
          int64_t rest = 0;
          const bool overflow = __builtin_sub_overflow(size, spec.offsets[d], &rest);
          TORCH_CHECK_VALUE(
              !overflow && rest >= 0 && rest % spec.scales[d] == 0, "ValueError: ", prefix, name, " dimension ", d,
              " has size ", size, ", which is not of the form ", form, " the export gives it");
          values[s] = rest / spec.scales[d];
          setBy[s] = name + " dimension " + std::to_string(d);
          const auto [min, max] = symbolRanges_[s];
          TORCH_CHECK_VALUE(
              values[s] >= min && (max == -1 || values[s] <= max), "ValueError: ", prefix, name, " dimension ", d,
              " has size ", size, ", outside the range torch.export allows for it (s", s, " in [", min, ", ",
              max == -1 ? std::string("inf") : std::to_string(max), "], size ", form, ")");
          continue;
        }
        int64_t expected = 0;
        const bool overflow = __builtin_mul_overflow(spec.scales[d], values[s], &expected) ||
            __builtin_add_overflow(expected, spec.offsets[d], &expected);
        TORCH_CHECK_VALUE(
            !overflow && size == expected, "ValueError: ", prefix, name, " dimension ", d,
            " has size ", size, ", but ", setBy[s], " gives s", s, " = ", values[s], " and the export ties them (",
            name, " dimension ", d, " is ", form, ")");
      }
    }
  }
}

std::vector<at::Tensor> ForwardProgram::run(
    const std::string& prefix,
    const std::vector<at::Tensor>& params,
    std::vector<at::Tensor> inputs,
    std::mutex& buffersMu) const {
  checkBuilt();
  std::vector<c10::IValue> frame(bound_);
  for (const auto& [slot, index] : parameters_) {
    TORCH_CHECK(
        index < static_cast<int64_t>(params.size()), prefix, "the program reads parameter ", index, " of ",
        params.size());
    frame[slot] = params[index];
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    at::Tensor& t = inputs[i];
    frame[inputSlots_[i]] = t.device() == device_ ? std::move(t) : t.to(device_);
  }
  torch::jit::Stack stack;
  for (const Instruction& inst : instructions_) {
    try {
      switch (inst.kind) {
        case Instruction::kOp: {
          stack.clear();
          for (const Arg& arg : inst.args) {
            stack.push_back(materialize(arg, frame));
          }
          std::optional<at::AutoGradMode> gradOff;
          if (inst.gradOff) {
            gradOff.emplace(false);
          }
          std::unique_lock<std::mutex> buffers(buffersMu, std::defer_lock);
          if (inst.holdsBuffers) {
            buffers.lock();
          }
          inst.op->callBoxed(stack);
          break;
        }
        case Instruction::kListItem: {
          const auto list = frame[inst.args[0].slot].toTensorList();
          const int64_t n = static_cast<int64_t>(list.size());
          const int64_t index = inst.code < 0 ? inst.code + n : inst.code;
          TORCH_CHECK_INDEX(index >= 0 && index < n, "list index ", inst.code, " out of range for a list of ", n);
          stack.clear();
          stack.emplace_back(list.get(index));
          break;
        }
        case Instruction::kIntOp: {
          const int64_t a = intValue(inst.args[0], frame);
          const int64_t b = inst.args.size() > 1 ? intValue(inst.args[1], frame) : 0;
          int64_t r = 0;
          bool overflow = false;
          switch (inst.code) {
            case kAdd: overflow = __builtin_add_overflow(a, b, &r); break;
            case kSub: overflow = __builtin_sub_overflow(a, b, &r); break;
            case kMul: overflow = __builtin_mul_overflow(a, b, &r); break;
            case kFloorDiv:
              TORCH_CHECK(b != 0, "integer division or modulo by zero");
              overflow = a == std::numeric_limits<int64_t>::min() && b == -1;
              r = overflow ? 0 : floorDiv(a, b);
              break;
            case kMod:
              TORCH_CHECK(b != 0, "integer division or modulo by zero");
              r = (a == std::numeric_limits<int64_t>::min() && b == -1) ? 0 : pythonMod(a, b);
              break;
            case kNeg: overflow = __builtin_sub_overflow(int64_t{0}, a, &r); break;
          }
          TORCH_CHECK(!overflow, "integer overflow of ", inst.what, "(", a, ", ", b, ")");
          stack.clear();
          stack.emplace_back(r);
          break;
        }
      }
    } catch (const std::exception& e) {
      raiseFrom(e, inst, prefix);
    }
    TORCH_INTERNAL_ASSERT(stack.size() == inst.outputs.size(), "node ", inst.node, " gave ", stack.size(), " results");
    for (size_t j = 0; j < inst.outputs.size(); ++j) {
      frame[inst.outputs[j]] = std::move(stack[j]);
    }
  }
  std::vector<at::Tensor> outputs;
  outputs.reserve(outputs_.size());
  for (const int64_t slot : outputs_) {
    outputs.push_back(frame[slot].toTensor());
  }
  return outputs;
}

}  // namespace gilfree_rpc::nn
