"""The threads the benchmarks start on a worker to compete for its GIL, written once
(scripts/bench_gil.py, scripts/bench_remote_forward.py). One runs at a time per process;
:func:`stop_gil_thread` stops it. Started and stopped by RPC on the worker (the benchmark's
folder is on its ``sys.path``)."""
import ctypes
import threading

_RUNNING = {}


def _start(loop) -> None:
    stop_gil_thread()
    stop = threading.Event()
    thread = threading.Thread(target=loop, args=(stop,), daemon=True)
    thread.start()
    _RUNNING["stop"], _RUNNING["thread"] = stop, thread


def start_spinner() -> None:
    """A pure-Python busy loop: it holds the GIL except when the interpreter hands it over
    (every 5 ms by default, ``sys.getswitchinterval()``)."""
    def spin(stop):
        x = 0
        while not stop.is_set():
            x += 1

    _start(spin)


def start_gil_holder(hold_us: int = 20_000) -> None:
    """A thread that holds the GIL nearly all the time: ``usleep(hold_us)`` (microseconds)
    through ``ctypes.PyDLL``, which does not release the GIL during the call, in a loop (between
    two calls the interpreter may hand the GIL over once)."""
    usleep = ctypes.PyDLL(None).usleep

    def hold(stop):
        while not stop.is_set():
            usleep(hold_us)

    _start(hold)


def stop_gil_thread() -> None:
    """Stops the thread :func:`start_spinner` or :func:`start_gil_holder` started (if any) and
    waits for it."""
    if "stop" in _RUNNING:
        _RUNNING.pop("stop").set()
        _RUNNING.pop("thread").join()
