// The remote modules' interpreter: ForwardProgram::run (program.h) runs a built program's
// instructions in order on a frame of slots: each operator called boxed through the dispatcher
// (c10::OperatorHandle::callBoxed, as the JIT interpreter calls TorchScript's operators, so that
// autograd records what it records in eager mode), in its grad mode, holding the buffers' mutex
// where the alias policy (alias_policy.cpp) says so; list elements; integer arithmetic on sizes
// (program_encoding.h's operations, as Python computes them, overflow refused). An error is
// raised again with the node and the operator that raised it.
#include "nn/program.h"
#include "nn/program_encoding.h"

#include "compat.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <ATen/core/stack.h>
#include <c10/util/Exception.h>

#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gilfree_rpc::nn {
namespace {

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

// Raises the error `e` of an instruction again, of the same type (the contract of
// rpc/worker_error.h: the kernel's trailer names it to a caller over RPC), its text first, then
// where it happened.
[[noreturn]] void raiseFrom(const std::exception& e, const Instruction& inst, const std::string& prefix) {
  // Operators run here raise c10 errors (no Python runs on this path).
  const auto* error = dynamic_cast<const c10::Error*>(&e);
  const std::string type = error != nullptr ? pythonTypeOf(*error) : "RuntimeError";
  const std::string message = error != nullptr ? error->what_without_backtrace() : e.what();
  const std::string where = " [" + prefix + "node " + inst.node + ", " + inst.what + "]";
  if (type == "ValueError") {
    TORCH_CHECK_VALUE(false, message, where);
  } else if (type == "TypeError") {
    TORCH_CHECK_TYPE(false, message, where);
  } else if (type == "IndexError") {
    TORCH_CHECK_INDEX(false, message, where);
  } else if (type == "NotImplementedError") {
    TORCH_CHECK_NOT_IMPLEMENTED(false, message, where);
  }
  TORCH_CHECK(false, message, where);
}

}  // namespace

std::vector<at::Tensor> ForwardProgram::run(
    const std::string& prefix,
    const std::vector<at::Tensor>& params,
    std::vector<at::Tensor> inputs,
    std::mutex& buffersMu,
    StreamOrder& buffersOrder) const {
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
            buffersOrder.wait();  // the previous buffer update, maybe on another stream
          }
          inst.op->callBoxed(stack);
          if (inst.holdsBuffers) {
            buffersOrder.record(device_);
          }
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
