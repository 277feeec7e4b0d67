// The remote modules' alias policy: what an instruction of a ForwardProgram (program.h) may do
// with the module's buffers and parameters and the caller's inputs, decided when the
// instruction is added (the decoder, program_decoder.cpp, asks here for each argument and result).
//
// Every slot carries marks (ForwardProgram::Mark): it holds a buffer, a parameter or an input,
// or a view or an in-place result of one; the operators' alias annotations carry the marks from
// the arguments to the results that alias them. An instruction that takes a buffer (or a view of
// one) runs holding the module's buffers' mutex (the interpreter, interpreter.cpp), so that the
// in-place updates of concurrent forwards (BatchNorm's running statistics) do not race; one
// that writes a parameter or an input in place, directly or through a view, is refused.
#include "nn/program.h"

#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace gilfree_rpc::nn {

void ForwardProgram::admitArgument(
    Instruction& inst,
    const c10::Argument& argument,
    uint8_t marks,
    const std::string& where) const {
  inst.holdsBuffers |= (marks & kBuffer) != 0;
  const auto* alias = argument.alias_info();
  TORCH_CHECK(
      alias == nullptr || !alias->isWrite() || (marks & (kParameter | kInput)) == 0, where, ": writes ",
      (marks & kParameter) ? "a parameter" : "an input", " (argument ", argument.name(),
      ", or a view of it) in place");
}

void ForwardProgram::markResult(
    const c10::FunctionSchema& schema,
    size_t result,
    const std::vector<uint8_t>& argMarks,
    int64_t slot) {
  // A result that aliases an argument (a view, an in-place op's result) carries its marks.
  const auto* returned = schema.returns()[result].alias_info();
  if (returned == nullptr) {
    return;
  }
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const auto* taken = schema.arguments()[i].alias_info();
    if (taken == nullptr) {
      continue;
    }
    for (const auto& set : returned->beforeSets()) {
      if (taken->beforeSets().count(set) != 0) {
        marks_[slot] |= argMarks[i];
      }
    }
  }
}

}  // namespace gilfree_rpc::nn
