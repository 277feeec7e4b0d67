"""Distributed backward: the plugin's engine (fast and smart mode) against torch's.

Graphs (each worker a separate process, TensorPipe on loopback):
  (i)   latency-bound: 2 workers, 10 round trips of 1,000-element tensors;
  (ii)  compute-bound: 3 workers, a 3-shard MLP with 1M-parameter layers (batch 256);
  (iii) the design note's unused-RPC example: smart mode against torch, which waits
        for its RPC timeout (run here with a short timeout, reported beside it);
  (iv)  auth_round_trips: graph (i), smart engine, started with plugin.rpc.init_rpc over
        TCP without a key (transports=["uv"]) and with a key (the authenticating transport
        "gilfree_auth", every frame encrypted with AES-256-GCM, docs/security.md),
        alternately in fresh processes within the same run; reports the median of each
        repeat's keyed/unkeyed ratio and the load average at its start and end.

Only the backward call is timed; every iteration builds its forward pass in a fresh
context. The engines take turns within each iteration, in a rotating order, so drift
and cache effects hit all of them alike.
Each graph runs --repeats times, each time in fresh processes; a run's ratios compare
engines timed in that same run, and the report gives the median of those ratios (and
each run's). Writes JSON (default results/bench_backward.json), which
docs/benchmarks.md quotes; a run of some graphs (``--graphs``) replaces those graphs' entries
in an existing file, each with its own ``meta``, and keeps the others.

    python scripts/bench_backward.py [--iters N] [--repeats R] [--quick] [--out PATH]
"""
import argparse
import json
import os
import platform
import statistics
import time
import warnings

import torch
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
import torch.multiprocessing as mp

from bench_results import run_meta, write_results

warnings.filterwarnings("ignore")

ROUND_TRIPS = 10
HIDDEN = 1000  # 1000 x 1000 = 1M parameters per layer
BATCH = 256
TORCH_TIMEOUT_S = 5.0

# --- functions the workers run -----------------------------------------------------------

_STATE = {}


def scale_by_weight(x):
    w = _STATE.setdefault("w", torch.rand(x.shape[0], requires_grad=True))
    return torch.tanh(x * w)


def shard_forward(x):
    layer = _STATE.get("layer")
    if layer is None:
        torch.manual_seed(rpc.get_worker_info().id)
        layer = _STATE["layer"] = torch.nn.Linear(HIDDEN, HIDDEN)
    return torch.relu(layer(x))


# --- the forward passes ------------------------------------------------------------------


def forward_round_trips(state):
    x = state.setdefault("x", torch.rand(1000, requires_grad=True))
    for _ in range(ROUND_TRIPS):
        x = rpc.rpc_sync("worker1", scale_by_weight, args=(x,))
        x = x * 1.01
    return [x.sum()]


def forward_mlp(state):
    if "layer" not in state:
        torch.manual_seed(0)
        state["layer"] = torch.nn.Linear(HIDDEN, HIDDEN)
        state["input"] = torch.rand(BATCH, HIDDEN)
    h = torch.relu(state["layer"](state["input"]))
    h = rpc.rpc_sync("worker1", shard_forward, args=(h,))
    h = rpc.rpc_sync("worker2", shard_forward, args=(h,))
    return [h.sum()]


def forward_unused_rpc(state):
    a = torch.rand(3, 3, requires_grad=True)
    b = torch.rand(3, 3, requires_grad=True)
    c = torch.rand(3, 3, requires_grad=True)
    d = rpc.rpc_sync("worker1", torch.add, args=(a, b))
    rpc.rpc_sync("worker1", torch.mul, args=(b, c))  # e, unused
    return [d.sum()]


def run_backward(engine, ctx, roots):
    import plugin

    if engine == "torch":
        dist_autograd.backward(ctx, roots)
    else:
        plugin.autograd.backward(ctx, roots, mode=engine)


def time_engines(forward, engines, iters, warmup):
    state, times = {}, {e: [] for e in engines}
    for i in range(warmup + iters):
        # rotate the order, so that no engine always runs right after the same other one
        for engine in engines[i % len(engines):] + engines[: i % len(engines)]:
            with dist_autograd.context() as ctx:
                roots = forward(state)
                start = time.perf_counter()
                run_backward(engine, ctx, roots)
                elapsed = time.perf_counter() - start
            if i >= warmup:
                times[engine].append(elapsed)
    return {e: summarize(t) for e, t in times.items()}


def summarize(samples):
    q = statistics.quantiles(samples, n=4)
    return {"median_ms": 1e3 * statistics.median(samples), "p25_ms": 1e3 * q[0], "p75_ms": 1e3 * q[2], "n": len(samples)}


def time_unused_rpc():
    """Smart mode finishes; torch waits for its RPC timeout and raises."""
    import plugin

    smart = []
    for _ in range(20):
        with dist_autograd.context() as ctx:
            roots = forward_unused_rpc({})
            start = time.perf_counter()
            plugin.autograd.backward(ctx, roots, mode="smart")
            smart.append(time.perf_counter() - start)
    rpc._set_rpc_timeout(TORCH_TIMEOUT_S)
    try:
        with dist_autograd.context() as ctx:
            roots = forward_unused_rpc({})
            start = time.perf_counter()
            try:
                dist_autograd.backward(ctx, roots)
                torch_outcome = "finished"
            except RuntimeError as e:
                torch_outcome = "raised: " + str(e).splitlines()[0][:120]
            torch_s = time.perf_counter() - start
    finally:
        rpc._set_rpc_timeout(60.0)
    return {
        "smart": summarize(smart),
        "torch_s": torch_s,
        "torch_rpc_timeout_s": TORCH_TIMEOUT_S,
        "torch_default_rpc_timeout_s": 60.0,
        "torch_outcome": torch_outcome,
    }


def worker(rank, world_size, port, args, queue):
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["MASTER_PORT"] = str(port)
    warnings.filterwarnings("ignore")
    import plugin  # noqa: F401

    torch.set_num_threads(1)
    auth = getattr(args, "auth", None)
    if auth is None:
        opts = rpc.TensorPipeRpcBackendOptions(num_worker_threads=8, rpc_timeout=60)
        rpc.init_rpc(f"worker{rank}", rank=rank, world_size=world_size, rpc_backend_options=opts)
    else:
        import plugin.rpc

        plugin.rpc.init_rpc(
            rank=rank, world_size=world_size, master_addr="127.0.0.1", master_port=port, num_worker_threads=8,
            rpc_timeout=60, transports=["uv"] if auth == "uv" else None,
            auth_key=BENCH_KEY if auth == "key" else None,
        )
    if rank == 0:
        engines = ["torch", "fast", "smart"]
        result = {}
        if auth is not None:
            result = time_engines(forward_round_trips, ["smart"], args.iters, args.warmup)
        elif args.graph == "round_trips":
            result = time_engines(forward_round_trips, engines, args.iters, args.warmup)
        elif args.graph == "mlp":
            result = time_engines(forward_mlp, engines, max(args.iters // 4, 5), max(args.warmup // 4, 2))
        else:
            result = time_unused_rpc()
        queue.put(result)
    if auth is None:
        rpc.shutdown()
    else:
        plugin.rpc.shutdown()


# The key of the auth_round_trips graph's keyed runs (any 16 bytes or more).
BENCH_KEY = "bench-backward-key-0123456789abcdef"


def run_graph(graph, world_size, args, auth=None):
    from socket import socket

    with socket() as s:
        s.bind(("localhost", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    args.graph = graph
    args.auth = auth
    procs = [ctx.Process(target=worker, args=(r, world_size, port, args, queue)) for r in range(world_size)]
    for p in procs:
        p.start()
    result = queue.get(timeout=600)
    for p in procs:
        p.join(timeout=60)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iters", type=int, default=200, help="timed iterations per engine (the MLP runs a quarter)")
    parser.add_argument("--warmup", type=int, default=20, help="untimed iterations first")
    parser.add_argument("--repeats", type=int, default=5, help="fresh process groups per graph (medians of their ratios)")
    parser.add_argument("--quick", action="store_true", help="a few iterations, to check the script runs")
    parser.add_argument("--out", default=os.path.join("results", "bench_backward.json"))
    parser.add_argument("--graphs", default="round_trips,mlp,unused_rpc,auth_round_trips",
                        help="comma-separated subset to run")
    args = parser.parse_args()
    if args.quick:
        args.iters, args.warmup, args.repeats = 8, 2, 1

    world = {"round_trips": 2, "mlp": 3, "unused_rpc": 2, "auth_round_trips": 2}
    results = {}
    for graph in args.graphs.split(","):
        if graph == "auth_round_trips":
            # keyed and unkeyed groups alternate (which goes first alternates too), each
            # repeat's ratio compares two groups timed back to back in this run
            runs = []
            load_start = list(os.getloadavg())
            for repeat in range(args.repeats):
                order = ("uv", "key") if repeat % 2 == 0 else ("key", "uv")
                timed = {auth: run_graph("round_trips", 2, args, auth=auth)["smart"] for auth in order}
                runs.append(timed)
            ratios = [r["key"]["median_ms"] / r["uv"]["median_ms"] for r in runs]
            results[graph] = {
                "runs": runs,
                "uv": {"median_ms": statistics.median(r["uv"]["median_ms"] for r in runs)},
                "key": {"median_ms": statistics.median(r["key"]["median_ms"] for r in runs)},
                "ratio_runs": ratios,
                "ratio": statistics.median(ratios),
                "load_average": {"start": load_start, "end": list(os.getloadavg())},
            }
            continue
        if graph == "unused_rpc":
            results[graph] = run_graph(graph, world[graph], args)
            continue
        # Each repeat is a fresh set of processes: where the scheduler puts them moves
        # the timings more than anything else on a small machine.
        runs = [run_graph(graph, world[graph], args) for _ in range(args.repeats)]
        results[graph] = {"runs": runs}
        for engine in ("torch", "fast", "smart"):
            results[graph][engine] = {"median_ms": statistics.median(r[engine]["median_ms"] for r in runs)}
        results[graph]["ratio_runs"] = {
            name: [r[a]["median_ms"] / r[b]["median_ms"] for r in runs]
            for name, (a, b) in {"fast/torch": ("fast", "torch"), "smart/torch": ("smart", "torch"),
                                 "smart/fast": ("smart", "fast")}.items()
        }
    print(f"torch {torch.__version__}, {os.cpu_count()} CPUs, {platform.processor() or platform.machine()}")
    print(f"{'graph':<14}{'torch ms':>12}{'fast ms':>12}{'smart ms':>12}{'fast/torch':>12}{'smart/torch':>13}{'smart/fast':>12}")
    for graph in ("round_trips", "mlp"):
        if graph not in results:
            continue
        r = results[graph]
        t, f, s = (r[e]["median_ms"] for e in ("torch", "fast", "smart"))
        # the median over repeats of each run's ratio (both engines timed in the same run)
        r["ratios"] = {name: statistics.median(values) for name, values in r["ratio_runs"].items()}
        q = r["ratios"]
        print(f"{graph:<14}{t:>12.3f}{f:>12.3f}{s:>12.3f}{q['fast/torch']:>12.3f}{q['smart/torch']:>13.3f}{q['smart/fast']:>12.3f}")
        for name, values in r["ratio_runs"].items():
            print(f"{'':<14}{name} per run: " + ", ".join(f"{v:.3f}" for v in values))
    if "auth_round_trips" in results:
        a = results["auth_round_trips"]
        print(
            f"round trips with a key (gilfree_auth) against without (uv): {a['key']['median_ms']:.3f} ms vs "
            f"{a['uv']['median_ms']:.3f} ms, key/no-key {a['ratio']:.3f} (per run: "
            + ", ".join(f"{v:.3f}" for v in a["ratio_runs"]) + "); load average (1, 5, 15 min) "
            + " -> ".join(", ".join(f"{x:.1f}" for x in a["load_average"][k]) for k in ("start", "end"))
        )
    if "unused_rpc" in results:
        u = results["unused_rpc"]
        print(
            f"unused RPC: smart {u['smart']['median_ms']:.3f} ms; torch {u['torch_s']:.2f} s "
            f"with a {u['torch_rpc_timeout_s']:.0f} s RPC timeout ({u['torch_outcome']})"
        )
    meta = run_meta(iters=args.iters, repeats=args.repeats, quick=args.quick)
    if set(args.graphs.split(",")) != set(world) and os.path.exists(args.out):
        # a subset of the graphs: the file's other graphs stay, and these carry their own meta
        with open(args.out) as f:
            existing = json.load(f)
        for graph in results:
            results[graph]["meta"] = meta
        existing.update(results)
        results = existing
    else:
        results["meta"] = meta
    write_results(args.out, results)


if __name__ == "__main__":
    main()
