"""A two-worker job started with plugin.rpc.init_rpc, by torchrun or by the test itself.

    torchrun --nproc-per-node=2 tests/support/rpc_init_job.py
    python tests/support/rpc_init_job.py --rank R --world-size 2 --port P   (explicit arguments)

Rank 0 runs one distributed backward pass through worker1 and prints the result; every rank
prints its agent's default RPC timeout.
"""
import argparse
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

warnings.filterwarnings("ignore", category=DeprecationWarning)

import plugin  # noqa: E402
import plugin.rpc  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int)
    parser.add_argument("--world-size", type=int)
    parser.add_argument("--port", type=int)
    parser.add_argument("--transports", default=None, help="comma-separated TensorPipe transports")
    parser.add_argument("--rpc-timeout", type=float, default=30.0)
    args = parser.parse_args()
    info = plugin.rpc.init_rpc(
        rank=args.rank, world_size=args.world_size, master_port=args.port, num_worker_threads=4, rpc_timeout=args.rpc_timeout,
        transports=args.transports.split(",") if args.transports else None,
    )
    if info.id == 0:
        x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
        with dist_autograd.context() as ctx:
            y = rpc.rpc_sync("worker1", torch.mul, args=(x, x))
            plugin.autograd.backward(ctx, [y.sum()])
            grad = plugin.autograd.get_gradients(ctx)[x]
        print(f"OK {info.name} {rpc.get_worker_info('worker1').name} {grad.tolist()}", flush=True)
    print(f"timeout {rpc.get_rpc_timeout()}", flush=True)
    plugin.rpc.shutdown()


if __name__ == "__main__":
    main()
