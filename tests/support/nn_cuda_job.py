"""A remote module on a GPU (run by tests/rpc/test_cuda.py on a GPU machine).

Two workers on one machine; the module (tests.support.nn_modules.MLP) lives on worker1's cuda:0.
Rank 0 runs its forward and the plugin's backward pass twice: with CPU inputs and no device map
(the owner moves the inputs to its GPU and answers on the CPU, as torch's RemoteModule does),
and, in a second group with a device map, with CUDA inputs (the outputs come back on cuda:0).
Each time it compares with the same module run eagerly on the CPU and prints one JSON line.
"""
import argparse
import json
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc

warnings.filterwarnings("ignore", category=DeprecationWarning)

import plugin  # noqa: E402
import plugin.autograd  # noqa: E402
import plugin.rpc  # noqa: E402
from plugin.nn import RemoteModule  # noqa: E402
from tests.support import nn_modules as mods  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--device-map", action="store_true")
    parser.add_argument("--lazy", action="store_true", help="no example inputs: exported at a first batch of 1")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    table = {"worker0": {"worker1": {"cuda:0": "cuda:0"}}} if args.device_map else None
    plugin.rpc.init_rpc(rank=args.rank, world_size=2, master_port=args.port, device_maps=table, rpc_timeout=60)
    if args.rank == 0:
        if args.lazy:
            remote = RemoteModule("worker1/cuda:0", mods.MLP)
            first = torch.randn(1, 6)
            remote(first.cuda() if args.device_map else first)
        else:
            remote = RemoteModule("worker1/cuda:0", mods.MLP, example_inputs=(torch.randn(3, 6),))
        twin = mods.MLP()
        twin.load_state_dict({k: v.cpu() for k, v in rpc.rpc_sync("worker1", mods.state, args=(remote.module_rref,)).items()})
        x = torch.randn(4, 6)
        sent = (x.cuda() if args.device_map else x).requires_grad_()
        with dist_autograd.context() as ctx:
            out = remote(sent)
            plugin.autograd.backward(ctx, [out.sum()])
            input_grad = plugin.autograd.get_gradients(ctx)[sent]
            grads = rpc.rpc_sync("worker1", mods.parameter_gradients, args=(remote.module_rref, ctx, "plugin"))
        y = x.clone().requires_grad_()
        want = twin(y)
        want.sum().backward()
        print(json.dumps({
            "out_device": str(out.device), "grad_device": str(input_grad.device),
            "param_grad_devices": sorted({str(g.device) for g in grads}),
            "out_close": torch.allclose(out.cpu(), want, atol=1e-5, rtol=1e-5),
            "input_grad_close": torch.allclose(input_grad.cpu(), y.grad, atol=1e-5, rtol=1e-5),
            "param_grads_close": all(torch.allclose(g.cpu(), p.grad, atol=1e-5, rtol=1e-5)
                                     for g, p in zip(grads, twin.parameters())),
        }), flush=True)
    plugin.rpc.shutdown()


if __name__ == "__main__":
    main()
