"""Worker processes for `autopar sweep` and `autopar plan`: Ctrl-C and SIGTERM are the parent's.

Ctrl-C sends SIGINT to the terminal's whole process group, workers included. A worker must not
act on it (the parent stops the run, keeps what finished and terminates the workers), and above
all must not print a traceback. Ignoring SIGINT in the pool initializer is not enough: a spawned
worker spends a second or more importing numpy, scipy and OR-Tools before the initializer runs,
and a Ctrl-C in that window raised KeyboardInterrupt inside an import (seen in CI). Nor may the
parent be interrupted while it starts a worker: between its fork and the write of the pickled
process object the child is left reading an empty pipe (EOFError traceback). So while workers
start, the parent (signals_held) blocks SIGINT -- the mask is inherited through fork and exec,
a Ctrl-C stays pending in the importing child and the initializer ignores it, which discards
it, before unblocking (CPython's multiprocessing.resource_tracker starts its process the same
way) -- and defers its own SIGINT/SIGTERM handlers: a signal that arrives is noted and raised
again once the workers are started, so nothing is lost. The mask alone would not hold the parent:
a process-directed signal goes to any thread that does not block it (OpenBLAS's threads), and
CPython then runs the Python handler in the main thread whatever that thread's mask.

A worker that dies (SIGKILL, the kernel's OOM killer) breaks the whole pool: every call not yet
returned fails with BrokenProcessPool. run_in_workers still hands on the results that came
back and raises WorkerDied, which names the calls that were lost."""

from __future__ import annotations

import signal
import sys
import threading
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from multiprocessing import get_context
from typing import Any, Callable, Iterator, Sequence

from autopar.errors import AutoparError

_HELD = {signal.SIGINT}
_DEFERRED = (signal.SIGINT, signal.SIGTERM)


class WorkerDied(AutoparError, BrokenProcessPool):
    """A worker process died (killed, or out of memory) and took the pool with it; `lost` are
    the indices of the calls that returned no result (on_done ran for every other one)."""

    def __init__(self, workers: int, lost: list[int], total: int):
        self.lost = lost
        super().__init__(f"workers={workers}: a worker process died (killed or out of memory); {len(lost)} of {total} tasks got no result")


@contextmanager
def signals_held() -> Iterator[None]:
    """Inside the block SIGINT is blocked in this thread (and so in the processes it starts) and
    SIGINT/SIGTERM handlers are deferred to the block's end (main thread only: elsewhere Python
    runs no handlers)."""
    arrived: list[int] = []
    deferred = [s for s in _DEFERRED if signal.getsignal(s) is not None] if threading.current_thread() is threading.main_thread() else []
    with ExitStack() as restore:  # callbacks run last-in first-out, each even if one before it raised
        restore.callback(lambda: [signal.raise_signal(s) for s in dict.fromkeys(arrived)])
        for s in deferred:
            restore.callback(signal.signal, s, signal.signal(s, lambda signum, frame: arrived.append(signum)))
        if hasattr(signal, "pthread_sigmask"):  # first undone, while a signal would still be noted
            restore.callback(signal.pthread_sigmask, signal.SIG_SETMASK, signal.pthread_sigmask(signal.SIG_BLOCK, _HELD))
        yield


def worker_init() -> None:
    """In each worker: ignore SIGINT (discarding one held since the spawn), then unblock it; on
    Linux ask for SIGTERM when the parent dies, so no worker outlives a killed parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _HELD)
    if sys.platform.startswith("linux"):
        import ctypes

        try:
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass


def run_in_workers(fn: Callable[..., Any], calls: Sequence[tuple], workers: int,
                   on_done: Callable[[int, Any], None] | None = None) -> list[Any]:
    """fn(*calls[i]) for every i in `workers` spawned processes; results in the order of calls,
    on_done(i, result) in completion order. Submitted in the order given (put the longest first).
    Not `with ProcessPoolExecutor`: its exit waits for the running calls (30-47 s after a Ctrl-C
    in a sweep), so on any exception, the first failing call's included, the workers are killed.
    A dead worker raises WorkerDied once every call that did return has been handed on."""
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn"), initializer=worker_init)
    results: list[Any] = [None] * len(calls)
    try:
        with signals_held():  # submit() spawns the workers
            index = {pool.submit(fn, *args): i for i, args in enumerate(calls)}
        pending = set(index)
        lost: list[int] = []
        while pending:
            finished_now, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in sorted(finished_now, key=index.__getitem__):
                i = index[future]
                if isinstance(future.exception(), BrokenProcessPool):  # the pool fails every pending call at once
                    lost.append(i)
                    continue
                results[i] = future.result()
                if on_done:
                    on_done(i, results[i])
        if lost:
            raise WorkerDied(workers, sorted(lost), len(calls))
    except BaseException:
        _kill_workers(pool)
        raise
    finally:
        manager = getattr(pool, "_executor_manager_thread", None)  # shutdown() drops the reference
        pool.shutdown(wait=False, cancel_futures=True)
        _join_manager(manager)
    return results


def _join_manager(thread: threading.Thread | None, timeout_s: float = 5.0) -> None:
    """Wait (bounded) for a pool's manager thread, so that it has closed its wakeup pipe before
    the interpreter exits. CPython 3.11's exit hook (concurrent/futures/process.py _python_exit)
    writes to that pipe without the shutdown lock -- its own comment says so -- and when the
    manager thread closes the pipe in between, the exit prints an `OSError: [Errno 9] Bad file
    descriptor` traceback after our one Error line (seen in CI after a Ctrl-C of a sweep). With
    the workers finished or killed, the thread ends in milliseconds."""
    if thread is not None:
        thread.join(timeout=timeout_s)


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
