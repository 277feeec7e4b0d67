// The tables of the program encoding that plugin/nn/_lower.py writes and the decoder
// (program_decoder.cpp) reads: the argument codes and the integer operations, each defined here
// only. Python reads them by name, once, when plugin.nn._lower is imported (the op
// _nn_program_tables, with the dtype, layout and memory format names of python_names.h).
//
// An instruction's arguments come encoded as a stream of int64 codes, one value per argument
// of the operator's schema, in the schema's order:
//   none           None
//   int v          the int v
//   float k        the float floats[k]
//   bool b         the bool b (0 or 1)
//   str k          the string strings[k]
//   slot s         the value in slot s
//   list n ...     a list of the n values that follow
//   dtype k        the dtype named strings[k] ("torch.float32")
//   device k       the device strings[k] ("cpu", "cuda:0")
//   layout k       the layout named strings[k] ("torch.strided")
//   memory_format k  the memory format named strings[k] ("torch.channels_last")
//   default        the schema's default value of the argument
// Each value is converted to the type the schema gives the argument (its real type: SymInt,
// ScalarType, ...) when the instruction is added, and refused there if it does not fit.
#pragma once

#include <ATen/core/Dict.h>

#include <array>
#include <cstdint>
#include <string>
#include <utility>

namespace gilfree_rpc::nn {

// Each code once: its enumerator, its value and the name Python reads it under. The enum and
// the name table are both made from this list, so neither can have a code the other lacks.
#define GILFREE_NN_CODES(X)        \
  X(kNone, 0, "none")              \
  X(kInt, 1, "int")                \
  X(kFloat, 2, "float")            \
  X(kBool, 3, "bool")              \
  X(kStr, 4, "str")                \
  X(kSlotRef, 5, "slot")           \
  X(kListOf, 6, "list")            \
  X(kDtype, 7, "dtype")            \
  X(kDevice, 8, "device")          \
  X(kLayout, 9, "layout")          \
  X(kMemoryFormat, 10, "memory_format") \
  X(kDefault, 11, "default")

#define GILFREE_NN_ENUMERATOR(name, value, text) name = value,
#define GILFREE_NN_NAMED(name, value, text) {text, name},
#define GILFREE_NN_ONE(name, value, text) +1

enum Code : int64_t { GILFREE_NN_CODES(GILFREE_NN_ENUMERATOR) };

// Each code by the name Python reads it under.
inline constexpr std::array<std::pair<const char*, Code>, 0 GILFREE_NN_CODES(GILFREE_NN_ONE)> kCodes{{
    GILFREE_NN_CODES(GILFREE_NN_NAMED)
}};

// The integer arithmetic on sizes that a program runs (ForwardProgram::addIntOp): Python's
// operator.<name>, on int64 (floor division and modulo as Python's). Each once, as the codes.
#define GILFREE_NN_INT_OPS(X) \
  X(kAdd, 0, "add")           \
  X(kSub, 1, "sub")           \
  X(kMul, 2, "mul")           \
  X(kFloorDiv, 3, "floordiv") \
  X(kMod, 4, "mod")           \
  X(kNeg, 5, "neg")

enum IntOp : int64_t { GILFREE_NN_INT_OPS(GILFREE_NN_ENUMERATOR) };

// Each operation by its name in Python's operator module.
inline constexpr std::array<std::pair<const char*, IntOp>, 0 GILFREE_NN_INT_OPS(GILFREE_NN_ONE)> kIntOps{{
    GILFREE_NN_INT_OPS(GILFREE_NN_NAMED)
}};

#undef GILFREE_NN_ONE
#undef GILFREE_NN_NAMED
#undef GILFREE_NN_ENUMERATOR

// The op _nn_program_tables: {"codes": kCodes, "int_ops": kIntOps, "dtypes", "layouts",
// "memory_formats": python_names.h's}, each {name: value} (a dtype's, layout's, memory format's
// value is c10's enum value; a dtype is there under each of its names).
c10::Dict<std::string, c10::Dict<std::string, int64_t>> programTables();

}  // namespace gilfree_rpc::nn
