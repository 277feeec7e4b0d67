// The check of tensorpipe_abi.h's mirror before the gilfree_auth transport is used: a
// self-test over loopback, run once per process when the transport is first configured with
// a key (auth_transport.cpp, configureAuthTransport).
//
// The mirror was read off a disassembly of one torch's libtorch, so another torch whose
// TensorPipe or libnop differs would run undefined behaviour in every connection instead of
// failing. The self-test makes a TensorPipe context (TensorPipe's public API, shipped with
// torch: tensorpipe/tensorpipe.h) with this transport and the basic channel, listens, connects
// a pipe to itself and sends a message with a payload and a tensor one way and a payload back:
// TensorPipe's own code writes and reads every kind of object a pipe exchanges (hello,
// brochure and its answer, descriptors, descriptor reply) through the mirror, and the sizes,
// metadata and bytes that arrive are compared with those sent. It runs in a child process
// (fork): a mismatch that crashes or hangs there ends the child only, and the worker refuses
// to start the transport with an error that names the torch version and what differed.
// Nothing of the mirror runs in the worker before the self-test has passed.
#pragma once

#include <string>

namespace gilfree_rpc {

// Runs the self-test listening on `host` (a numeric IPv4 or IPv6 address the transport may
// listen on), in a child process, within a bounded time. "" when it passed; else what
// differed, or how the child ended (a signal, a time-out), and how far it had got.
// `fault` (tests only: "" in use) runs it with a broken mirror in the child, as
// auth_transport.cpp's abiFaultNamed reads it.
std::string selfTestTensorPipeAbi(const std::string& host, const std::string& fault);

}  // namespace gilfree_rpc
