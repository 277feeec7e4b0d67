"""The digits workload: an MLP on scikit-learn's handwritten digits, its layers over the servers.

An MLP of 2.2M parameters ([64, 1024, 1024, 1024, 10] with ``--hidden 1024``) lives on the
servers, each holding consecutive layers behind an RRef; a trainer's forward pass calls the
servers in turn by RPC. Data: 1,797 scanned 8x8 digits (``sklearn.datasets.load_digits``,
bundled with scikit-learn), 80 % for training, 20 % held out (stratified, seeded). Measured:
held-out accuracy.
"""
import torch
import torch.nn.functional as F

from workloads import call_shard, tensor_bytes

# what a checkpoint must agree on with the job that resumes from it, beside the common options
JOB_KEYS = ("hidden",)
PLOT = {"loss": "cross-entropy", "metric": "accuracy", "metric_label": "held-out accuracy"}


def layer_sizes(args):
    return [64, args.hidden, args.hidden, args.hidden, 10]


def check_args(args, error):
    if args.servers > len(layer_sizes(args)) - 1:
        error(f"the model has {len(layer_sizes(args)) - 1} layers: use at most that many servers")
    if args.hidden < 1:
        error("--hidden must be positive")


class Shard(torch.nn.Module):
    """Consecutive linear layers of the MLP (ReLU between layers, none after the last).

    Written as for local training, but for ``snapshot``: other trainers step these parameters
    (in place) between this trainer's forward and backward passes. A native forward (a
    ``plugin.nn.RemoteModule``) reads a snapshot of the parameters that the server takes once
    per step, so the backward pass computes the gradient at the weights the forward pass saw
    (as in asynchronous SGD). A pickled Python forward has no such snapshot: with ``snapshot``
    it clones every weight on every call instead (the clone's gradient flows on to the
    parameter), or autograd's in-place check would fail the backward pass.
    """

    def __init__(self, sizes, last, seed, snapshot=False):
        super().__init__()
        torch.manual_seed(seed)
        self.layers = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.last = last
        self.snapshot = snapshot

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            if self.snapshot:
                x = F.linear(x, layer.weight.clone(), layer.bias.clone())
            else:
                x = layer(x)
            if not (self.last and i == len(self.layers) - 1):
                x = torch.relu(x)
        return x


def shard_sizes(args):
    """Per server, the sizes of its layers (the first its input's width): the layers split as
    evenly as possible."""
    sizes = layer_sizes(args)
    n = len(sizes) - 1
    bounds = [round(i * n / args.servers) for i in range(args.servers + 1)]
    return [sizes[bounds[i]: bounds[i + 1] + 1] for i in range(args.servers)]


def shard_specs(args):
    """Per server: (Shard, its layer sizes, whether it holds the last layer, its seed, whether
    it clones its weights on each call: for the pickled Python forward)."""
    return [(Shard, (sizes, i == args.servers - 1, args.seed * 100 + i, args.forward == "python"))
            for i, sizes in enumerate(shard_sizes(args))]


def forward_shards(args, shards):
    """What the trainers' forward passes call: with ``--forward native``, each shard's module as a
    ``plugin.nn.RemoteModule`` built as torch's is, without example inputs (exported on its server
    at the first forward of any trainer); else the shards' RRefs."""
    if args.forward != "native":
        return shards
    from plugin.nn import RemoteModule

    return [RemoteModule.init_from_module_rref(f"{rref.owner().name}/cpu", rref) for rref in shards]


def parameters(args):
    sizes = layer_sizes(args)
    return sum(a * b + b for a, b in zip(sizes[:-1], sizes[1:]))


def load_data(args):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.long)
    train_idx, test_idx = train_test_split(
        list(range(len(y))), test_size=0.2, random_state=args.seed, stratify=digits.target
    )
    return (x[train_idx], y[train_idx]), (x[test_idx], y[test_idx])


def forward(shards, x, predict=False, context_id=None):
    """The logits of ``x`` (N x 64 float32) through every server in turn; with the tensor bytes
    the step sends and receives: each activation, and in the backward pass its gradient (every
    server's output, and its input where that is an earlier server's output). ``shards``: what
    :func:`forward_shards` gave. ``context_id`` is not used (both forwards record the calls in the
    thread's current context)."""
    sent = 0
    for i, shard in enumerate(shards):
        y = call_shard(shard, x, predict=predict)
        sent += tensor_bytes(x, y) + tensor_bytes(y) + (tensor_bytes(x) if i > 0 else 0)
        x = y
    return x, sent


def loss(logits, y):
    return F.cross_entropy(logits, y)


def evaluate(shards, train, held_out):
    x, y = held_out
    logits, _ = forward(shards, x, predict=True)
    return {"accuracy": (logits.argmax(dim=1) == y).float().mean().item()}


def describe(args, train_size, held_out_size):
    return (f"digits: {train_size} training / {held_out_size} held-out samples; {args.trainers} trainers, "
            f"{args.servers} servers; layers {layer_sizes(args)} ({parameters(args):,} parameters)")


def epoch_summary(metrics):
    return f"held-out accuracy {metrics['accuracy']:.4f}"


def final_summary(metrics):
    return f"final held-out accuracy {metrics['accuracy']:.4f}"
