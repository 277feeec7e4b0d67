"""The main job, scripts/train.py, run as users run it: a separate process tree per job.

Small configurations (a narrow model, few epochs) keep each job to seconds; the default
job's size is exercised by scripts/bench_mainjob.py, not here.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
from tests.support import REPO

TRAIN = os.path.join(REPO, "scripts", "train.py")
TINY = ["--hidden", "32", "--batch-size", "32"]


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = REPO + os.pathsep + e.get("PYTHONPATH", "")
    return e


def outputs(tmp_path, tag="run"):
    return ["--metrics-out", str(tmp_path / f"{tag}.json"), "--plot-out", str(tmp_path / f"{tag}.png")]


def run_job(args, timeout=240, **kw):
    return subprocess.run([sys.executable, TRAIN, *args], env=env(), cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, **kw)


def children(pid):
    """Pids of the live processes whose parent is ``pid``."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(entry))
    return out


def descendants(pid):
    """Pids of the live processes below ``pid`` (torchrun starts its workers in sessions of
    their own, so killing torchrun's process group leaves them)."""
    out, todo = [], [pid]
    while todo:
        kids = children(todo.pop())
        out += kids
        todo += kids
    return out


def kill_tree(proc):
    """SIGKILL to ``proc`` and everything below it, when it is still running."""
    if proc.poll() is None:
        for pid in descendants(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.parametrize("stack", [
    "plugin",
    # torch 2.13's torch.distributed.optim scripts its functional optimizers at import
    pytest.param("torch", marks=pytest.mark.torchscript),
])
def test_the_job_trains_and_writes_its_metrics(tmp_path, stack):
    """A small job per stack: a progress line per epoch, metrics with the top-level keys, the plot;
    both stacks learn the digits (held-out accuracy well above chance, 0.1). The trainers step
    asynchronously, so a run's accuracy varies: after 4 epochs it ranged 0.72 to 0.86 over
    runs, after 8 (taken here) 0.89 to 0.92."""
    r = run_job(TINY + ["--epochs", "8", "--stack", stack, "--lr", "3e-3"] + outputs(tmp_path, stack))
    assert r.returncode == 0, r.stdout + r.stderr
    assert [line.split()[1] for line in r.stdout.splitlines() if line.startswith("epoch")] == [
        f"{k}/8" for k in range(1, 9)]
    with open(tmp_path / f"{stack}.json") as f:
        m = json.load(f)
    assert m["accuracy"] == m["epochs"][-1]["accuracy"] > 0.8, (stack, m["epochs"])
    assert m["samples_per_s"] > 0 and m["config"]["stack"] == stack and m["config"]["trainers"] == 4
    assert sum(e["samples"] for e in m["epochs"]) == 8 * m["train_samples"]
    if _has_matplotlib():
        assert (tmp_path / f"{stack}.png").stat().st_size > 0


def checkout_state():
    """``git status`` of the checkout (untracked files listed one by one) and the hash of each
    file it names, so that a file modified before and rewritten since counts as a change; None
    where the tests do not run in a git checkout."""
    def git(*a):
        return subprocess.run(["git", "-C", REPO, *a], capture_output=True, text=True, timeout=60)

    if shutil.which("git") is None or git("rev-parse", "--git-dir").returncode != 0:
        return None
    status = git("status", "--porcelain", "--untracked-files=all").stdout.splitlines()
    paths = [line[3:] for line in status if os.path.isfile(os.path.join(REPO, line[3:]))]
    hashes = git("hash-object", "--", *paths).stdout.split() if paths else []
    return status, dict(zip(paths, hashes))


def test_a_run_with_the_default_outputs_leaves_the_checkout_clean():
    """Without --metrics-out and --plot-out (as `bash scripts/run_main.sh` runs it) the job writes
    its metrics and loss curve into a new folder under runs/, which git ignores, and names both
    files at the end: the checkout's git status, and every file it lists, are what they were."""
    before = checkout_state()
    if before is None:
        pytest.skip("not a git checkout (or no git)")
    r = run_job(TINY + ["--epochs", "1"])
    assert r.returncode == 0, r.stdout + r.stderr
    written = r.stdout.strip().splitlines()[-1].rpartition("; wrote ")[2].split(", ")
    folder = os.path.dirname(os.path.join(REPO, written[0]))
    in_runs = os.path.dirname(folder) == os.path.join(REPO, "runs")
    try:
        assert checkout_state() == before, written
        assert in_runs and os.path.basename(folder).startswith("digits-plugin-"), written
        assert [os.path.basename(p) for p in written] == (["metrics.json", "loss.png"] if _has_matplotlib()
                                                           else ["metrics.json"]), written
        with open(os.path.join(REPO, written[0])) as f:
            assert json.load(f)["config"]["metrics_out"] == os.path.join(folder, "metrics.json")
    finally:
        if in_runs:  # the run's own folder, nothing else
            shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.parametrize("stack,extra", [
    ("plugin", []),
    ("plugin", ["--sync-step"]),
    # torch 2.13's torch.distributed.optim scripts its functional optimizers at import
    pytest.param("torch", [], marks=pytest.mark.torchscript),
], ids=["plugin", "plugin-sync-step", "torch"])
def test_profile_writes_each_workers_phases_and_cpu_seconds(tmp_path, stack, extra):
    """--profile on both stacks: every worker is listed with its role; each trainer's phases
    add up to its batch time, which is within the measured epochs' seconds; the servers spent
    CPU on torch's RPC threads (torch's, time in the Python forward function; the plugin's
    answer forwards natively, with none to time); the plugin's step overlaps
    (a wait for the previous update is recorded) unless --sync-step."""
    folder = tmp_path / f"{stack}{len(extra)}"
    r = run_job(TINY + ["--epochs", "3", "--stack", stack, "--profile", str(folder), *extra]
                + outputs(tmp_path, stack))
    assert r.returncode == 0, r.stdout + r.stderr
    with open(folder / "profile.json") as f:
        p = json.load(f)
    assert p["stack"] == stack and p["epochs"] == [2, 3] and p["perf"] is None
    assert p["samples"] == 2 * 1437 and p["samples_per_s"] > 0
    workers = p["workers"]
    assert sorted(workers) == ["server0", "server1", "trainer0", "trainer1", "trainer2", "trainer3"]
    for name, w in workers.items():
        assert w["role"] == name.rstrip("0123456789") and w["pid"] > 0 and w["process_cpu"] > 0, (name, w)
        t = w["timers"]
        if w["role"] == "trainer":
            phases = ["forward RPC to server0", "forward RPC to server1", "trainer loss", "trainer backward",
                      "trainer step", "trainer other (batch, context, bookkeeping)"]
            assert all(t[k] > 0 for k in phases), t
            # (the forward timers leave out the Python between the two RPCs)
            assert 0.97 * t["trainer batch total"] <= sum(t[k] for k in phases) <= t["trainer batch total"], t
            assert t["trainer batch total"] <= p["training_seconds"] * 1.05
            waited = "trainer step: of which waiting for the previous update"
            assert (waited in t) == (stack == "plugin" and not extra), t
            assert t.get(waited, 0.0) <= t["trainer step"]
        else:
            # the plugin's servers answer forwards natively (RemoteModule: no Python function to
            # time); torch's run the pickled Python forward
            assert w["cpu_by_thread"]["pt_thread_pool"] > 0, w
            assert ("server forward (in the Python function)" in t) == (stack == "torch"), t
            assert t.get("server forward (in the Python function)", 1.0) > 0, t


def test_profile_sorts_perf_call_stacks():
    """scripts/profile_mainjob.py's rules on call stacks seen in perf's output (innermost first)."""
    sys.path.insert(0, os.path.join(REPO, "scripts"))
    try:
        import profile_mainjob as pm
    finally:
        sys.path.pop(0)
    adam = ["at::native::(anonymous namespace)::fused_adam_kernel (libtorch_cpu.so)",
            "torch::jit::InterpreterStateImpl::runTemplate<false> (libtorch_cpu.so)"]
    assert pm.classify(adam) == ("optimizer step", "compute kernels")
    engine = ["pthread_cond_signal (libc.so.6)", "c10::ThreadPool::run (libc10.so)",
              "gilfree_rpc::Engine::deliver (_C.so)", "torch::jit::InterpreterStateImpl::runTemplate<false> (x)"]
    assert pm.classify(engine) == ("backward pass", "thread wake-ups and sleeps")
    udf = ["take_gil (libpython3.11.so)", "PyEval_RestoreThread (libpython3.11.so)",
           "_PyEval_EvalFrameDefault (libpython3.11.so)",
           "torch::distributed::rpc::RequestCallbackImpl::processPythonCall (libtorch_python.so)"]
    assert pm.classify(udf) == ("Python code (servers: the forward function; trainers: the loop, RPC calls)", "GIL hand-over")
    assert pm.classify(["mkl_blas_avx512_sgemm_kernel_0 (libtorch_cpu.so)"])[0].startswith("matrix products")
    assert pm.classify(["uv__io_poll (libtorch_cpu.so)", "uv_run (libtorch_cpu.so)"]) == (
        "RPC transport (TensorPipe)", "other")


def _has_matplotlib():
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.mark.parametrize("how", ["SIGINT to the process group (Ctrl-C)", "SIGTERM to the launcher"])
def test_a_signal_ends_every_worker(tmp_path, how):
    """SIGINT or SIGTERM to the launching process mid-run: every process it started is gone
    within 30 s (a few seconds on a quiet machine), it prints one line naming the signal and
    exits with 128 + the signal."""
    sig = signal.SIGINT if how.startswith("SIGINT") else signal.SIGTERM
    # stderr to a file, which the job can never fill (a pipe nobody reads until the end would
    # block any process of the job that writes 64 KB to it, the launcher's last line included)
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "w") as err_file:
        proc = subprocess.Popen([sys.executable, TRAIN, *TINY, "--epochs", "100000", *outputs(tmp_path)], env=env(),
                                cwd=REPO, stdout=subprocess.PIPE, stderr=err_file, text=True, start_new_session=True)
    try:
        # (start-up alone is 6 processes importing torch and 2 exports of the servers' modules:
        # about 15 s on a quiet 2-core machine, minutes under CI's load)
        deadline = time.monotonic() + 400
        line = ""
        for line in proc.stdout:  # training has started when the first epoch ends
            if line.startswith("epoch") or time.monotonic() > deadline:
                break
        if not line.startswith("epoch"):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            raise AssertionError(f"the job did not start training (exit code {proc.returncode}):\n{line}"
                                 f"{err_path.read_text()}")
        workers = children(proc.pid)
        assert len(workers) >= 6, workers  # 6 workers (and multiprocessing's resource tracker)
        sent = time.monotonic()
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        # (a few seconds on a quiet machine; CI's load, two test files at a time on 2 cores, has
        # taken longer: the bound is 30 s, and a launcher still running then shows its stacks)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGUSR1)  # faulthandler: every thread's stack, to stderr
            time.sleep(2)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=60)
            raise AssertionError(f"the launcher did not exit within 30 s of {sig.name}:\n{err_path.read_text()}")
        while any(alive(w) for w in workers) and time.monotonic() - sent < 30:
            time.sleep(0.1)
        assert not [w for w in workers if alive(w)], "workers outlived the launcher by 30 s"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    err = err_path.read_text()
    assert code == 128 + sig, (code, err)
    assert err.strip().splitlines() == [f"train.py: stopped by {sig.name}; ended 6 worker processes"], err


def test_workers_die_with_a_killed_launcher(tmp_path):
    """SIGKILL to the launching process (no handler runs): the workers end anyway."""
    proc = subprocess.Popen([sys.executable, TRAIN, *TINY, "--epochs", "100000", *outputs(tmp_path)], env=env(),
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    workers = []
    try:
        deadline = time.monotonic() + 180
        for line in proc.stdout:
            if line.startswith("digits") or time.monotonic() > deadline:
                break
        workers = children(proc.pid)
        assert len(workers) >= 6, workers
        proc.kill()
        proc.wait()
        end = time.monotonic() + 10
        while any(alive(w) for w in workers) and time.monotonic() < end:
            time.sleep(0.1)
        assert not [w for w in workers if alive(w)]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for w in workers:
            if alive(w):
                os.kill(w, signal.SIGKILL)


# --- two hosts: two network namespaces joined by a veth pair ---------------------------------------


def _ip(*args, check=True):
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30, check=check)


@pytest.fixture
def two_hosts():
    """Two network namespaces, each a host with its own address on a veth pair between them
    (10.77.0.1/24 and 10.77.0.2/24, private, reachable only from each other); removed after."""
    import shutil

    if not sys.platform.startswith("linux"):
        pytest.skip("network namespaces are Linux's")
    if shutil.which("ip") is None:
        pytest.skip("the `ip` command (iproute2) is not installed")
    if os.geteuid() != 0:
        pytest.skip("creating network namespaces needs root")
    tag = f"{os.getpid() % 100000}"
    hosts = [f"gfh{tag}a", f"gfh{tag}b"]
    links = [f"gfv{tag}a", f"gfv{tag}b"]
    made = []
    try:
        for ns in hosts:
            r = _ip("netns", "add", ns, check=False)
            if r.returncode != 0:
                pytest.skip(f"`ip netns add` failed: {r.stderr.strip()}")
            made.append(ns)
        _ip("link", "add", links[0], "type", "veth", "peer", "name", links[1])
        for i, (ns, link) in enumerate(zip(hosts, links)):
            _ip("link", "set", link, "netns", ns)
            _ip("-n", ns, "addr", "add", f"10.77.0.{i + 1}/24", "dev", link)
            _ip("-n", ns, "link", "set", link, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield [(ns, f"10.77.0.{i + 1}", link) for i, (ns, link) in enumerate(zip(hosts, links))]
    finally:
        for ns in made:  # deleting a namespace deletes the veth end inside it, and so the pair
            _ip("netns", "delete", ns, check=False)


def test_the_job_trains_across_two_hosts_under_torchrun(tmp_path, two_hosts):
    """torchrun on each host, --nnodes=2 --master-addr=<host 0's address>: the job trains.
    Nothing tells TensorPipe which interface to use (TP_SOCKET_IFNAME unset): init_rpc picks
    the one that routes to the master."""
    (ns0, addr0, link0), (ns1, _, link1) = two_hosts
    e = env()
    e.pop("TP_SOCKET_IFNAME", None)
    e.pop("GLOO_SOCKET_IFNAME", None)
    for ns, link in ((ns0, link0), (ns1, link1)):  # each host's interface toward host 0
        probe = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c",
                                f"from plugin.rpc import _interface_toward; print(_interface_toward({addr0!r}))"],
                               env=e, cwd=REPO, capture_output=True, text=True, timeout=60)
        assert probe.stdout.strip() == link, probe.stdout + probe.stderr
    procs = []
    for rank, ns in enumerate((ns0, ns1)):
        cmd = ["ip", "netns", "exec", ns, sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
               f"--node-rank={rank}", "--nproc-per-node=2", f"--master-addr={addr0}", "--master-port=29517",
               TRAIN, *TINY, "--epochs", "3", "--lr", "3e-3", *outputs(tmp_path, f"host{rank}")]
        procs.append(subprocess.Popen(cmd, env=e, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True, start_new_session=True))
    try:
        deadline = time.monotonic() + 240
        # a host that fails leaves the other waiting for it: stop at the first failure
        while time.monotonic() < deadline and not all(p.poll() == 0 for p in procs):
            if any(p.poll() not in (None, 0) for p in procs):
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            kill_tree(p)
    out = [p.stdout.read() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(out)
    with open(tmp_path / "host0.json") as f:  # written by trainer0, rank 0, on host 0
        m = json.load(f)
    assert m["config"]["trainers"] == 2 and m["config"]["servers"] == 2
    assert m["accuracy"] > 0.8, m["epochs"]


# --- checkpoints -----------------------------------------------------------------------------------

DETERMINISTIC = ["--hidden", "32", "--batch-size", "128", "--trainers", "2", "--deterministic", "--lr", "3e-3"]


def load_checkpoint(folder):
    """The last checkpoint in ``folder``: its job.json and each server's DCP checkpoint, read back
    with torch.distributed.checkpoint itself (flat: ``{fqn: value}``)."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemReader
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    with open(os.path.join(folder, "latest")) as f:
        path = os.path.join(folder, f.read().strip())
    with open(os.path.join(path, "job.json")) as f:
        out = json.load(f)
    out["servers"] = []
    for server in sorted(d for d in os.listdir(path) if d.startswith("server")):
        reader = FileSystemReader(os.path.join(path, server))
        metadata = reader.read_metadata()
        flat = {k: torch.empty(m.size, dtype=m.properties.dtype) if isinstance(m, TensorStorageMetadata) else None
                for k, m in metadata.state_dict_metadata.items()}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            dcp.load(flat, checkpoint_id=os.path.join(path, server), no_dist=True)
        out["servers"].append(flat)
    return out


def assert_same_checkpoint(a, b):
    """Every server's shard and optimizer state in ``a`` and ``b`` equal, exactly."""
    import torch

    assert a["epochs_done"] == b["epochs_done"]
    assert len(a["servers"]) == len(b["servers"]) >= 2
    for server_a, server_b in zip(a["servers"], b["servers"], strict=True):
        assert server_a.keys() == server_b.keys()
        assert any(k.startswith("model.") for k in server_a) and any(k.startswith("optimizer.trainer1.state.") for k in server_a)
        for k in server_a:
            if isinstance(server_a[k], torch.Tensor):
                assert torch.equal(server_a[k], server_b[k]), k
            else:
                assert server_a[k] == server_b[k], k
    assert [e["loss"] for e in a["history"]] == [e["loss"] for e in b["history"]]


def test_a_resumed_run_equals_an_uninterrupted_run(tmp_path):
    """3 epochs in one run against 1 epoch, then a second start with the same folder for the
    other 2 (with a half-written folder left beside the checkpoint, as a crash in the middle of
    a save leaves it): the same parameters and optimizer state on every server, exactly (read
    back with torch.distributed.checkpoint). A job with other settings refuses the checkpoint."""
    whole, split = tmp_path / "whole", tmp_path / "split"
    r = run_job(DETERMINISTIC + ["--epochs", "3", "--checkpoint-dir", str(whole)] + outputs(tmp_path, "whole"))
    assert r.returncode == 0, r.stdout + r.stderr
    r = run_job(DETERMINISTIC + ["--epochs", "1", "--checkpoint-dir", str(split)] + outputs(tmp_path, "split1"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert load_checkpoint(split)["epochs_done"] == 1
    os.makedirs(split / "epoch-2.tmp-12345" / "server0")
    with open(split / "epoch-2.tmp-12345" / "server0" / "__0_0.distcp", "wb") as f:
        f.write(b"half a checkpoint")
    r = run_job(DETERMINISTIC + ["--epochs", "3", "--checkpoint-dir", str(split)] + outputs(tmp_path, "split2"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert f"resumed from {split / 'epoch-1'} after epoch 1" in r.stdout
    assert [line.split()[1] for line in r.stdout.splitlines() if line.startswith("epoch")] == ["2/3", "3/3"]
    assert sorted(os.listdir(split)) == ["epoch-3", "latest"]

    a, b = load_checkpoint(whole), load_checkpoint(split)
    assert a["epochs_done"] == 3
    assert_same_checkpoint(a, b)

    # a checkpoint of another job (another learning rate) is refused, and left as it is
    r = run_job(DETERMINISTIC[:-1] + ["1e-2", "--epochs", "4", "--checkpoint-dir", str(split)] + outputs(tmp_path, "x"))
    assert r.returncode != 0
    assert "was saved by another job (--lr 0.003 there, 0.01 here)" in r.stdout + r.stderr
    assert load_checkpoint(split)["epochs_done"] == 3


def test_an_auth_key_file_changes_nothing_but_the_transport(tmp_path):
    """--auth-key-file (issue 21): the job trains over the authenticating transport to exactly the
    parameters and optimizer state of the same job without a key; a key file that is missing or
    too short is refused before any worker starts, naming the option."""
    key = tmp_path / "job.key"
    key.write_text(os.urandom(32).hex() + "\n")
    key.chmod(0o600)
    runs = {}
    for tag, extra in (("keyed", ["--auth-key-file", str(key)]), ("plain", [])):
        r = run_job(DETERMINISTIC + ["--epochs", "2", "--checkpoint-dir", str(tmp_path / tag)] + extra
                    + outputs(tmp_path, tag))
        assert r.returncode == 0, r.stdout + r.stderr
        runs[tag] = load_checkpoint(tmp_path / tag)
    assert runs["keyed"]["epochs_done"] == 2
    assert_same_checkpoint(runs["keyed"], runs["plain"])

    short = tmp_path / "short.key"
    short.write_text("abc\n")
    for path, expected in ((short, "has 3 bytes; at least 16 are needed"), (tmp_path / "none", "No such file")):
        r = run_job(TINY + ["--auth-key-file", str(path)] + outputs(tmp_path, "refused"), timeout=60)
        assert r.returncode == 2 and "--auth-key-file" in r.stderr and expected in r.stderr, r.stderr


def test_torchrun_restarts_the_group_after_a_server_is_killed_and_the_job_resumes(tmp_path):
    """torchrun --max-restarts=1; SIGKILL to server0 after the second epoch: torchrun restarts
    every worker, the job resumes from its last checkpoint and finishes, accuracy >= 0.90."""
    folder = tmp_path / "ckpt"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=4", "--max-restarts=1",
           "--monitor-interval=0.5", TRAIN, "--hidden", "64", "--batch-size", "32", "--lr", "3e-3", "--epochs", "6",
           "--checkpoint-dir", str(folder), *outputs(tmp_path)]
    proc = subprocess.Popen(cmd, env=env(), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    lines, killed = [], None
    try:
        deadline = time.monotonic() + 240
        for line in proc.stdout:
            lines.append(line)
            if killed is None and line.startswith("epoch  2/"):
                for pid in children(proc.pid):  # torchrun's workers; server0 is rank 1
                    try:
                        with open(f"/proc/{pid}/environ", "rb") as f:
                            environ = f.read().split(b"\0")
                    except OSError:
                        continue
                    if b"RANK=1" in environ:
                        os.kill(pid, signal.SIGKILL)
                        killed = pid
            if time.monotonic() > deadline:
                break
        code = proc.wait(timeout=30)
    finally:
        kill_tree(proc)
    out = "".join(lines)
    assert killed is not None, out
    assert code == 0, out
    assert "resumed from" in out, out
    with open(tmp_path / "run.json") as f:
        m = json.load(f)
    assert m["resumed_after_epoch"] >= 1 and len(m["epochs"]) == 6
    assert m["accuracy"] >= 0.90, m["epochs"]
