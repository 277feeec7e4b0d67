"""What the main job writes at the end: the metrics file and the loss curve.

By default a run writes them into a folder of its own, ``runs/<workload>-<stack>-<date>-<time>/``
in the checkout (``metrics.json``, ``loss.png``), which git ignores, so that running the job
leaves the checkout as it was; the job prints the folder at the end. ``results/train/`` holds
the committed run that README.md and docs/main_job.md quote; its plot is redrawn from its
metrics with

    python scripts/train_outputs.py results/train/metrics.json results/train/loss.png
"""
import json
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNS = os.path.join(REPO, "runs")


def choose_paths(args):
    """Fills in ``args.metrics_out`` and ``args.plot_out`` where the command line gave none: a
    new folder under :data:`RUNS` named after the workload, the stack and the local time."""
    if args.metrics_out is None or args.plot_out is None:
        folder = os.path.join(RUNS, f"{args.workload}-{args.stack}-{time.strftime('%Y%m%d-%H%M%S')}")
        if args.metrics_out is None:
            args.metrics_out = os.path.join(folder, "metrics.json")
        if args.plot_out is None:
            args.plot_out = os.path.join(os.path.dirname(args.metrics_out), "loss.png")


def write_outputs(metrics, args, plot):
    """Writes ``metrics`` as JSON to ``--metrics-out`` and, when matplotlib is installed, the
    curves of the training loss and of the held-out measure to ``--plot-out``. ``plot`` names
    them: ``{"loss": ..., "metric": key of each epoch row, "metric_label": ...}``. Returns the
    paths written, relative to the working directory where they lie below it."""
    os.makedirs(os.path.dirname(os.path.abspath(args.metrics_out)), exist_ok=True)
    with open(args.metrics_out, "w") as f:
        json.dump(metrics, f, indent=2)
    written = [args.metrics_out] + ([args.plot_out] if draw(metrics, plot, args.plot_out) else [])
    return [p if os.path.relpath(p).startswith("..") else os.path.relpath(p) for p in written]


def draw(metrics, plot, path):
    """The loss curve (left axis) and the held-out measure (right axis) per epoch, as a PNG at
    ``path``; nothing without matplotlib (returns whether it drew). The legend sits below the axes, where it covers
    neither curve nor either axis' label."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return False
    epochs = [e["epoch"] for e in metrics["epochs"]]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(epochs, [e["loss"] for e in metrics["epochs"]], marker="o", label="training loss")
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel(plot["loss"])
    ax2 = ax.twinx()
    ax2.plot(epochs, [e[plot["metric"]] for e in metrics["epochs"]], color="tab:green", marker="s",
             label=plot["metric_label"])
    ax2.set_ylabel(plot["metric_label"])
    cfg = metrics["config"]
    workload = metrics.get("workload", cfg.get("workload", "digits"))  # runs before the movielens workload
    ax.set_title(f"{workload}, {cfg['trainers']} trainers, {cfg['servers']} servers, {cfg['stack']} stack")
    fig.legend(loc="lower center", ncol=2, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))  # the bottom 7 % for the legend
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def main(argv):
    """``train_outputs.py METRICS [PNG]``: redraws the loss curve of a metrics file (default:
    loss.png beside it)."""
    if len(argv) not in (1, 2):
        raise SystemExit("usage: python scripts/train_outputs.py METRICS_JSON [PNG]")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import workloads

    with open(argv[0]) as f:
        metrics = json.load(f)
    workload = metrics.get("workload", metrics["config"].get("workload", "digits"))
    path = argv[1] if len(argv) == 2 else os.path.join(os.path.dirname(argv[0]), "loss.png")
    draw(metrics, workloads.get(workload).PLOT, path)
    print(path)


if __name__ == "__main__":
    main(sys.argv[1:])
