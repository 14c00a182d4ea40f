"""solvers.workers: a signal that arrives while workers are being started is held, not lost;
a worker that dies loses only the tasks that had not returned."""

import signal
import threading
from concurrent.futures.process import BrokenProcessPool

import dying_worker
import pytest

from autopar.errors import AutoparError
from solvers.workers import WorkerDied, run_in_workers, signals_held


class Stopped(BaseException):
    pass


def _raise(signum, frame):
    raise Stopped(signum)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_signal_inside_the_block_is_raised_when_it_ends(signum):
    previous = signal.signal(signum, _raise)
    try:
        reached_end = False
        with pytest.raises(Stopped):
            with signals_held():
                # to the main thread: os.kill lets the kernel hand a process signal to any thread that
                # does not block it (a BLAS or CP-SAT thread left by an earlier test), whose C handler
                # may then flag it only after the block has ended -- a race of the test, not of the code
                signal.pthread_kill(threading.main_thread().ident, signum)  # Python runs handlers between bytecodes
                for _ in range(1000):
                    pass
                reached_end = True  # the handler did not interrupt the block
        assert reached_end
        assert signal.getsignal(signum) is _raise
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # unblocked again
    finally:
        signal.signal(signum, previous)


def test_block_without_a_signal_changes_nothing():
    previous = signal.signal(signal.SIGINT, _raise)
    try:
        with signals_held():
            assert signal.SIGINT in signal.pthread_sigmask(signal.SIG_BLOCK, set())  # held for the children
        assert signal.getsignal(signal.SIGINT) is _raise
        assert signal.SIGINT not in signal.pthread_sigmask(signal.SIG_BLOCK, set())
    finally:
        signal.signal(signal.SIGINT, previous)


def test_a_dead_worker_raises_worker_died_after_the_results_that_came_back(tmp_path):
    marker = tmp_path / "a-result-came-back"
    done: dict[int, int] = {}

    def on_done(i: int, result: int) -> None:
        done[i] = result
        marker.touch()

    with pytest.raises(WorkerDied) as err:  # task 2 (x = 3) kills its worker once a result came back
        run_in_workers(dying_worker.square, [(x, str(marker)) for x in range(1, 7)], 2, on_done)
    lost = err.value.lost
    assert done and 2 in lost and sorted([*done, *lost]) == list(range(6))
    assert done == {i: (i + 1) ** 2 for i in done}
    assert isinstance(err.value, AutoparError) and isinstance(err.value, BrokenProcessPool)  # one line from the CLI; still a broken pool
    assert str(err.value) == f"workers=2: a worker process died (killed or out of memory); {len(lost)} of 6 tasks got no result"


def _manager_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if type(t).__name__ == "_ExecutorManagerThread"]


@pytest.mark.parametrize("interrupt", [False, True])
def test_no_pool_manager_thread_outlives_the_call(tmp_path, interrupt):
    """The pool's manager thread has ended (and so closed its wakeup pipe) when run_in_workers
    returns or raises -- else CPython 3.11's exit hook may write to that pipe as the thread closes
    it and print an EBADF traceback after the CLI's one Error line (CI, stop 75, a Ctrl-C'd sweep).
    `interrupt`: a Ctrl-C in the parent after the first result (on_done raises KeyboardInterrupt)."""
    def on_done(i: int, result: int) -> None:
        if interrupt:
            raise KeyboardInterrupt

    calls = [(x, str(tmp_path / "never")) for x in (1, 2, 4, 5)]  # x != 3: no worker dies
    if interrupt:
        with pytest.raises(KeyboardInterrupt):
            run_in_workers(dying_worker.square, calls, 2, on_done)
    else:
        assert run_in_workers(dying_worker.square, calls, 2, on_done) == [1, 4, 16, 25]
    assert _manager_threads() == []
