"""Stream ordering on a remote module's owner on a GPU (run by tests/nn/test_remote_module_streams.py).

One process, no RPC: a module with a BatchNorm (buffers updated in place in train mode) is
exported, lowered and registered as an owner does it (plugin.nn._lower, ops.new_native_module),
on cuda:0. Its forwards (``_remote_forward``, outside a context, outputs left on the GPU) and a step's
parameter writes (under the parameters' locks, as every optimizer step of the library holds them)
are issued on three different CUDA streams; each producer's stream is first held busy
(``torch.cuda._sleep``), so that a consumer on another stream that did not wait for it would read
memory not written yet: the snapshot forward 1 copies (read by forward 2, which reuses it), the
running statistics forward 1 updates (updated again by forward 2), the step's writes (read by the
snapshot of forward 3) and the snapshot's reads (overwritten by the step). The same sequence runs
eagerly on the CPU; one JSON line says what matched.
"""
import copy
import json
import warnings

import torch
import torch.nn as nn

warnings.filterwarnings("ignore", category=DeprecationWarning)

from plugin import ops  # noqa: E402
from plugin.nn import _lower  # noqa: E402

SPIN = 200_000_000  # GPU cycles a producer's stream is held busy before its work (~0.1 s)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(64, 256)
        self.bn = nn.BatchNorm1d(256)
        self.head = nn.Linear(256, 8)

    def forward(self, x):
        return self.head(torch.relu(self.bn(self.fc(x))))


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    device = torch.device("cuda:0")
    reference = Net()
    model = copy.deepcopy(reference).to(device)
    params = list(model.parameters())
    example = (torch.randn(16, 64, device=device),)
    ep = _lower.export(model, example, _lower.default_dynamic_shapes(example))
    program, _ = _lower.lower(ep, model, params, device, _lower.input_names(model, example))
    registration = ops.new_native_module("Net", params)
    program.install(registration.handle(), True)
    lock = ops.new_step_lock(params)
    torch.cuda.synchronize()

    streams = [torch.cuda.Stream() for _ in range(3)]
    xs = [torch.randn(512, 64) for _ in range(3)]

    def forward(stream, x, busy):
        with torch.cuda.stream(stream):
            x = x.to(device, non_blocking=False)
            if busy:
                torch.cuda._sleep(SPIN)
            outputs, _, _ = ops._remote_forward(registration.handle(), -1, -1, [x], [False], True)
        return outputs[0]

    def step(stream):
        with torch.cuda.stream(stream):
            torch.cuda._sleep(SPIN)
            with ops._holding(lock), torch.no_grad():
                for p in params:
                    p.mul_(0.5).add_(0.01)

    out1 = forward(streams[0], xs[0], busy=True)  # snapshot 1 and the first buffer update, late on stream 0
    out2 = forward(streams[1], xs[1], busy=False)  # reuses snapshot 1, updates the buffers: on stream 1
    step(streams[2])  # writes the parameters snapshot 1 copied, late on stream 2
    out3 = forward(streams[1], xs[2], busy=False)  # snapshot 2 reads the step's writes
    torch.cuda.synchronize()
    info = registration.info()

    want = []
    reference.train()
    with torch.no_grad():
        want.append(reference(xs[0]))
        want.append(reference(xs[1]))
        for p in reference.parameters():
            p.mul_(0.5).add_(0.01)
        want.append(reference(xs[2]))

    def close(a, b):
        return torch.allclose(a.cpu(), b, atol=1e-4, rtol=1e-4)

    print(json.dumps({
        "outputs_close": [close(o, w) for o, w in zip((out1, out2, out3), want)],
        "running_stats_close": close(model.bn.running_mean, reference.bn.running_mean)
        and close(model.bn.running_var, reference.bn.running_var),
        "params_close": all(close(p, q) for p, q in zip(params, reference.parameters())),
        "snapshots": info["snapshots"],
    }), flush=True)


if __name__ == "__main__":
    main()
