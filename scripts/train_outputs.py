"""What the main job writes at the end: the metrics file and the loss curve."""
import json
import os


def write_outputs(metrics, args, plot):
    """Writes ``metrics`` as JSON to ``--metrics-out`` and, when matplotlib is installed, the
    curves of the training loss and of the held-out measure to ``--plot-out``. ``plot`` names
    them: ``{"loss": ..., "metric": key of each epoch row, "metric_label": ...}``."""
    os.makedirs(os.path.dirname(os.path.abspath(args.metrics_out)), exist_ok=True)
    with open(args.metrics_out, "w") as f:
        json.dump(metrics, f, indent=2)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    epochs = [e["epoch"] for e in metrics["epochs"]]
    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(epochs, [e["loss"] for e in metrics["epochs"]], marker="o", label="training loss")
    ax.set_xlabel("epoch")
    ax.set_ylabel(plot["loss"])
    ax2 = ax.twinx()
    ax2.plot(epochs, [e[plot["metric"]] for e in metrics["epochs"]], color="tab:green", marker="s",
             label=plot["metric_label"])
    ax2.set_ylabel(plot["metric_label"])
    cfg = metrics["config"]
    ax.set_title(f"{cfg['workload']}, {cfg['trainers']} trainers, {cfg['servers']} servers, {cfg['stack']} stack")
    fig.legend(loc="center right")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(args.plot_out)), exist_ok=True)
    fig.savefig(args.plot_out, dpi=100)
    plt.close(fig)
