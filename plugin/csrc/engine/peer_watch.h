// Releasing what a failed worker left on this one.
//
// A worker that dies (its process killed, its machine gone) leaves behind, on every
// worker its RPCs reached, torch's distributed autograd contexts it created and the
// engine's state for them (stored gradients, passes it started); nobody would ever
// release them. A watch thread notices such a death and releases them.
//
// Detection: while torch holds any distributed autograd context here, the thread
// pings every other worker every half RPC timeout (an RPC answered natively,
// without the GIL; at most one in flight per worker). A worker is failed when the
// agent reports that it could not reach it at all (a transport error: connection
// refused or closed). A ping that times out says nothing: a busy or stopped worker
// keeps its contexts, so a healthy but slow worker is never released early.
//
// Release: the worker's running passes here are aborted; the engine's entries of its
// contexts are dropped; torch's contexts of it are released
// (DistAutogradContainer::releaseContextIfPresent, which also tells the other
// workers of each context to release theirs). A failed worker stays failed for the
// life of this process (an RPC group does not take a worker back).
#pragma once

#include <cstdint>

namespace gilfree_rpc {

// Starts the watch thread, once per process; cheap after the first call. The thread
// waits for an RPC agent (defineRpcFunctions starts it when the library loads).
void startPeerWatch();

// Number of workers this worker has found failed.
int64_t numFailedPeers();

}  // namespace gilfree_rpc
