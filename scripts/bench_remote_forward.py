"""A remote module's forward pass, three ways, with the owner idle and with a Python thread on
it holding its GIL.

One owner worker holds the model; T in {1, 2, 4} trainer processes call its forward at the same
time for a fixed time each. The three forwards, in one process group and in alternating rounds:

* ``native``: ``plugin.nn.RemoteModule`` (the module exported with torch.export on the owner and
  run there op by op in C++, without Python or the GIL);
* ``lazy``: the same, built as torch's RemoteModule is (no example inputs: exported at the first
  forward; that first call's latency and a re-export's, at the first call in eval mode, are
  reported in ms under ``exports``);
* ``mixed``: the same, lazily, the model called with non-tensor arguments (a float and a str,
  a dict with an int back: scripts/remote_forward_models.py's ``WithOptions``);
* ``python``: today's pickled Python RPC to the module (``rpc.rpc_sync(owner, fn, (module_rref,
  x))``, torch's parameter-server pattern), the module cloning its weights on every call as the
  digits workload's must (a backward pass after another trainer's step would otherwise fail
  autograd's in-place check);
* ``torch``: torch's ``torch.distributed.nn.RemoteModule`` with a TorchScript interface (its one
  GIL-free path: the module and the generated forward scripted), where torch still compiles
  TorchScript (skipped with --torchscript-removed); its module clones its weights on every call
  too (without, several trainers fail autograd's in-place check, as seen).

Busy: a thread on the owner holds its GIL nearly all the time (``ctypes.PyDLL(None).usleep`` in a
loop: a PyDLL call keeps the GIL; scripts/gil_threads.py's, as scripts/bench_gil.py's part 4).
Reported per model (an MLP and a small conv net, scripts/remote_forward_models.py), forward, T and owner state: forwards/s
(all trainers together, outside any autograd context) and each call's p50/p99 latency in ms.
Then the whole training iteration (forward in a distributed autograd context, backward, step
with Adam), iterations/s, idle and busy: ``native`` and ``python`` with the plugin's engine and
DistributedOptimizer, ``torch`` with torch's dist_autograd and DistributedOptimizer. Targets
(issue 43): a native forward with the owner's GIL held >= 0.9x its idle rate.

Each figure is the median of --repeats rounds (default 3); in a round every configuration runs
once, the forwards in turn. Writes JSON (default results/bench_remote_forward.json), which
docs/benchmarks.md quotes.

    python scripts/bench_remote_forward.py [--seconds S] [--trainers 1,2,4] [--repeats N]
                                           [--models mlp,conv] [--torchscript-removed] [--quick] [--out PATH]
"""
import argparse
import os
import statistics
import sys
import time
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from bench_results import run_meta, write_results
from gil_threads import start_gil_holder, stop_gil_thread

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

warnings.filterwarnings("ignore")

import remote_forward_models as models  # noqa: E402  (importable by every worker: scripts/ is on their path)

FORWARDS = ["native", "lazy", "mixed", "python", "torch"]
NATIVE_KINDS = ("native", "lazy", "mixed")
TRANSPORTS = ["uv"]  # as bench_gil: no shared-memory reactor busy-polling a core in every process
NO_TORCHSCRIPT_ENV = "GILFREE_TORCHSCRIPT_REMOVED"
NO_TORCHSCRIPT_SITE = os.path.join(REPO, "tests", "support", "no_torchscript")
MAX_TRAINERS = 4


# --- the owner ---------------------------------------------------------------------------------

def python_forward(module_rref, x):
    """The pickled Python forward (torch's parameter-server pattern)."""
    return module_rref.local_value()(x)


def parameter_rrefs(module_rref):
    """RRefs to the module's parameters. torch's scripted RemoteModule holds its module as a
    TorchScript object typed by its interface, which has no ``parameters()`` (torch's own
    ``remote_parameters`` fails on it): its module is wrapped first."""
    module = module_rref.local_value()
    if not isinstance(module, torch.nn.Module):
        module = torch.jit._recursive.wrap_cpp_module(module)
    return [rpc.RRef(p) for p in module.parameters()]


# --- the trainers ------------------------------------------------------------------------------

_HELD = {}


def keep(key, value):
    _HELD[key] = value


def _call(kind, module, x):
    if kind == "python":
        return rpc.rpc_sync(module.owner(), python_forward, args=(module, x))
    if kind == "mixed":
        return module(x, 0.5, word="logits")["logits"]
    return module(x) if kind in ("native", "lazy") else module.forward(x)


def run_forwards(key, kind, shape, seconds):
    """Forwards (outside any autograd context) for `seconds`: (count, latencies in ms)."""
    module = _HELD[key]
    x = torch.randn(*shape)
    for _ in range(3):
        _call(kind, module, x)
    latencies = []
    end = time.perf_counter() + seconds
    while True:
        start = time.perf_counter()
        if start >= end:
            break
        _call(kind, module, x)
        latencies.append((time.perf_counter() - start) * 1000)
    return latencies


def run_iterations(key, kind, shape, seconds):
    """Training iterations (forward in a context, backward, Adam step) for `seconds`: their count."""
    import plugin.autograd

    module, optimizer = _HELD[key], _HELD[key + ("optimizer",)]
    x = torch.randn(*shape)

    def iteration():
        with dist_autograd.context() as ctx:
            loss = _call(kind, module, x).pow(2).mean()
            if kind == "torch":
                dist_autograd.backward(ctx, [loss])
            else:
                plugin.autograd.backward(ctx, [loss])
            optimizer.step(ctx)

    iteration()
    count = 0
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        iteration()
        count += 1
    return count


def make_optimizer(key, kind, lr=1e-4):
    """The trainer's DistributedOptimizer (Adam) over the module's parameters: torch's for the
    torch forward, the plugin's otherwise."""
    module = _HELD[key]
    if kind in NATIVE_KINDS:
        params = module.remote_parameters()
    else:
        rref = module if kind == "python" else module.module_rref
        params = rpc.rpc_sync(rref.owner(), parameter_rrefs, args=(rref,))
    if kind == "torch":
        from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer

        _HELD[key + ("optimizer",)] = TorchDistributedOptimizer(torch.optim.Adam, params, lr=lr)
    else:
        from plugin.optim import DistributedOptimizer

        _HELD[key + ("optimizer",)] = DistributedOptimizer(torch.optim.Adam, params, lr=lr)


# --- the group -----------------------------------------------------------------------------------


def worker_names(n):
    return ["coordinator", "owner"] + [f"trainer{i}" for i in range(n)]


def init(rank, world, port):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    import plugin  # noqa: F401  (the native RPC functions)

    rpc.init_rpc(worker_names(world - 2)[rank], rank=rank, world_size=world,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=300,
                                                                    _transports=TRANSPORTS))


def serve(rank, world, port, torchscript):
    if torchscript:
        # torch's RemoteModule sends its scripted forward as a module generated from a template;
        # a receiver must have generated it too
        from torch.distributed.nn.jit import instantiator

        instantiator.instantiate_scriptable_remote_module_template(models.ForwardInterface, False)
    init(rank, world, port)
    rpc.shutdown()


def build(kind, model):
    """The coordinator builds one remote model of `kind` on the owner; returns it."""
    cls, shape = models.MODELS[model]
    if kind == "native":
        from plugin.nn import RemoteModule

        return RemoteModule("owner/cpu", cls, example_inputs=(torch.randn(*shape),))
    if kind in ("lazy", "mixed"):
        from plugin.nn import RemoteModule

        if kind == "lazy":
            return RemoteModule("owner/cpu", cls)
        return RemoteModule("owner/cpu", models.WithOptions, (model,))
    if kind == "python":
        return rpc.remote("owner", cls, args=(True,))
    # torch's RemoteModule with a TorchScript interface: its scripted path, whose argument the public
    # constructor no longer takes (torch's own tests use the base class's); an instance of the public
    # class, which torch's RPC pickler knows how to send to the trainers
    from torch.distributed.nn import RemoteModule as TorchRemoteModule
    from torch.distributed.nn.api.remote_module import _RemoteModule

    module = TorchRemoteModule.__new__(TorchRemoteModule)
    _RemoteModule.__init__(module, "owner/cpu", cls, args=(True,), _module_interface_cls=models.ForwardInterface)
    return module


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _ms(value):
    return "-" if value is None else f"{value:.2f} ms"


def coordinate(args, world, torchscript):
    trainers = [f"trainer{i}" for i in range(world - 2)]
    kinds = [k for k in FORWARDS if k != "torch" or torchscript]
    results = {"forward": [], "iteration": [], "exports": []}
    for model in args.models:
        shape = models.MODELS[model][1]
        for kind in kinds:
            module = build(kind, model)
            if kind in ("lazy", "mixed"):
                # the first forward exports (train mode); the first in eval mode exports again
                timed = {}
                for mode in ("first", "reexport"):
                    if mode == "reexport":
                        module.eval()
                    start = time.perf_counter()
                    _call(kind, module, torch.randn(*shape))
                    timed[mode] = (time.perf_counter() - start) * 1000
                module.train()
                results["exports"].append({"model": model, "forward": kind, "first_call_ms": timed["first"],
                                           "reexport_ms": timed["reexport"], "native": module.native})
                print(f"{model:5} export    {kind:6} first call {timed['first']:.1f} ms, re-export "
                      f"{timed['reexport']:.1f} ms, native {module.native}", flush=True)
            for t in trainers:
                rpc.rpc_sync(t, keep, args=((model, kind), module))
                rpc.rpc_sync(t, make_optimizer, args=((model, kind), kind))
        rows = {}
        for _ in range(args.repeats):
            for busy in (False, True):
                if busy:
                    rpc.rpc_sync("owner", start_gil_holder)
                for n in args.trainers:
                    for kind in kinds:
                        futs = [rpc.rpc_async(t, run_forwards, args=((model, kind), kind, shape, args.seconds))
                                for t in trainers[:n]]
                        latencies = [lat for f in futs for lat in f.wait()]
                        rate = len(latencies) / args.seconds
                        q = statistics.quantiles(latencies, n=100) if len(latencies) >= 2 else [None] * 99
                        row = rows.setdefault(("forward", kind, busy, n), {"rate": [], "p50": [], "p99": []})
                        row["rate"].append(rate)
                        row["p50"].append(q[49])
                        row["p99"].append(q[98])
                    for kind in kinds:
                        futs = [rpc.rpc_async(t, run_iterations, args=((model, kind), kind, shape, args.seconds))
                                for t in trainers[:n]]
                        count = sum(f.wait() for f in futs)
                        rows.setdefault(("iteration", kind, busy, n), {"rate": []})["rate"].append(count / args.seconds)
                if busy:
                    rpc.rpc_sync("owner", stop_gil_thread)
        for (what, kind, busy, n), row in sorted(rows.items(), key=lambda item: (item[0][0], item[0][3], item[0][1], item[0][2])):
            entry = {"model": model, "forward": kind, "owner": "busy" if busy else "idle", "trainers": n,
                     "per_s": median(row["rate"]), "rounds": row["rate"]}
            if what == "forward":
                entry["p50_ms"], entry["p99_ms"] = median(row["p50"]), median(row["p99"])
            results[what].append(entry)
            print(f"{model:5} {what:9} {kind:6} T={n} {'busy' if busy else 'idle'}: {entry['per_s']:9.1f}/s"
                  + (f"  p50 {_ms(entry['p50_ms'])}  p99 {_ms(entry['p99_ms'])}" if what == "forward" else ""),
                  flush=True)
    for what in ("forward", "iteration"):
        rates = {(r["model"], r["forward"], r["owner"], r["trainers"]): r["per_s"] for r in results[what]}
        for r in results[what]:
            idle = rates.get((r["model"], r["forward"], "idle", r["trainers"]))
            r["busy_over_idle"] = r["per_s"] / idle if r["owner"] == "busy" and idle else None
            python = rates.get((r["model"], "python", r["owner"], r["trainers"]))
            r["over_python"] = r["per_s"] / python if python else None
    return results


def run(rank, world, port, args, torchscript, out):
    if rank != 0:
        serve(rank, world, port, torchscript)
        return
    init(rank, world, port)
    try:
        results = coordinate(args, world, torchscript)
    finally:
        rpc.shutdown()
    out.update(results)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seconds", type=float, default=3.0, help="each configuration's time per round (default 3)")
    p.add_argument("--trainers", default="1,2,4", help="trainer counts (default 1,2,4; at most 4)")
    p.add_argument("--repeats", type=int, default=3, help="rounds; each figure is their median (default 3)")
    p.add_argument("--models", default="mlp,conv", help="of scripts/remote_forward_models.py (default mlp,conv)")
    p.add_argument("--torchscript-removed", action="store_true",
                   help="torch.jit's entry points raise in every process (tests/support/no_torchscript); torch's "
                        "RemoteModule is skipped")
    p.add_argument("--quick", action="store_true", help="0.5 s per configuration, one round, T=1 and 2 (a smoke run)")
    p.add_argument("--out", default=os.path.join(REPO, "results", "bench_remote_forward.json"))
    args = p.parse_args(argv)
    if args.quick:
        args.seconds, args.repeats, args.trainers = 0.5, 1, "1,2"
    args.trainers = [int(n) for n in args.trainers.split(",")]
    args.models = args.models.split(",")
    if max(args.trainers) > MAX_TRAINERS or min(args.trainers) < 1:
        p.error(f"--trainers: from 1 to {MAX_TRAINERS}")
    if args.torchscript_removed:
        os.environ[NO_TORCHSCRIPT_ENV] = "1"
        os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (NO_TORCHSCRIPT_SITE, os.environ.get("PYTHONPATH")) if x)
        sys.path.insert(0, NO_TORCHSCRIPT_SITE)
        import sitecustomize  # noqa: F401  (the no-TorchScript harness, in this process too)
    torchscript = models.ForwardInterface is not None and not args.torchscript_removed
    os.environ["PYTHONPATH"] = os.pathsep.join(x for x in (REPO, os.path.join(REPO, "scripts"),
                                                           os.environ.get("PYTHONPATH")) if x)
    from tests.support.cluster import free_port

    world = 2 + max(args.trainers)
    manager = mp.Manager()
    out = manager.dict()
    mp.spawn(run, args=(world, free_port(), args, torchscript, out), nprocs=world, join=True)
    results = {"meta": run_meta(seconds=args.seconds, repeats=args.repeats, trainers=args.trainers,
                                models=args.models, torchscript_removed=args.torchscript_removed, quick=args.quick),
               "forward": out["forward"], "iteration": out["iteration"], "exports": out["exports"]}
    write_results(args.out, results)


if __name__ == "__main__":
    main()
