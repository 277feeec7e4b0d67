"""Run as a script (tests/optim/test_distributed_optimizer.py): a 2-worker group on loopback;
worker1 owns a 64 MiB parameter; four DistributedOptimizer(torch.optim.Adagrad) over it are
built at once from four threads (as four trainers build theirs); prints, as JSON, worker1's
resident memory (bytes) before and after, and the parameter's bytes."""
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import torch.distributed.rpc as rpc  # noqa: E402

ROWS, COLS = 1 << 19, 32  # 64 MiB of float32


def make_parameter():
    return torch.nn.Parameter(torch.randn(ROWS, COLS))


def main():
    from tests.support.cluster import Cluster
    from tests.support.graphs import resident_memory
    import plugin.optim

    with Cluster(world_size=2, num_worker_threads=8, rpc_timeout=60.0, imports=("tests.support.adagrad_memory_job", "tests.support.graphs")):
        param = rpc.remote("worker1", make_parameter)
        param.to_here()
        before = rpc.rpc_sync("worker1", resident_memory)
        optimizers, errors = [], []

        def build():
            try:
                optimizers.append(plugin.optim.DistributedOptimizer(torch.optim.Adagrad, [param], lr=0.01))
            except Exception as e:  # noqa: BLE001 (reported below)
                errors.append(repr(e))

        threads = [threading.Thread(target=build) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        after = rpc.rpc_sync("worker1", resident_memory)
        print(json.dumps({"before": before, "after": after, "param_bytes": ROWS * COLS * 4, "built": len(optimizers),
                          "errors": errors}))
        del optimizers


if __name__ == "__main__":
    main()
