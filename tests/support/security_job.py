"""A two-worker training job for the security tests, started with plugin.rpc.init_rpc.

    python tests/support/security_job.py --rank R --port P --out DIR [--steps N] [--pause S]
        [--master-addr A] [--marker HEX [--rounds K] [--torch-rpc]]

The authentication key comes from the environment (GILFREE_RPC_AUTH_KEY or
GILFREE_RPC_AUTH_KEY_FILE), as a torchrun job would pass it. worker1 owns a parameter;
worker0 trains it (forward by RPC, plugin.autograd.backward, DistributedOptimizer/SGD) for
N steps on a fixed-seed data set, pausing S seconds between steps, and writes
DIR/ready.<rank> once RPC runs and DIR/final.pt (the parameter) at the end. The rendezvous
store is at A (default 127.0.0.1; ::1 for IPv6), port P.

With --marker, worker0 instead waits for the file DIR/go (at most 60 s), then sends
worker1 a tensor of 64 KiB that repeats the marker's bytes, K times (default 8), by
rpc_sync of torch.add(tensor, 0) (worker1 sends it back), checks each answer and prints
"SENT K". --torch-rpc starts torch's own RPC instead of the plugin's, with TensorPipe's uv
transport and basic channel only (the tensors' bytes through the TCP connections, as with
a key) and no key.

With --sizes N,N,..., worker0 instead sends worker1 tensors of random bytes of these sizes
(in bytes), each by rpc_sync of torch.add(tensor, 0), checks that each answer equals what it
sent, and prints "SIZES OK".
"""
import argparse
import os
import time
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

warnings.filterwarnings("ignore", category=DeprecationWarning)

import plugin  # noqa: E402
import plugin.optim  # noqa: E402
import plugin.rpc  # noqa: E402


def make_parameter():
    torch.manual_seed(0)
    return torch.randn(8, 4, requires_grad=True)


def apply(weight_rref, x):
    return x @ weight_rref.local_value()


def send_marker(marker, rounds, out):
    go = os.path.join(out, "go")
    deadline = time.monotonic() + 60
    while not os.path.exists(go) and time.monotonic() < deadline:
        time.sleep(0.05)
    tensor = torch.frombuffer(bytearray(marker * ((64 << 10) // len(marker))), dtype=torch.uint8)
    for _ in range(rounds):
        answer = rpc.rpc_sync("worker1", torch.add, args=(tensor, 0))
        assert torch.equal(answer, tensor)
    print(f"SENT {rounds}", flush=True)


def send_sizes(sizes):
    generator = torch.Generator().manual_seed(0)
    for size in sizes:
        tensor = torch.randint(0, 256, (size,), dtype=torch.uint8, generator=generator)
        answer = rpc.rpc_sync("worker1", torch.add, args=(tensor, 0))
        assert torch.equal(answer, tensor), f"{size} bytes came back altered"
    print("SIZES OK", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--pause", type=float, default=0.0)
    parser.add_argument("--init-timeout", type=float, default=60.0)
    parser.add_argument("--master-addr", default="127.0.0.1")
    parser.add_argument("--marker", default=None)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--torch-rpc", action="store_true")
    parser.add_argument("--sizes", default=None)
    args = parser.parse_args()
    if args.torch_rpc:
        options = rpc.TensorPipeRpcBackendOptions(
            num_worker_threads=4, rpc_timeout=30, init_method=f"tcp://{args.master_addr}:{args.port}",
            _transports=["uv"], _channels=["basic"],
        )
        rpc.init_rpc(f"worker{args.rank}", rank=args.rank, world_size=2, rpc_backend_options=options)
    else:
        plugin.rpc.init_rpc(
            rank=args.rank, world_size=2, master_addr=args.master_addr, master_port=args.port, num_worker_threads=4,
            rpc_timeout=30, init_timeout=args.init_timeout,
        )
    with open(os.path.join(args.out, f"ready.{args.rank}"), "w") as f:
        f.write(str(os.getpid()))
    if args.marker is not None or args.sizes is not None:
        if args.rank == 0 and args.marker is not None:
            send_marker(bytes.fromhex(args.marker), args.rounds, args.out)
        elif args.rank == 0:
            send_sizes([int(n) for n in args.sizes.split(",")])
        rpc.shutdown() if args.torch_rpc else plugin.rpc.shutdown()
        return
    if args.rank == 0:
        weight = rpc.remote("worker1", make_parameter)
        optimizer = plugin.optim.DistributedOptimizer(torch.optim.SGD, [weight], lr=0.05)
        generator = torch.Generator().manual_seed(1)
        data = torch.randn(64, 8, generator=generator)
        target = torch.randn(64, 4, generator=generator)
        for step in range(args.steps):
            batch = slice((step * 16) % 64, (step * 16) % 64 + 16)
            with dist_autograd.context() as context_id:
                out = rpc.rpc_sync("worker1", apply, args=(weight, data[batch]))
                loss = ((out - target[batch]) ** 2).mean()
                plugin.autograd.backward(context_id, [loss])
                optimizer.step(context_id)
            time.sleep(args.pause)
        final = weight.to_here()
        torch.save(final, os.path.join(args.out, "final.pt"))
        print(f"DONE steps={args.steps}", flush=True)
    plugin.rpc.shutdown()


if __name__ == "__main__":
    main()
