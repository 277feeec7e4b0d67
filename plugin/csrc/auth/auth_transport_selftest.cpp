#include "auth/auth_transport_selftest.h"

#include "auth/auth_transport.h"
#include "auth/message_auth.h"

#include <tensorpipe/channel/basic/factory.h>
#include <tensorpipe/common/cpu_buffer.h>
#include <tensorpipe/core/context.h>
#include <tensorpipe/core/listener.h>
#include <tensorpipe/core/message.h>
#include <tensorpipe/core/pipe.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <vector>

namespace gilfree_rpc {

namespace {

using Clock = std::chrono::steady_clock;

// The child's whole run, after which it is killed. A pass takes well under a second; the
// bound is for a machine under heavy load.
constexpr int kSelfTestSeconds = 60;

// One callback's outcome, waited for until a deadline.
template <typename T>
class Pending {
 public:
  void set(T value) {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      if (value_) {
        return;
      }
      value_ = std::move(value);
    }
    cv_.notify_all();
  }

  std::optional<T> wait(Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait_until(lock, deadline, [&] { return value_.has_value(); });
    return std::move(value_);
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::optional<T> value_;
};

std::vector<uint8_t> bytesNumbered(size_t length, uint8_t seed) {
  std::vector<uint8_t> bytes(length);
  for (size_t i = 0; i < length; ++i) {
    bytes[i] = static_cast<uint8_t>(i * 131 + seed);
  }
  return bytes;
}

// Sends `metadata` with `payload` (and `tensor`, when not empty) on `from`, and reads it on
// `to`, comparing what arrives with what was sent: "" when all of it came, else what differed.
std::string exchange(
    tensorpipe::Pipe& from,
    tensorpipe::Pipe& to,
    const std::string& metadata,
    std::vector<uint8_t>& payload,
    std::vector<uint8_t>& tensor,
    Clock::time_point deadline,
    const std::function<void(const std::string&)>& stage) {
  tensorpipe::Message message;
  message.metadata = metadata;
  tensorpipe::Message::Payload sentPayload;
  sentPayload.data = payload.data();
  sentPayload.length = payload.size();
  sentPayload.metadata = metadata + " payload";
  message.payloads.push_back(std::move(sentPayload));
  if (!tensor.empty()) {
    tensorpipe::Message::Tensor sentTensor;
    sentTensor.buffer = tensorpipe::CpuBuffer{tensor.data()};
    sentTensor.length = tensor.size();
    sentTensor.metadata = metadata + " tensor";
    message.tensors.push_back(std::move(sentTensor));
  }
  auto written = std::make_shared<Pending<tensorpipe::Error>>();
  from.write(std::move(message), [written](const tensorpipe::Error& error) { written->set(error); });

  stage("reading the descriptor of the " + metadata);
  auto described = std::make_shared<Pending<std::pair<tensorpipe::Error, tensorpipe::Descriptor>>>();
  to.readDescriptor([described](const tensorpipe::Error& error, tensorpipe::Descriptor descriptor) {
    described->set({error, std::move(descriptor)});
  });
  auto descriptor = described->wait(deadline);
  if (!descriptor) {
    return "no descriptor of the " + metadata + " within the time";
  }
  if (descriptor->first) {
    return "reading the descriptor of the " + metadata + " failed: " + descriptor->first.what();
  }
  const tensorpipe::Descriptor& got = descriptor->second;
  if (got.metadata != metadata) {
    return "the " + metadata + "'s metadata arrived as '" + got.metadata + "'";
  }
  if (got.payloads.size() != 1 || got.tensors.size() != (tensor.empty() ? 0 : 1)) {
    return "the descriptor of the " + metadata + " lists " + std::to_string(got.payloads.size()) + " payloads and " +
        std::to_string(got.tensors.size()) + " tensors, where 1 and " + (tensor.empty() ? "0" : "1") + " were sent";
  }
  if (got.payloads[0].length != payload.size() || got.payloads[0].metadata != metadata + " payload") {
    return "the " + metadata + "'s payload is described as " + std::to_string(got.payloads[0].length) +
        " bytes ('" + got.payloads[0].metadata + "'), where " + std::to_string(payload.size()) + " were sent";
  }
  if (!tensor.empty() &&
      (got.tensors[0].length != tensor.size() || got.tensors[0].metadata != metadata + " tensor" ||
       got.tensors[0].sourceDevice.type != tensorpipe::kCpuDeviceType)) {
    return "the " + metadata + "'s tensor is described as " + std::to_string(got.tensors[0].length) +
        " bytes on '" + got.tensors[0].sourceDevice.type + "' ('" + got.tensors[0].metadata + "'), where " +
        std::to_string(tensor.size()) + " bytes on the CPU were sent";
  }

  stage("reading the payload and tensor of the " + metadata);
  // Kept by the callback: TensorPipe may write into them after a time-out here.
  auto payloadIn = std::make_shared<std::vector<uint8_t>>(payload.size());
  auto tensorIn = std::make_shared<std::vector<uint8_t>>(tensor.size());
  tensorpipe::Allocation allocation;
  allocation.payloads.push_back(tensorpipe::Allocation::Payload{payloadIn->data()});
  if (!tensor.empty()) {
    tensorpipe::Allocation::Tensor tensorAllocation;
    tensorAllocation.buffer = tensorpipe::CpuBuffer{tensorIn->data()};
    allocation.tensors.push_back(std::move(tensorAllocation));
  }
  auto read = std::make_shared<Pending<tensorpipe::Error>>();
  to.read(std::move(allocation), [read, payloadIn, tensorIn](const tensorpipe::Error& error) { read->set(error); });
  auto readError = read->wait(deadline);
  if (!readError) {
    return "the " + metadata + "'s payload and tensor did not arrive within the time";
  }
  if (*readError) {
    return "reading the " + metadata + "'s payload and tensor failed: " + readError->what();
  }
  auto writeError = written->wait(deadline);
  if (!writeError) {
    return "writing the " + metadata + " did not end within the time";
  }
  if (*writeError) {
    return "writing the " + metadata + " failed: " + writeError->what();
  }
  if (*payloadIn != payload) {
    return "the " + metadata + "'s payload arrived altered";
  }
  if (*tensorIn != tensor) {
    return "the " + metadata + "'s tensor arrived altered";
  }
  return "";
}

// What the self-test makes, never freed: the child ends (_exit) once it has its verdict, and
// closing a context whose transport misbehaved could hang or crash before the verdict is out;
// TensorPipe may still read the buffers after a time-out.
struct Kept {
  std::shared_ptr<tensorpipe::Context> context;
  std::shared_ptr<tensorpipe::Listener> listener;
  std::shared_ptr<tensorpipe::Pipe> client;
  std::shared_ptr<tensorpipe::Pipe> server;
  std::vector<uint8_t> payload = bytesNumbered(1000, 1);
  std::vector<uint8_t> tensor = bytesNumbered(70000, 2);
  std::vector<uint8_t> replyPayload = bytesNumbered(300, 3);
  std::vector<uint8_t> noTensor;
};

// The self-test proper, in the child: "" when it passed, else what differed. `stage` records
// how far it got.
std::string runSelfTest(const std::string& host, AbiFault fault, const std::function<void(const std::string&)>& stage) {
  const auto deadline = Clock::now() + std::chrono::seconds(kSelfTestSeconds - 5);
  auto* kept = new Kept;
  std::string key(32, '\0');
  randomBytes(reinterpret_cast<uint8_t*>(key.data()), key.size());

  stage("making a TensorPipe context with gilfree_auth and the basic channel");
  kept->context = std::make_shared<tensorpipe::Context>(tensorpipe::ContextOptions().name("gilfree_auth self-test"));
  kept->context->registerTransport(0, kAuthTransportName, makeAuthContext(key, fault));
  kept->context->registerChannel(0, "basic", tensorpipe::channel::basic::create());
  const std::string address = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  kept->listener = kept->context->listen({std::string(kAuthTransportName) + "://" + address});
  auto accepted = std::make_shared<Pending<std::pair<tensorpipe::Error, std::shared_ptr<tensorpipe::Pipe>>>>();
  kept->listener->accept([accepted](const tensorpipe::Error& error, std::shared_ptr<tensorpipe::Pipe> pipe) {
    accepted->set({error, std::move(pipe)});
  });

  stage("connecting a pipe (TensorPipe's hello and brochure, written and read through the mirror)");
  kept->client = kept->context->connect(kept->listener->url(kAuthTransportName));
  auto serverPipe = accepted->wait(deadline);
  if (!serverPipe) {
    return "TensorPipe's listener accepted no pipe within the time";
  }
  if (serverPipe->first) {
    return "TensorPipe's listener failed: " + std::string(serverPipe->first.what());
  }
  kept->server = serverPipe->second;

  std::string failed = exchange(*kept->client, *kept->server, "message", kept->payload, kept->tensor, deadline, stage);
  if (!failed.empty()) {
    return failed;
  }
  failed = exchange(*kept->server, *kept->client, "reply", kept->replyPayload, kept->noTensor, deadline, stage);
  if (!failed.empty()) {
    return failed;
  }
  stage("closing the pipes and the context");
  kept->client->close();
  kept->server->close();
  kept->listener->close();
  kept->context->close();
  kept->context->join();
  return "";
}

void writeLine(int fd, std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  text += '\n';
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

std::string selfTestTensorPipeAbi(const std::string& host, const std::string& faultName) {
  const AbiFault fault = abiFaultNamed(faultName);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    return std::string("the self-test could not start (pipe: ") + std::strerror(errno) + ")";
  }
  const pid_t pid = ::fork();
  if (pid < 0) {
    int error = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return std::string("the self-test could not start (fork: ") + std::strerror(error) + ")";
  }
  if (pid == 0) {
    // The child: this thread alone; no Python (it is not this thread's to use here), no
    // exit handlers (_exit). A crash here is the verdict, not a Python fault to report: the
    // signals a broken mirror raises get their default action back (Python's faulthandler,
    // which pytest enables, would print a traceback of the worker's threads).
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) {
      ::signal(sig, SIG_DFL);
    }
    // What the child's transport and TensorPipe would log (the faults' refusals, say) is not
    // the worker's: the verdict says what matters.
    const int devNull = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (devNull >= 0) {
      ::dup2(devNull, STDOUT_FILENO);
      ::dup2(devNull, STDERR_FILENO);
      ::close(devNull);
    }
    ::close(fds[0]);
    std::string failed;
    try {
      failed = runSelfTest(host, fault, [&](const std::string& stage) { writeLine(fds[1], "STAGE " + stage); });
    } catch (const std::exception& e) {
      failed = std::string("an exception: ") + e.what();
    }
    writeLine(fds[1], failed.empty() ? "OK" : "FAIL " + failed);
    ::_exit(failed.empty() ? 0 : 1);
  }
  ::close(fds[1]);
  // The parent: reads the child's lines until it closes its end, within the time.
  std::string report;
  bool timedOut = false;
  const auto deadline = Clock::now() + std::chrono::seconds(kSelfTestSeconds);
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timedOut = true;
      break;
    }
    pollfd pfd{fds[0], POLLIN, 0};
    int ready = ::poll(&pfd, 1, static_cast<int>(left));
    if (ready < 0 && errno == EINTR) {
      continue;
    }
    if (ready < 0) {
      break;
    }
    if (ready == 0) {
      continue;  // the deadline is checked above
    }
    char buffer[4096];
    ssize_t n = ::read(fds[0], buffer, sizeof(buffer));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      break;  // the child ended (or closed its end)
    }
    report.append(buffer, static_cast<size_t>(n));
  }
  ::close(fds[0]);
  if (timedOut) {
    ::kill(pid, SIGKILL);
  }
  int status = 0;
  pid_t waited;
  do {
    waited = ::waitpid(pid, &status, 0);
  } while (waited < 0 && errno == EINTR);

  std::string stage = "before it began";
  std::string result;
  size_t begin = 0;
  while (begin < report.size()) {
    size_t end = report.find('\n', begin);
    if (end == std::string::npos) {
      end = report.size();
    }
    const std::string line = report.substr(begin, end - begin);
    if (line.rfind("STAGE ", 0) == 0) {
      stage = line.substr(6);
    } else if (line == "OK" || line.rfind("FAIL ", 0) == 0) {
      result = line;
    }
    begin = end + 1;
  }
  if (result == "OK") {
    return "";  // by the child's word (its status is unknown where SIGCHLD is ignored)
  }
  if (!result.empty()) {
    return result.substr(5) + " (at: " + stage + ")";
  }
  if (timedOut) {
    return "the self-test did not finish within " + std::to_string(kSelfTestSeconds) + " s (it was at: " + stage + ")";
  }
  if (waited == pid && WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "the self-test process died of signal " + std::to_string(sig) + " (" + ::strsignal(sig) +
        ") while " + stage;
  }
  if (waited == pid && WIFEXITED(status)) {
    return "the self-test process exited with status " + std::to_string(WEXITSTATUS(status)) + " while " + stage;
  }
  return "the self-test process ended without a verdict while " + stage;
}

}  // namespace gilfree_rpc
