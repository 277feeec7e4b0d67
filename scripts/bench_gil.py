"""Optimizer steps while Python threads compete for the GIL: the plugin against torch.

Part 1, parameter server: one server worker holds the parameters (or --servers N share
them, each holding an equal part; default 1); T in {1, 2, 4, 8}
trainer processes step them concurrently through their own DistributedOptimizer, with
and without a pure-Python thread spinning on the server. Compared, in the same process
group: the plugin's DistributedOptimizer (Adam and NAdam) against torch's DistributedOptimizer
with Adam (its TorchScript path) and with NAdam (its Python path: NAdam has no TorchScript
functional optimizer in torch). Each trainer runs one backward pass, then steps the same
context over and over for a fixed time; reported: total steps/s on the server.
Targets (issue 4): >= 1.0x torch's TorchScript path, >= 2x its Python path at T=8 with the
spinner.

Part 2, one process: ScriptLocalOptimizer.step(context_id) for 400 parameters of 4,096
elements (Adam), with and without a spinning thread, against torch's scripted local
optimizer (torch.distributed.optim's _ScriptLocalOptimizer); each called from Python once
per step, and from a TorchScript loop (50 steps per call, as in a scripted training loop).
Target: slowdown at most 1.2x. A call from Python gives the GIL up for the step and must
get it back from the spinning thread afterwards, which CPython grants after its switch
interval (5 ms by default): that wait is part of the "python" rows.

Part 3, the cost of the all-or-nothing step (issue 10): the parameters split over
--two-phase-servers servers (default 2), every trainer stepping after one backward pass of the
plugin's engine. The plugin's default step: the pass checked every owner's gradients
(plugin/csrc/gradient_check.h), so the step goes to every owner at once, one round trip.
Against it, the same optimizer switched (DistributedOptimizer._forced_protocol, which exists
for this measurement and for the tests) to one round trip without the guarantee (every owner
steps at once, unchecked), and to the steps that validate on the owners first, used when the
pass could not check (torch's engine, sparse gradients): the chain of two owners (one round
trip from the trainer, the owners applying one after the other), the owners exchanging their
verdicts (what three owners or more use: one round trip from the trainer, the owners updating
in parallel, two to four more messages per pair of owners), and the phases sent from the
trainer to every owner (as step_async does: one extra round trip). The five alternate,
--repeats rounds (default 3), in one process group, for Adam and NAdam and every T; reported:
median steps/s of each and each one's cost, 1 - the median ratio to the one-round-trip step of
the same round. Target: under 10 %. With one server the step is one call whatever the switch,
so part 3 needs two or more.

Writes JSON (default results/bench_gil.json), which docs/benchmarks.md quotes.

    python scripts/bench_gil.py [--seconds S] [--trainers 1,2,4,8] [--parts 1,2,3] [--repeats N]
                                [--quick] [--out PATH]
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
ENGINES = ["plugin-adam", "torch-adam-torchscript", "plugin-nadam", "torch-nadam-python"]
# part 3: the plugin's default step (after the plugin's backward pass, which checked every
# owner's gradients: sent to every owner at once), the steps that validate on the owners
# first (the chain of two owners; the owners exchanging their verdicts, as with three owners
# or more; the phases sent from the caller to all owners, as step_async does), and the same
# step sent to every owner at once without the guarantee; values:
# DistributedOptimizer._forced_protocol
PROTOCOLS = {"two_phase": None, "chain": "chain", "exchange": "exchange", "parallel": "parallel",
             "one_phase": "one-phase"}
TWO_PHASE_ENGINES = {"adam": "plugin-adam", "nadam": "plugin-nadam"}

# --- the spinning thread --------------------------------------------------------------------

_SPIN = {}


def start_spinner():
    """A pure-Python busy loop: it holds the GIL except when the interpreter hands it over."""
    stop = threading.Event()

    def spin():
        x = 0
        while not stop.is_set():
            x += 1

    thread = threading.Thread(target=spin, daemon=True)
    thread.start()
    _SPIN["stop"], _SPIN["thread"] = stop, thread


def stop_spinner():
    if "stop" in _SPIN:
        _SPIN.pop("stop").set()
        _SPIN.pop("thread").join()


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


def trainer_prepare(engine, param_rrefs, servers, param_size):
    """Runs on a trainer: its optimizer, and one backward pass whose context it keeps open
    to step again and again."""
    return _on_trainer_thread(_prepare, engine, param_rrefs, servers, param_size)


def _prepare(engine, param_rrefs, servers, param_size):
    import plugin
    import plugin.optim
    from torch.distributed.optim import DistributedOptimizer as TorchDistributedOptimizer

    _release()
    cls = torch.optim.NAdam if "nadam" in engine else torch.optim.Adam
    if engine.startswith("plugin"):
        opt = plugin.optim.DistributedOptimizer(cls, param_rrefs, lr=1e-4)
        # the switch that exists for this benchmark (see PROTOCOLS)
        opt._forced_protocol = next((p for p in PROTOCOLS.values() if p and engine.endswith("-" + p)), None)
    else:
        opt = TorchDistributedOptimizer(cls, param_rrefs, lr=1e-4)
    ctx = dist_autograd.context()
    context_id = ctx.__enter__()
    loss = sum(rpc.rpc_sync(server, server_loss, args=(torch.ones(param_size),)) for server in servers)
    if engine.startswith("plugin"):
        plugin.autograd.backward(context_id, [loss])
    else:
        dist_autograd.backward(context_id, [loss])
    if engine.startswith("plugin") and opt._forced_protocol is None and len(servers) > 1:
        # the default step measured is the one the backward pass checked
        assert opt._protocol(context_id) == "checked", opt._protocol(context_id)
    _TRAINER.update(opt=opt, ctx=ctx, context_id=context_id)
    opt.step(context_id)  # warm up (compiles on the server on first use)


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
    """Rank 0, part 3: for each optimizer, the two-phase step and the one-phase step in
    alternation, ``args.repeats`` times each, without the spinner."""
    servers, names, param_rrefs = _setup_server(trainers, args)
    results = {}
    for name, engine in TWO_PHASE_ENGINES.items():
        runs = {key: [] for key in PROTOCOLS}
        for _ in range(args.repeats):
            for key, protocol in PROTOCOLS.items():
                suffix = "-" + protocol if protocol else ""
                runs[key].append(_steps_per_s(engine + suffix, False, servers, names, param_rrefs, args))
        # the runs of one round follow each other, so their ratios see the same machine load
        ratios = [two / one for two, one in zip(runs["two_phase"], runs["one_phase"])]
        results[name] = dict(
            {key: statistics.median(v) for key, v in runs.items()},
            ratio=statistics.median(ratios), cost=1.0 - statistics.median(ratios), ratios=ratios,
        )
        for key in ("chain", "exchange", "parallel"):
            theirs = [x / one for x, one in zip(runs[key], runs["one_phase"])]
            results[name].update({key + "_cost": 1.0 - statistics.median(theirs), key + "_ratios": theirs})
    return results


def _setup_server(trainers, args):
    servers = server_names(args.servers)
    names = [f"trainer{i}" for i in range(trainers)]
    param_rrefs = []
    for server in servers:  # the parameters split evenly over the servers
        param_rrefs += rpc.rpc_sync(server, server_params, args=(args.num_params // len(servers), args.param_size))
    return servers, names, param_rrefs


def _steps_per_s(engine, spinner, servers, names, param_rrefs, args):
    """Every trainer steps its own optimizer of ``engine`` for ``args.seconds``; returns the
    steps per second of all of them together."""
    for name in names:
        rpc.rpc_sync(name, trainer_prepare, args=(engine, param_rrefs, servers, args.param_size))
    if spinner:
        for server in servers:
            rpc.rpc_sync(server, start_spinner)
    futs = [rpc.rpc_async(name, trainer_run, args=(args.seconds,)) for name in names]
    runs = [f.wait() for f in futs]
    if spinner:
        for server in servers:
            rpc.rpc_sync(server, stop_spinner)
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
    """ScriptLocalOptimizer.step(context_id) and torch's scripted local optimizer, with and
    without a spinning thread, in a one-worker RPC group."""
    from socket import socket

    import plugin
    import plugin.rpc
    from functional_optim import _jit
    from plugin.optim import ScriptLocalOptimizer
    from torch.distributed.optim.optimizer import _ScriptLocalOptimizer

    with socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    torch.set_num_threads(1)
    plugin.rpc.init_rpc(rank=0, world_size=1, master_port=port, transports=TRANSPORTS)
    torch.manual_seed(0)
    params = [torch.rand(PARAM_SIZE, requires_grad=True) for _ in range(NUM_PARAMS)]
    ours = ScriptLocalOptimizer.create(torch.optim.Adam, params, lr=1e-4)
    theirs = torch.jit.script(_ScriptLocalOptimizer(_FunctionalAdamClass(), [rpc.RRef(p) for p in params], lr=1e-4))
    loops = {name: _jit.script(_StepLoop(module)) for name, module in (("plugin", ours), ("torch", theirs))}
    results = {}
    with dist_autograd.context() as ctx:
        loss = sum((p * p).sum() for p in params)
        plugin.autograd.backward(ctx, [loss], retain_graph=True)
        dist_autograd.backward(ctx, [loss])
        for name, module in (("plugin", ours), ("torch", theirs)):
            cases = {
                # one call from Python per step
                "python": (lambda m=module: m.step(ctx), 1),
                # a TorchScript loop of LOOP_STEPS steps per call (a scripted training step)
                "torchscript": (lambda l=loops[name]: l(ctx, LOOP_STEPS), LOOP_STEPS),
            }
            results[name] = {}
            for case, (call, steps_per_call) in cases.items():
                call()  # warm up
                alone = time_calls(call, max(args.local_iters // steps_per_call, 5)) / steps_per_call
                start_spinner()
                try:
                    spun = time_calls(call, max(args.local_iters // steps_per_call, 5)) / steps_per_call
                finally:
                    stop_spinner()
                results[name][case] = {"alone_ms": alone, "spinner_ms": spun, "slowdown": spun / alone}
    rpc.shutdown()
    return results


LOOP_STEPS = 50


class _StepLoop(torch.nn.Module):
    """Calls a local optimizer's step(context_id) n times from TorchScript."""

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
    parser.add_argument("--seconds", type=float, default=2.0, help="stepping time per configuration (parts 1, 3)")
    parser.add_argument("--trainers", default="1,2,4,8", help="trainer counts (parts 1, 3)")
    parser.add_argument("--num-params", type=int, default=100, help="parameters on the server(s) (parts 1, 3)")
    parser.add_argument("--servers", type=int, default=1,
                        help="servers that share the parameters (part 1); with more than one, the "
                             "plugin's step has two phases (validate everywhere, then apply)")
    parser.add_argument("--param-size", type=int, default=4096, help="elements per parameter (parts 1, 3)")
    parser.add_argument("--local-iters", type=int, default=200, help="timed steps per case (part 2)")
    parser.add_argument("--two-phase-servers", type=int, default=2, help="servers in part 3 (at least 2)")
    parser.add_argument("--repeats", type=int, default=3,
                        help="part 3: runs of each of the two steps, in alternation (median reported)")
    parser.add_argument("--parts", default="1,2,3",
                        help="which parts to run; the other parts' results already in --out are kept")
    parser.add_argument("--quick", action="store_true", help="tiny settings, to check the script runs")
    parser.add_argument("--out", default=os.path.join("results", "bench_gil.json"))
    args = parser.parse_args()
    if args.quick:
        args.seconds, args.trainers, args.local_iters, args.repeats = 0.3, "1,2", 10, 1
    if args.two_phase_servers < 2:
        parser.error("--two-phase-servers must be at least 2 (one owner steps in one call)")
    parts = {int(p) for p in args.parts.split(",")}
    trainers = [int(t) for t in args.trainers.split(",")]
    results = {}

    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {platform.machine()}")
    if 2 in parts:
        ctx = mp.get_context("spawn")
        queue = ctx.Queue()
        p = ctx.Process(target=local_worker, args=(args, queue))
        p.start()
        local = _get(queue, [p], 600)
        p.join()
        results["local_step"] = local
        print(f"\nScriptLocalOptimizer.step(context_id), {NUM_PARAMS} x {PARAM_SIZE} Adam, one process, ms per step:")
        for name, cases in local.items():
            for case, r in cases.items():
                print(f"  {name:<8} called from {case:<12} alone {r['alone_ms']:7.3f}   with spinner {r['spinner_ms']:7.3f}"
                      f"   slowdown {r['slowdown']:.2f}x")
    if 1 in parts:
        server = {t: run_server_benchmark(t, args) for t in trainers}
        print(f"\nParameter server, {args.num_params} x {args.param_size} on {args.servers} server(s): steps/s")
        header = "".join(f"{e + s:>34}" for s in ("", "+spinner") for e in ENGINES)
        print(f"{'T':>3}{header}")
        for t, r in server.items():
            print(f"{t:>3}" + "".join(f"{r[e + s]:>34.1f}" for s in ("", "+spinner") for e in ENGINES))
        ratios = {}
        for t, r in server.items():
            ratios[t] = {}
            for s in ("", "+spinner"):
                ratios[t]["adam: plugin/torch-torchscript" + s] = r["plugin-adam" + s] / r["torch-adam-torchscript" + s]
                ratios[t]["nadam: plugin/torch-python" + s] = r["plugin-nadam" + s] / r["torch-nadam-python" + s]
        print("\nRatios (plugin / torch, steps/s):")
        for t, r in ratios.items():
            print(f"{t:>3}  " + "   ".join(f"{k} {v:.2f}" for k, v in r.items()))
        results["server"] = {str(t): r for t, r in server.items()}
        results["server_ratios"] = {str(t): r for t, r in ratios.items()}
    if 3 in parts:
        part3 = argparse.Namespace(**dict(vars(args), servers=args.two_phase_servers))
        two_phase = {t: run_server_benchmark(t, part3, coordinate_two_phase) for t in trainers}
        print(f"\nAll-or-nothing step: {args.num_params} x {args.param_size} on {args.two_phase_servers} servers, "
              f"steps/s, medians of {args.repeats} alternating runs:")
        print(f"{'T':>3} {'optimizer':>9} {'default':>9} {'chain':>9} {'exchange':>9} {'parallel':>9} {'one-phase':>10} "
              f"{'cost':>7} {'chain cost':>11} {'exch. cost':>11} {'par. cost':>10}   ratios (default / one-phase)")
        for t, r in two_phase.items():
            for name, c in r.items():
                print(f"{t:>3} {name:>9} {c['two_phase']:>9.1f} {c['chain']:>9.1f} {c['exchange']:>9.1f} "
                      f"{c['parallel']:>9.1f} {c['one_phase']:>10.1f} {100 * c['cost']:>6.1f}% "
                      f"{100 * c['chain_cost']:>10.1f}% {100 * c['exchange_cost']:>10.1f}% "
                      f"{100 * c['parallel_cost']:>9.1f}%   " + " ".join(f"{x:.3f}" for x in c["ratios"]))
        results["two_phase"] = {str(t): r for t, r in two_phase.items()}
    meta = {}
    if parts != {1, 2, 3} and os.path.exists(args.out):
        # a run of some parts keeps the other parts' earlier results (and their meta)
        with open(args.out) as f:
            earlier = json.load(f)
        meta = earlier.pop("meta", {})
        results = dict(earlier, **results)
    if 1 in parts:
        meta.update(seconds=args.seconds, servers=args.servers)
    if 3 in parts:
        meta.update(two_phase_seconds=args.seconds, two_phase_servers=args.two_phase_servers, repeats=args.repeats)
    results["meta"] = dict(meta, **run_meta(num_params=args.num_params, param_size=args.param_size,
                                            quick=args.quick or meta.get("quick", False)))
    write_results(args.out, results)


if __name__ == "__main__":
    main()
