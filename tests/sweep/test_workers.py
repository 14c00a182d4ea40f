"""solvers.workers: a signal that arrives while workers are being started is held, not lost."""

import signal
import threading

import pytest

from solvers.workers import signals_held


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
