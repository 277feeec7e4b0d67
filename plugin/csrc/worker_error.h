// Error messages that name the worker they come from.
//
// Every error the engine raises starts with torch's "Error on Node <n>: " (n: the
// worker id, as torch's distributed engine writes it), then "worker '<name>' (id <n>)".
// When a peer's error travels back over RPC, torch wraps it in interpreter
// tracebacks; `extractWorkerError` digs the innermost engine message out again so
// the caller sees where the failure happened, not every hop it passed through.
#pragma once

#include <string>

namespace dist_engine {

// "worker '<name>' (id <n>)" for this process, or "worker <id>" before RPC starts.
std::string thisWorkerLabel();
// The same label for a peer, looked up through the current RPC agent.
std::string workerLabel(int64_t workerId);

// "Error on Node <n>: worker '<name>' (id <n>) <where>: <what>" (n is -1 before RPC starts).
std::string workerError(const std::string& where, const std::string& what);

// The innermost "Error on Node <n>: worker ..." message inside `text` (up to the end of
// that message), or `text` itself with `fallbackPrefix` prepended when none is found.
std::string extractWorkerError(const std::string& text, const std::string& fallbackPrefix);

}  // namespace dist_engine
