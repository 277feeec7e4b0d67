"""CUDA gradients across workers under a device map (run by test_cuda.py on a GPU machine).

Two workers on one machine; worker0's cuda:0 maps to worker1's last CUDA device. Rank 0
sends CUDA tensors to worker1, runs backward with torch's engine and with ours (both
modes) and prints one JSON line with what it checked.
"""
import argparse
import json
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

warnings.filterwarnings("ignore", category=DeprecationWarning)

import plugin  # noqa: E402
import plugin.rpc  # noqa: E402

_REMOTE = {}


def remote_scale(x):
    """Multiplies by a CUDA leaf that lives on worker1."""
    w = _REMOTE.setdefault("w", torch.full_like(x, 3.0).requires_grad_())
    return x * w


def remote_grad_device(ctx, engine):
    grads = dist_autograd.get_gradients(ctx) if engine == "torch" else plugin.autograd.get_gradients(ctx)
    g = grads[_REMOTE["w"]]
    return str(g.device), g.sum().item()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    last = torch.cuda.device_count() - 1
    table = {"worker0": {"worker1": {"cuda:0": f"cuda:{last}"}}}  # the way back is inferred
    plugin.rpc.init_rpc(rank=args.rank, world_size=2, master_port=args.port, device_maps=table, rpc_timeout=60)
    if args.rank == 0:
        report = {}
        for engine in ("torch", "fast", "smart"):
            x = torch.arange(1.0, 5.0, device="cuda:0").requires_grad_()
            with dist_autograd.context() as ctx:
                y = rpc.rpc_sync("worker1", remote_scale, args=(x,))
                root = (y * y).sum()
                if engine == "torch":
                    dist_autograd.backward(ctx, [root])
                    gx = dist_autograd.get_gradients(ctx)[x]
                else:
                    plugin.autograd.backward(ctx, [root], mode=engine)
                    gx = plugin.autograd.get_gradients(ctx)[x]
                w_device, w_sum = rpc.rpc_sync("worker1", remote_grad_device, args=(ctx, "torch" if engine == "torch" else "plugin"))
            report[engine] = {
                "y_device": str(y.device),
                "x_grad_device": str(gx.device),
                "x_grad": gx.tolist(),
                "w_grad_device": w_device,
                "w_grad_sum": w_sum,
            }
        print(json.dumps(report), flush=True)
    rpc.shutdown()


if __name__ == "__main__":
    main()
