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

// Each code by the name Python reads it under.
inline constexpr std::array<std::pair<const char*, Code>, 12> kCodes{{
    {"none", kNone},
    {"int", kInt},
    {"float", kFloat},
    {"bool", kBool},
    {"str", kStr},
    {"slot", kSlotRef},
    {"list", kListOf},
    {"dtype", kDtype},
    {"device", kDevice},
    {"layout", kLayout},
    {"memory_format", kMemoryFormat},
    {"default", kDefault},
}};

// The integer arithmetic on sizes that a program runs (ForwardProgram::addIntOp): Python's
// operator.<name>, on int64 (floor division and modulo as Python's).
enum IntOp : int64_t { kAdd, kSub, kMul, kFloorDiv, kMod, kNeg };

// Each operation by its name in Python's operator module.
inline constexpr std::array<std::pair<const char*, IntOp>, 6> kIntOps{{
    {"add", kAdd},
    {"sub", kSub},
    {"mul", kMul},
    {"floordiv", kFloorDiv},
    {"mod", kMod},
    {"neg", kNeg},
}};

// The op _nn_program_tables: {"codes": kCodes, "int_ops": kIntOps, "dtypes", "layouts",
// "memory_formats": python_names.h's}, each {name: value} (a dtype's, layout's, memory format's
// value is c10's enum value; a dtype is there under each of its names).
c10::Dict<std::string, c10::Dict<std::string, int64_t>> programTables();

}  // namespace gilfree_rpc::nn
