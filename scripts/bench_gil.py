"""Optimizer steps while Python threads compete for the GIL: the plugin against torch.

Part 1, parameter server: one server worker holds the parameters (or --servers N share
them, each holding an equal part; default 1); T in {1, 2, 4, 8} trainer processes step them
concurrently through their own DistributedOptimizer, with and without a pure-Python thread
spinning on the server. Compared, in the same process group: the plugin's DistributedOptimizer
(Adam and NAdam; native local optimizers, C++) against torch's DistributedOptimizer with Adam
(its TorchScript path on torch <= 2.13, its Python path from torch 2.14 on) and with NAdam (its
Python path: NAdam has no functional optimizer in torch). Each trainer runs one backward pass,
then steps the same context over and over for a fixed time; reported: total steps/s on the
server. Targets (issue 4): >= 1.0x torch's Adam, >= 2x torch's NAdam at T=8 with the spinner.

Part 2, one process: a native local optimizer's step(context_id) (plugin.optim.NativeLocalOptimizer)
for 400 parameters of 4,096 elements (Adam), with and without a spinning thread, against torch's
scripted local optimizer (torch.distributed.optim's _ScriptLocalOptimizer); each called from
Python once per step, and, where torch still compiles TorchScript, from a TorchScript loop (50
steps per call; ours through its op, torch.ops.gilfree_rpc._optimizer_step). A call from Python
gives the GIL up for the step and must get it back from the spinning thread afterwards, which
CPython grants after its switch interval (5 ms by default): that wait is part of the "python"
rows.

Part 3, the cost of the all-or-nothing step without the backward pass's check: the parameters
split over --two-phase-servers servers (default 2), every trainer stepping after one backward
pass of the plugin's engine. The default step (checked: the pass checked every owner's
gradients, so the step goes to every owner at once, one round trip) against the same optimizer
made to take its two phases (prepare on every owner, then commit: what a step takes after
torch's backward pass, with a Python local optimizer, or in step_async). They alternate,
--repeats rounds (default 3), for Adam and NAdam and every T; reported: median steps/s of each
and the two phases' cost, 1 - the median ratio to the checked step of the same round.

Part 4, a thread on the owner holding its GIL (issue 19): one trainer, one server holding a
2048 x 2048 Linear layer (weight and bias), Adam; steps/s with the server idle and with a thread
there that holds the GIL nearly all the time (``ctypes.PyDLL(None).usleep`` in a loop: a PyDLL
call keeps the GIL). The plugin's DistributedOptimizer against torch's, in one process group.
Target: ours with the GIL held >= 0.95 of ours idle. Run it with a torch 2.13 and a torch 2.14
interpreter (each writes its own entry, keyed by torch version), and with
``--torchscript-removed`` (torch.jit's entry points raise in every process, as
pytorch/pytorch#189705 makes them; torch's own DistributedOptimizer is skipped then).

Writes JSON (default results/bench_gil.json), which docs/benchmarks.md quotes; a run of some
parts keeps the other parts' earlier results.

    python scripts/bench_gil.py [--seconds S] [--trainers 1,2,4,8] [--parts 1,2,3,4] [--repeats N]
                                [--torchscript-removed] [--quick] [--out PATH]
"""
import argparse
import json
import os
import platform
import statistics
import sys
import threading
import time
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from bench_results import run_meta, write_results
from gil_threads import start_gil_holder, start_spinner, stop_gil_thread

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if REPO not in sys.path:
    sys.path.insert(0, REPO)

warnings.filterwarnings("ignore")

# TensorPipe's default transports include shared memory, whose reactor thread busy-polls
# a CPU core in every process even when idle. With up to 10 processes on a small machine
# that polling, not the GIL, would decide the numbers (an RPC to a process next to a
# spinning *process*, which takes no GIL, slows from 0.13 ms to 4 ms), so every process here
# uses the uv (TCP) transport, for torch's optimizer and ours alike.
TRANSPORTS = ["uv"]
NUM_PARAMS = 400
PARAM_SIZE = 4096
ENGINES = ["plugin-adam", "torch-adam", "plugin-nadam", "torch-nadam"]
# part 3: the plugin's default step after its backward pass (checked), and the same step made
# to take its two phases (engine suffix "-two-phase")
PROTOCOLS = {"checked": "", "two_phase": "-two-phase"}
TWO_PHASE_ENGINES = {"adam": "plugin-adam", "nadam": "plugin-nadam"}
# the environment variable of tests/support/no_torchscript/sitecustomize.py, which makes
# torch.jit's entry points raise in every process started with it on PYTHONPATH
NO_TORCHSCRIPT_ENV = "GILFREE_TORCHSCRIPT_REMOVED"
NO_TORCHSCRIPT_SITE = os.path.join(REPO, "tests", "support", "no_torchscript")


def torch_adam_path() -> str:
    """Which path torch's DistributedOptimizer takes for Adam with this torch: TorchScript
    (its _ScriptLocalOptimizer) up to torch 2.13, Python from 2.14 on."""
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return "python" if (major, minor) >= (2, 14) else "torchscript"


def torchscript_removed() -> bool:
    return os.environ.get(NO_TORCHSCRIPT_ENV) == "1"


# --- the threads that compete for the GIL: scripts/gil_threads.py -------------------------


# --- part 1: the parameter server -------------------------------------------------------------

_SERVER = {}


def server_params(num_params, size):
    """Runs on the server: creates the parameters (once) and returns RRefs to them."""
    if "params" not in _SERVER:
        torch.manual_seed(0)
        _SERVER["params"] = [torch.rand(size, requires_grad=True) for _ in range(num_params)]
    return [rpc.RRef(p) for p in _SERVER["params"]]


def server_loss(x):
    """The forward pass on the server: a scalar that depends on every parameter."""
    return sum((p * x).sum() for p in _SERVER["params"])


class _TrainerThread:
    """Runs a trainer's work on one thread of its own: a distributed autograd context is
    bound to the thread that enters it, while RPCs arrive on any server thread."""

    def __init__(self):
        import queue

        self.jobs = queue.Queue()
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self):
        while True:
            fn, args, done = self.jobs.get()
            try:
                done.append((True, fn(*args)))
            except BaseException as e:  # noqa: BLE001 (handed back to the caller)
                done.append((False, e))

    def run(self, fn, *args):
        done = []
        self.jobs.put((fn, args, done))
        while not done:
            time.sleep(0.001)
        ok, value = done[0]
        if not ok:
            raise value
        return value


_TRAINER = {}


def _on_trainer_thread(fn, *args):
    if "thread" not in _TRAINER:
        _TRAINER["thread"] = _TrainerThread()
    return _TRAINER["thread"].run(fn, *args)


def trainer_prepare(engine, param_rrefs, servers, param_size, linear=False):
    """Runs on a trainer: its optimizer, and one backward pass whose context it keeps open
    to step again and again."""
    return _on_trainer_thread(_prepare, engine, param_rrefs, servers, param_size, linear)


def _prepare(engine, param_rrefs, servers, param_size, linear):
    import plugin
    import plugin.optim

    _release()
    cls = torch.optim.NAdam if "nadam" in engine else torch.optim.Adam
    if engine.startswith("plugin"):
        opt = plugin.optim.DistributedOptimizer(cls, param_rrefs, lr=1e-4)
        assert set(opt.local_optimizer_kinds.values()) == {"native"}, opt.local_optimizer_kinds
        if engine.endswith("-two-phase"):
            opt._checked_versions = lambda context_id: []  # every step takes its two phases
    else:
        from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer

        opt = TorchDistributedOptimizer(cls, param_rrefs, lr=1e-4)
    ctx = dist_autograd.context()
    context_id = ctx.__enter__()
    if linear:
        loss = rpc.rpc_sync(servers[0], linear_loss, args=(torch.ones(2048),))
    else:
        loss = sum(rpc.rpc_sync(server, server_loss, args=(torch.ones(param_size),)) for server in servers)
    if engine.startswith("plugin"):
        plugin.autograd.backward(context_id, [loss])
        if len(servers) > 1 and not engine.endswith("-two-phase"):
            assert opt._checked_versions(context_id), "the default step measured is the checked one"
    else:
        dist_autograd.backward(context_id, [loss])
    _TRAINER.update(opt=opt, ctx=ctx, context_id=context_id)
    opt.step(context_id)  # warm up


def trainer_run(seconds):
    """Runs on a trainer: steps until `seconds` have passed; returns (steps, elapsed)."""
    return _on_trainer_thread(_run, seconds)


def _run(seconds):
    opt, context_id = _TRAINER["opt"], _TRAINER["context_id"]
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        opt.step(context_id)
        steps += 1
    return steps, time.perf_counter() - start


def trainer_release():
    return _on_trainer_thread(_release)


def _release():
    if "ctx" in _TRAINER:
        _TRAINER.pop("ctx").__exit__(None, None, None)
    for key in ("opt", "context_id"):
        _TRAINER.pop(key, None)


def coordinate_server(trainers, args):
    """Rank 0: drives the trainers for every engine, with and without the spinner."""
    servers, names, param_rrefs = _setup_server(trainers, args)
    results = {}
    for spinner in (False, True):
        for engine in ENGINES:
            results[f"{engine}{'+spinner' if spinner else ''}"] = _steps_per_s(
                engine, spinner, servers, names, param_rrefs, args)
    return results


def coordinate_two_phase(trainers, args):
    """Rank 0, part 3: for each optimizer, the checked step and the two-phase step in
    alternation, ``args.repeats`` times each, without the spinner."""
    servers, names, param_rrefs = _setup_server(trainers, args)
    results = {}
    for name, engine in TWO_PHASE_ENGINES.items():
        runs = {key: [] for key in PROTOCOLS}
        for _ in range(args.repeats):
            for key, suffix in PROTOCOLS.items():
                runs[key].append(_steps_per_s(engine + suffix, False, servers, names, param_rrefs, args))
        # the runs of one round follow each other, so their ratios see the same machine load
        ratios = [two / checked for two, checked in zip(runs["two_phase"], runs["checked"])]
        results[name] = dict({key: statistics.median(v) for key, v in runs.items()},
                             cost=1.0 - statistics.median(ratios), ratios=ratios)
    return results


def coordinate_owner_gil(trainers, args):
    """Rank 0, part 4: steps/s of the plugin's DistributedOptimizer and torch's (unless
    TorchScript is removed: torch 2.13's imports TorchScript), idle and with a thread on the
    server holding its GIL; ``args.repeats`` alternating rounds, medians."""
    servers, names, param_rrefs = _setup_server(trainers, args)
    engines = ["plugin-adam"] + ([] if torchscript_removed() else ["torch-adam"])
    runs = {f"{e}{s}": [] for e in engines for s in ("", "+gil")}
    for _ in range(args.repeats):
        for engine in engines:
            for suffix in ("", "+gil"):
                runs[engine + suffix].append(_steps_per_s(engine, suffix == "+gil", servers, names, param_rrefs, args,
                                                          holder=start_gil_holder))
    out = {key: statistics.median(v) for key, v in runs.items()}
    for engine in engines:
        out[engine + ": gil/idle"] = statistics.median(
            [g / i for g, i in zip(runs[engine + "+gil"], runs[engine])])
    return out


def linear_params():
    """Runs on the server (part 4): a 2048 x 2048 Linear layer's weight and bias (once);
    returns RRefs to them."""
    if "params" not in _SERVER:
        torch.manual_seed(0)
        layer = torch.nn.Linear(2048, 2048)
        _SERVER["params"] = [layer.weight, layer.bias]
        _SERVER["layer"] = layer
    return [rpc.RRef(p) for p in _SERVER["params"]]


def linear_loss(x):
    """The forward pass on the server (part 4): the layer's output, summed."""
    return _SERVER["layer"](x).sum()


def _setup_server(trainers, args):
    servers = server_names(args.servers)
    names = [f"trainer{i}" for i in range(trainers)]
    param_rrefs = []
    if args.linear:
        return servers, names, rpc.rpc_sync(servers[0], linear_params)
    for server in servers:  # the parameters split evenly over the servers
        param_rrefs += rpc.rpc_sync(server, server_params, args=(args.num_params // len(servers), args.param_size))
    return servers, names, param_rrefs


def _steps_per_s(engine, spinner, servers, names, param_rrefs, args, holder=None):
    """Every trainer steps its own optimizer of ``engine`` for ``args.seconds``; returns the
    steps per second of all of them together. With ``spinner``, a thread on every server
    competes for its GIL (``holder``, default :func:`start_spinner`)."""
    for name in names:
        rpc.rpc_sync(name, trainer_prepare, args=(engine, param_rrefs, servers, args.param_size, args.linear))
    if spinner:
        for server in servers:
            rpc.rpc_sync(server, holder or start_spinner)
    futs = [rpc.rpc_async(name, trainer_run, args=(args.seconds,)) for name in names]
    runs = [f.wait() for f in futs]
    if spinner:
        for server in servers:
            rpc.rpc_sync(server, stop_gil_thread)
    for name in names:
        rpc.rpc_sync(name, trainer_release)
    steps = sum(r[0] for r in runs)
    elapsed = max(r[1] for r in runs)
    return steps / elapsed


def server_names(count):
    """"server" for one server (the default), else "server0" .. "server{count-1}"."""
    return ["server"] if count == 1 else [f"server{i}" for i in range(count)]


def server_worker(rank, world_size, port, args, queue, coordinate=coordinate_server):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    torch.set_num_threads(1)
    import plugin.rpc

    servers = server_names(args.servers)
    names = ["coordinator"] + servers + [f"trainer{i}" for i in range(world_size - 1 - len(servers))]
    plugin.rpc.init_rpc(rank=rank, world_size=world_size, master_port=port, worker_names=names,
                        num_worker_threads=16, rpc_timeout=120, transports=TRANSPORTS)
    if rank == 0:
        queue.put(coordinate(world_size - 1 - len(servers), args))
    rpc.shutdown()


def run_server_benchmark(trainers, args, coordinate=coordinate_server):
    from socket import socket

    with socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    world = trainers + 1 + args.servers
    procs = [ctx.Process(target=server_worker, args=(r, world, port, args, queue, coordinate)) for r in range(world)]
    for p in procs:
        p.start()
    result = _get(queue, procs, 1800)
    for p in procs:
        p.join(timeout=120)
    return result


def _get(queue, procs, timeout):
    """The result a child puts on `queue`; raises if a child dies first."""
    import queue as queue_module

    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            return queue.get(timeout=1)
        except queue_module.Empty:
            dead = [p for p in procs if p.exitcode not in (None, 0)]
            if dead:
                for p in procs:
                    p.kill()
                raise RuntimeError(f"a benchmark process exited with code {dead[0].exitcode}")
    raise TimeoutError("the benchmark did not finish in time")


# --- part 2: one process -----------------------------------------------------------------------


def time_calls(fn, iters):
    samples = []
    for _ in range(iters):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return 1e3 * statistics.median(samples)


def local_step_benchmark(args):
    """A native local optimizer's step(context_id) and torch's scripted local optimizer, with
    and without a spinning thread, in a one-worker RPC group. The TorchScript rows (and torch's
    local optimizer, which is TorchScript) only where torch still compiles TorchScript."""
    from socket import socket

    import functional_optim
    import plugin
    import plugin.rpc
    from plugin.optim import NativeLocalOptimizer

    with socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    torch.set_num_threads(1)
    plugin.rpc.init_rpc(rank=0, world_size=1, master_port=port, transports=TRANSPORTS)
    torch.manual_seed(0)
    params = [torch.rand(PARAM_SIZE, requires_grad=True) for _ in range(NUM_PARAMS)]
    ours = NativeLocalOptimizer(functional_optim.Adam, params, lr=1e-4)
    callers = {"plugin": {"python": lambda c: ours.step(c)}}
    if not torchscript_removed():
        from torch.distributed.optim.optimizer import _ScriptLocalOptimizer

        theirs = torch.jit.script(_ScriptLocalOptimizer(_FunctionalAdamClass(), [rpc.RRef(p) for p in params], lr=1e-4))
        our_loop = torch.jit.script(_native_step_loop)
        their_loop = torch.jit.script(_StepLoop(theirs))
        callers["plugin"]["torchscript"] = lambda c: our_loop(ours.handle, c, LOOP_STEPS)
        callers["torch"] = {"python": lambda c: theirs.step(c), "torchscript": lambda c: their_loop(c, LOOP_STEPS)}
    results = {}
    with dist_autograd.context() as ctx:
        loss = sum((p * p).sum() for p in params)
        plugin.autograd.backward(ctx, [loss], retain_graph=True)
        dist_autograd.backward(ctx, [loss])
        for name, cases in callers.items():
            results[name] = {}
            for case, step in cases.items():
                steps_per_call = LOOP_STEPS if case == "torchscript" else 1
                call = lambda step=step: step(ctx)  # noqa: E731
                call()  # warm up
                alone = time_calls(call, max(args.local_iters // steps_per_call, 5)) / steps_per_call
                start_spinner()
                try:
                    spun = time_calls(call, max(args.local_iters // steps_per_call, 5)) / steps_per_call
                finally:
                    stop_gil_thread()
                results[name][case] = {"alone_ms": alone, "spinner_ms": spun, "slowdown": spun / alone}
    rpc.shutdown()
    return results


LOOP_STEPS = 50


def _native_step_loop(handle: int, context_id: int, n: int) -> None:
    """Steps a native local optimizer n times from TorchScript, through its op."""
    for _ in range(n):
        torch.ops.gilfree_rpc._optimizer_step(handle, context_id, -1, -1)  # no version check, no deadline


class _StepLoop(torch.nn.Module):
    """Calls a scripted local optimizer's step(context_id) n times from TorchScript."""

    def __init__(self, local_optimizer):
        super().__init__()
        self.local_optimizer = local_optimizer

    def forward(self, context_id: int, n: int) -> None:
        for _ in range(n):
            self.local_optimizer.step(context_id)


def _FunctionalAdamClass():
    from torch.distributed.optim import _FunctionalAdam

    return _FunctionalAdam


def local_worker(args, queue):
    warnings.filterwarnings("ignore")
    queue.put(local_step_benchmark(args))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=2.0, help="stepping time per configuration (parts 1, 3, 4)")
    parser.add_argument("--trainers", default="1,2,4,8", help="trainer counts (parts 1, 3)")
    parser.add_argument("--num-params", type=int, default=100, help="parameters on the server(s) (parts 1, 3)")
    parser.add_argument("--servers", type=int, default=1, help="servers that share the parameters (part 1)")
    parser.add_argument("--param-size", type=int, default=4096, help="elements per parameter (parts 1, 3)")
    parser.add_argument("--local-iters", type=int, default=200, help="timed steps per case (part 2)")
    parser.add_argument("--two-phase-servers", type=int, default=2, help="servers in part 3 (at least 2)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="parts 3, 4: rounds of the compared runs, in alternation (median reported)")
    parser.add_argument("--parts", default="1,2,3,4",
                        help="which parts to run; the other parts' results already in --out are kept")
    parser.add_argument("--torchscript-removed", action="store_true",
                        help="torch.jit's entry points raise in every process (tests/support/no_torchscript)")
    parser.add_argument("--quick", action="store_true", help="tiny settings, to check the script runs")
    parser.add_argument("--out", default=os.path.join("results", "bench_gil.json"))
    args = parser.parse_args()
    args.linear = False
    if args.quick:
        args.seconds, args.trainers, args.local_iters, args.repeats = 0.3, "1,2", 10, 1
    if args.two_phase_servers < 2:
        parser.error("--two-phase-servers must be at least 2 (one owner steps in one call)")
    if args.torchscript_removed:  # inherited by every process this one spawns
        os.environ[NO_TORCHSCRIPT_ENV] = "1"
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [NO_TORCHSCRIPT_SITE, os.environ.get("PYTHONPATH")]))
    parts = {int(p) for p in args.parts.split(",")}
    trainers = [int(t) for t in args.trainers.split(",")]
    results = {}

    mode = "TorchScript removed" if torchscript_removed() else "TorchScript available"
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {platform.machine()}, {mode}")
    if 2 in parts:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        p = ctx.Process(target=local_worker, args=(args, queue))
        p.start()
        local = _get(queue, [p], 600)
        p.join()
        results["local_step"] = local
        print(f"\nLocal step(context_id), {NUM_PARAMS} x {PARAM_SIZE} Adam, one process, ms per step:")
        for name, cases in local.items():
            for case, r in cases.items():
                print(f"  {name:<8} called from {case:<12} alone {r['alone_ms']:7.3f}   with spinner {r['spinner_ms']:7.3f}"
                      f"   slowdown {r['slowdown']:.2f}x")
    if 1 in parts:
        server = {t: run_server_benchmark(t, args) for t in trainers}
        print(f"\nParameter server, {args.num_params} x {args.param_size} on {args.servers} server(s): steps/s "
              f"(torch's Adam: its {torch_adam_path()} path)")
        header = "".join(f"{e + s:>22}" for s in ("", "+spinner") for e in ENGINES)
        print(f"{'T':>3}{header}")
        for t, r in server.items():
            print(f"{t:>3}" + "".join(f"{r[e + s]:>22.1f}" for s in ("", "+spinner") for e in ENGINES))
        ratios = {}
        for t, r in server.items():
            ratios[t] = {}
            for s in ("", "+spinner"):
                ratios[t]["adam: plugin/torch" + s] = r["plugin-adam" + s] / r["torch-adam" + s]
                ratios[t]["nadam: plugin/torch" + s] = r["plugin-nadam" + s] / r["torch-nadam" + s]
        print("\nRatios (plugin / torch, steps/s):")
        for t, r in ratios.items():
            print(f"{t:>3}  " + "   ".join(f"{k} {v:.2f}" for k, v in r.items()))
        results["server"] = {str(t): r for t, r in server.items()}
        results["server_ratios"] = {str(t): r for t, r in ratios.items()}
    if 3 in parts:
        part3 = argparse.Namespace(**dict(vars(args), servers=args.two_phase_servers))
        two_phase = {t: run_server_benchmark(t, part3, coordinate_two_phase) for t in trainers}
        print(f"\nWithout the backward pass's check: {args.num_params} x {args.param_size} on {args.two_phase_servers} "
              f"servers, steps/s, medians of {args.repeats} alternating runs:")
        print(f"{'T':>3} {'optimizer':>9} {'checked':>9} {'two-phase':>10} {'cost':>7}   ratios (two-phase / checked)")
        for t, r in two_phase.items():
            for name, c in r.items():
                print(f"{t:>3} {name:>9} {c['checked']:>9.1f} {c['two_phase']:>10.1f} {100 * c['cost']:>6.1f}%   "
                      + " ".join(f"{x:.3f}" for x in c["ratios"]))
        results["two_phase"] = {str(t): r for t, r in two_phase.items()}
    if 4 in parts:
        part4 = argparse.Namespace(**dict(vars(args), servers=1, linear=True))
        owner_gil = run_server_benchmark(1, part4, coordinate_owner_gil)
        key = f"torch {torch.__version__}, {mode}"
        print(f"\nA thread holding the server's GIL, Adam over a 2048 x 2048 Linear, one trainer, steps/s ({key}; "
              f"torch's DistributedOptimizer takes its {torch_adam_path()} path):")
        for name, value in owner_gil.items():
            print(f"  {name:<24} {value:9.2f}")
        results["owner_gil"] = {key: dict(owner_gil, torch_path=torch_adam_path())}
    meta = {}
    if parts != {1, 2, 3, 4} and os.path.exists(args.out):
        # a run of some parts keeps the other parts' earlier results (and their meta)
        with open(args.out) as f:
            earlier = json.load(f)
        meta = earlier.pop("meta", {})
        if "owner_gil" in results:  # one entry per torch version and mode
            results["owner_gil"] = dict(earlier.get("owner_gil", {}), **results["owner_gil"])
        results = dict(earlier, **results)
    if 1 in parts:
        meta.update(seconds=args.seconds, servers=args.servers)
    if 3 in parts:
        meta.update(two_phase_seconds=args.seconds, two_phase_servers=args.two_phase_servers, repeats=args.repeats)
    if 4 in parts:
        meta.update(owner_gil_seconds=args.seconds, owner_gil_repeats=args.repeats)
    this_run = run_meta(num_params=args.num_params, param_size=args.param_size,
                        quick=args.quick or meta.get("quick", False))
    if not parts & {1, 2, 3}:  # the torch and Python of parts 1 to 3 stay those they ran with (part 4 names its own)
        this_run.update({k: meta[k] for k in ("torch", "python", "cpus") if k in meta})
    results["meta"] = dict(meta, **this_run)
    write_results(args.out, results)


if __name__ == "__main__":
    main()
