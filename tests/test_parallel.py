"""Parallel runners and parallel map: real forked processes, real failures, no leaks."""
import itertools
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import psutil
import pytest

from kerastrainer.dataflow.base import DataFlow
from kerastrainer.dataflow.parallel import (DataFlowWorkerError, MultiProcessRunner, MultiProcessRunnerZMQ,
                                            MultiThreadRunner)
from kerastrainer.dataflow.parallel_map import (MultiProcessMapData, MultiProcessMapDataZMQ,
                                                MultiThreadMapData)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Numbers(DataFlow):
    """[array filled with i, i, pid of the producing process] for i in range(n)."""

    def __init__(self, n=10, fail_at=None, sized=True, delay=0.0):
        self.n, self.fail_at, self.sized, self.delay = n, fail_at, sized, delay

    def __iter__(self):
        for i in range(self.n):
            if i == self.fail_at:
                raise KeyError(f"numbers-failure-{i}")
            if self.delay:
                time.sleep(self.delay)
            yield [np.full((30, 40), i, np.int32), i, os.getpid()]

    def __len__(self):
        if not self.sized:
            raise NotImplementedError
        return self.n


class Empty(DataFlow):
    def __iter__(self):
        return iter(())


@pytest.fixture(autouse=True)
def no_leaked_processes():
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    yield
    deadline = time.monotonic() + 5
    while True:
        left = [p for p in psutil.Process().children(recursive=True)
                if p.pid not in before and _alive(p.pid)]
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


def _alive(pid):
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def run_with_deadline(fn, seconds=30):
    """Run fn in a thread; return what it raised (or None). Fails (never hangs) if it does not end."""
    box = {}

    def target():
        try:
            fn()
        except BaseException as e:  # noqa: B902 - handed to the test
            box["exc"] = e

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(seconds)
    assert not t.is_alive(), f"{fn} did not finish within {seconds} s"
    return box.get("exc")


def check_datapoint(dp):
    arr, i, _ = dp
    assert arr.shape == (30, 40) and arr.dtype == np.int32 and (arr == i).all()


PROCESS_RUNNERS = [
    pytest.param(lambda ds, n: MultiProcessRunnerZMQ(ds, num_proc=n), id="zmq"),
    pytest.param(lambda ds, n: MultiProcessRunner(ds, num_prefetch=8, num_proc=n), id="queue"),
]
ALL_RUNNERS = PROCESS_RUNNERS + [
    pytest.param(lambda ds, n: MultiThreadRunner(lambda: ds, num_prefetch=8, num_thread=n), id="thread"),
]


@pytest.mark.parametrize("make", ALL_RUNNERS)
def test_runner_yields_len_per_pass_from_all_workers(make):
    r = make(Numbers(20), 2)
    assert len(r) == 20
    r.reset_state()
    try:
        for _ in range(3):
            dps = list(r)
            assert len(dps) == 20
            for dp in dps:
                check_datapoint(dp)
    finally:
        r.close()
        r.close()  # twice is fine


@pytest.mark.parametrize("make", PROCESS_RUNNERS)
def test_process_runner_uses_every_worker(make):
    r = make(Numbers(5), 2)
    r.reset_state()
    try:
        # until every worker was heard from (a loaded machine may start one late), within 30 s
        workers, pids, deadline = {p.pid for p in r._workers.procs}, set(), time.monotonic() + 30
        for dp in itertools.chain.from_iterable(iter(r) for _ in range(10 ** 6)):
            pids.add(dp[2])
            if pids >= workers or time.monotonic() > deadline:
                break
        assert pids == workers
        assert os.getpid() not in pids
    finally:
        r.close()


@pytest.mark.parametrize("make", ALL_RUNNERS)
def test_runner_of_unsized_dataflow_never_stops(make):
    r = make(Numbers(3, sized=False), 1)
    r.reset_state()
    try:
        got = list(itertools.islice(iter(r), 25))
        assert len(got) == 25
    finally:
        r.close()


@pytest.mark.parametrize("make", ALL_RUNNERS)
def test_worker_exception_is_reraised_with_traceback(make):
    r = make(Numbers(10, fail_at=4), 2)
    r.reset_state()
    exc = run_with_deadline(lambda: list(r))
    assert isinstance(exc, DataFlowWorkerError), exc
    msg = str(exc)
    assert "numbers-failure-4" in msg and "KeyError" in msg and "Traceback" in msg and "in __iter__" in msg
    assert "worker" in msg
    r.close()


class Unserializable(DataFlow):
    def __iter__(self):
        while True:
            yield [threading.Lock()]


@pytest.mark.parametrize("make", PROCESS_RUNNERS)
def test_unserializable_datapoint_is_reported(make):
    r = make(Unserializable(), 1)
    r.reset_state()
    exc = run_with_deadline(lambda: next(iter(r)))
    assert isinstance(exc, DataFlowWorkerError) and "lock" in str(exc).lower()
    r.close()


@pytest.mark.parametrize("make", ALL_RUNNERS)
def test_dataflow_that_yields_nothing_is_an_error_not_a_spin(make):
    r = make(Empty(), 1)
    r.reset_state()
    exc = run_with_deadline(lambda: next(iter(r)))
    assert isinstance(exc, DataFlowWorkerError) and "yielded no datapoint" in str(exc)
    r.close()


@pytest.mark.parametrize("make", PROCESS_RUNNERS)
def test_killed_worker_is_reported_with_pid_and_signal(make):
    r = make(Numbers(10 ** 9, delay=0.001), 2)
    r.reset_state()
    it = iter(r)
    next(it)
    victim = r._workers.procs[1].pid
    os.kill(victim, signal.SIGKILL)
    exc = run_with_deadline(lambda: [None for _ in it])
    assert isinstance(exc, DataFlowWorkerError), exc
    assert f"pid {victim}" in str(exc) and "SIGKILL" in str(exc)
    # the runner closed itself: the other worker is gone too
    assert not any(_alive(p.pid) for p in r._workers.procs)


@pytest.mark.parametrize("make", ALL_RUNNERS)
def test_reset_twice_and_iterate_before_reset_are_errors(make):
    r = make(Numbers(4), 1)
    with pytest.raises(RuntimeError, match="reset_state"):
        next(iter(r))
    r.reset_state()
    try:
        with pytest.raises(RuntimeError, match="already called"):
            r.reset_state()
    finally:
        r.close()
    with pytest.raises(RuntimeError, match="closed"):
        next(iter(r))


@pytest.mark.parametrize("make", ALL_RUNNERS)
def test_iterating_from_two_threads_is_an_error(make):
    r = make(Numbers(50), 1)
    r.reset_state()
    try:
        it = iter(r)
        next(it)  # this generator now holds the runner
        exc = run_with_deadline(lambda: next(iter(r)))
        assert isinstance(exc, threading.ThreadError) and "two threads" in str(exc)
        next(it)  # the first one still works
    finally:
        r.close()


class BigArrays(DataFlow):
    """Datapoints of ~1.3 MB arrays (the shared-memory path) filled with a known value."""

    def __iter__(self):
        for i in range(1000):
            yield [np.full((640, 1024), i % 251, np.uint16), np.uint8(i % 251), np.arange(3)]

    def __len__(self):
        return 1000


def check_big(dp):
    arr, v, small = dp
    assert arr.shape == (640, 1024) and arr.dtype == np.uint16 and arr[0, 0] == v and (arr == v).all()
    assert (small == np.arange(3)).all()


@pytest.mark.parametrize("shared_memory", [True, False])
def test_zmq_runner_large_arrays_stay_intact(shared_memory):
    r = MultiProcessRunnerZMQ(BigArrays(), num_proc=2, hwm=8, shared_memory=shared_memory)
    r.reset_state()
    try:
        it = iter(r)
        for _ in range(100):  # arrays dropped at once: slots are recycled
            check_big(next(it))
        held = [next(it) for _ in range(60)]  # more than all slots: the workers fall back to frames
        more = [next(it) for _ in range(40)]
        for dp in held + more:
            check_big(dp)
        if shared_memory:
            assert r._shm.maps, "large arrays should have used shared-memory slots"
            assert held[-1][0].flags.writeable
    finally:
        r.close()


def test_zmq_close_stops_workers_and_leaves_no_socket_file():
    r = MultiProcessRunnerZMQ(Numbers(10), num_proc=2)
    r.reset_state()
    next(iter(r))
    path = r.address[len("ipc://"):]
    if sys.platform.startswith("linux"):
        assert path.startswith("@")  # abstract namespace: no file even if we are killed
    else:
        assert os.path.exists(path)
    procs = list(r._workers.procs)
    r.close()
    assert not os.path.exists(path) and not os.path.exists(os.path.dirname(path))
    assert all(p.exitcode is not None for p in procs)
    r.close()


def test_zmq_runner_is_cleaned_up_when_garbage_collected():
    r = MultiProcessRunnerZMQ(Numbers(10), num_proc=1)
    r.reset_state()
    next(iter(r))
    pid = r._workers.procs[0].pid
    del r
    import gc
    gc.collect()
    assert not _alive(pid)


def test_bad_arguments_are_clear():
    with pytest.raises(ValueError, match="num_proc"):
        MultiProcessRunnerZMQ(Numbers(), num_proc=0)
    with pytest.raises(ValueError, match="num_prefetch"):
        MultiProcessRunner(Numbers(), num_prefetch=0, num_proc=1)
    with pytest.raises(TypeError, match="get_df"):
        MultiThreadRunner(Numbers(), 1, 1)
    with pytest.raises(TypeError, match="map_func"):
        MultiProcessMapDataZMQ(Numbers(), 1, map_func=3)
    with pytest.raises(ValueError, match="buffer_size"):
        MultiThreadMapData(Numbers(), 1, map_func=lambda x: x, buffer_size=0)


# --- parent death --------------------------------------------------------------

PARENT_SCRIPT = textwrap.dedent("""
    import os, sys, threading, time
    sys.path.insert(0, {repo!r})
    from kerastrainer.dataflow.base import DataFlow
    from kerastrainer.dataflow.parallel import MultiProcessRunnerZMQ, MultiProcessRunner
    from kerastrainer.dataflow.parallel_map import MultiProcessMapDataZMQ

    class Forever(DataFlow):
        def __iter__(self):
            i = 0
            while True:
                time.sleep(0.01)
                i += 1
                yield [i]

    runners = [MultiProcessRunnerZMQ(Forever(), 2), MultiProcessRunner(Forever(), 4, 1),
               MultiProcessMapDataZMQ(Forever(), 2, lambda dp: dp, buffer_size=4)]
    if sys.argv[1] == "thread":   # fork from a thread that ends: PR_SET_PDEATHSIG must not be used
        t = threading.Thread(target=lambda: [r.reset_state() for r in runners])
        t.start(); t.join()
    else:
        for r in runners:
            r.reset_state()
    for r in runners:
        next(iter(r))
    pids = [p.pid for r in runners for p in r._workers.procs]
    print("PIDS", " ".join(map(str, pids)), flush=True)
    its = [iter(r) for r in runners]
    while True:
        for it in its:
            next(it)
""")


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM", "SIGINT", "thread-SIGKILL"])
def test_workers_die_with_their_parent(how):
    mode = "thread" if how.startswith("thread") else "main"
    sig = getattr(signal, how.split("-")[-1])
    parent = subprocess.Popen([sys.executable, "-c", PARENT_SCRIPT.format(repo=REPO), mode],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = parent.stdout.readline()
        while line and not line.startswith("PIDS"):
            line = parent.stdout.readline()
        pids = [int(x) for x in line.split()[1:]]
        if len(pids) != 5:
            parent.kill()
            raise AssertionError(f"parent script failed (rc {parent.wait(10)}): {parent.stderr.read()}")
        time.sleep(0.3)  # still running after the forking thread ended
        assert all(_alive(p) for p in pids)
        parent.send_signal(sig)
        try:
            parent.wait(10)
        except subprocess.TimeoutExpired:   # say why: its traceback (a lost KeyboardInterrupt, ...)
            parent.kill()
            raise AssertionError(f"the parent did not exit within 10 s of {how}:\n{parent.stderr.read()[-3000:]}")
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [p for p in pids if _alive(p)], f"workers outlived their parent ({how})"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait(5)
        parent.stdout.close()
        parent.stderr.close()


def test_ctrl_c_landing_in_a_finalizer_still_stops_the_consumer():
    """The consumer's batches free their shared-memory slots in finalizers; Python loses a
    KeyboardInterrupt raised inside one (printed, then ignored) and the loop went on. It is
    sent again once the finalizer has returned."""
    import weakref

    class Garbage:
        pass

    runner = MultiProcessRunnerZMQ(Numbers(n=1000), num_proc=2)
    runner.reset_state()
    got = 0
    try:
        with pytest.raises(KeyboardInterrupt):
            for got, dp in enumerate(runner):
                if got == 5:
                    g = Garbage()
                    weakref.finalize(g, signal.raise_signal, signal.SIGINT)
                    del g   # the handler runs inside the finalizer
                time.sleep(0.001)
        assert got < 50   # stopped about where the signal came, not at the end of the data
    finally:
        runner.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


# --- parallel map -----------------------------------------------------------------

def drop_multiples_of_three(dp):
    if dp[1] % 3 == 0:
        return None
    return [dp[0] * 2, dp[1], os.getpid()]


def fail_on_seven(dp):
    if dp[1] == 7:
        raise ValueError("map-failure-seven")
    return dp


MAPPERS = [
    pytest.param(lambda ds, f, **kw: MultiProcessMapDataZMQ(ds, 2, f, **kw), id="process"),
    pytest.param(lambda ds, f, **kw: MultiThreadMapData(ds, 2, f, **kw), id="thread"),
]


@pytest.mark.parametrize("make", MAPPERS)
@pytest.mark.parametrize("n,buffer_size", [(30, 4), (30, 200), (7, 3), (0, 5)])
def test_strict_map_yields_each_input_once_per_pass(make, n, buffer_size):
    ds = make(Numbers(n), drop_multiples_of_three, buffer_size=buffer_size, strict=True)
    ds.reset_state()
    try:
        for _ in range(3):
            out = list(ds)
            assert sorted(dp[1] for dp in out) == [i for i in range(n) if i % 3]
            for arr, i, _ in out:
                assert (arr == 2 * i).all()
    finally:
        ds.close()


@pytest.mark.parametrize("make", MAPPERS)
@pytest.mark.parametrize("n,buffer_size", [(40, 8), (5, 50)])
def test_non_strict_map_yields_one_output_per_input(make, n, buffer_size):
    ds = make(Numbers(n), lambda dp: [dp[1]], buffer_size=buffer_size)
    ds.reset_state()
    try:
        outs = [sorted(x[0] for x in ds) for _ in range(4)]
        assert all(len(o) == n for o in outs)
        # over several passes every input comes out; each value at most (passes + 1) times
        flat = [v for o in outs for v in o]
        assert set(flat) == set(range(n))
    finally:
        ds.close()


def test_process_map_runs_in_workers_and_balances():
    ds = MultiProcessMapData(Numbers(60), 2, drop_multiples_of_three, buffer_size=10, strict=True)
    ds.reset_state()
    try:
        pids = {dp[2] for dp in ds}
        assert len(pids) == 2 and os.getpid() not in pids
    finally:
        ds.close()


@pytest.mark.parametrize("strict", [True, False])
@pytest.mark.parametrize("make", MAPPERS)
def test_map_exception_is_reraised_with_traceback(make, strict):
    ds = make(Numbers(50), fail_on_seven, strict=strict)
    ds.reset_state()
    # non-strict: the failure may surface in the next pass (outputs of passes overlap)
    exc = run_with_deadline(lambda: [list(ds) for _ in range(1 if strict else 3)])
    assert isinstance(exc, DataFlowWorkerError), exc
    assert "map-failure-seven" in str(exc) and "fail_on_seven" in str(exc)
    ds.close()


def test_map_killed_worker_is_reported():
    ds = MultiProcessMapDataZMQ(Numbers(10 ** 9), 2, lambda dp: dp, buffer_size=20)
    ds.reset_state()
    it = iter(ds)
    next(it)
    victim = ds._workers.procs[0].pid
    os.kill(victim, signal.SIGKILL)
    exc = run_with_deadline(lambda: [None for _ in it])
    assert isinstance(exc, DataFlowWorkerError) and f"pid {victim}" in str(exc) and "SIGKILL" in str(exc)
    ds.close()


@pytest.mark.parametrize("make", MAPPERS)
def test_map_reset_twice_and_two_threads_are_errors(make):
    ds = make(Numbers(100), lambda dp: dp, buffer_size=4)
    ds.reset_state()
    try:
        with pytest.raises(RuntimeError, match="already called"):
            ds.reset_state()
        it = iter(ds)
        next(it)
        exc = run_with_deadline(lambda: next(iter(ds)))
        assert isinstance(exc, threading.ThreadError)
    finally:
        ds.close()
        ds.close()


def test_strict_pass_abandoned_half_way_does_not_leak_into_the_next():
    ds = MultiProcessMapDataZMQ(Numbers(30), 2, lambda dp: [dp[1]], buffer_size=10, strict=True)
    ds.reset_state()
    try:
        it = iter(ds)
        for _ in range(3):
            next(it)
        it.close()
        assert sorted(x[0] for x in ds) == list(range(30))
    finally:
        ds.close()


def test_modules_do_not_import_tensorflow():
    code = ("import sys; sys.path.insert(0, %r)\n"
            "import kerastrainer.dataflow.parallel, kerastrainer.dataflow.parallel_map\n"
            "import kerastrainer.dataflow.remote, kerastrainer.dataflow.wire, kerastrainer.utils.concurrency\n"
            "assert 'tensorflow' not in sys.modules, 'tensorflow was imported'\n" % REPO)
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --- the local sockets take only their own workers' messages --------------------

def _send_garbage(address, router=False, hello=False):
    """What another local process could send to a runner's socket (as the same user).

    Returns a function that disconnects: call it after reading on (zmq may drop what a
    peer sent if it disconnects while the receiver's HWM holds the rest back).
    """
    import zmq
    from kerastrainer.dataflow import wire
    ctx = zmq.Context()
    s = ctx.socket(zmq.DEALER if router else zmq.PUSH)

    def disconnect():
        s.close(linger=2000)
        ctx.term()
    try:
        s.connect(address)
        s.send(os.urandom(100))
        s.send_multipart([b"KTERR", b"\x81\xa5owner\xa4fake"])        # a forged worker error
        s.send_multipart([b"KTS1" + os.urandom(14), b"x"])            # a forged shared-memory slot
        s.send_multipart(wire.dumps_frames([np.zeros((30, 40), np.int32), -1, 0]))
        if hello:
            s.send_multipart([b"H", (0).to_bytes(8, "little")])       # a forged worker HELLO
        s.send_multipart([b"D", (1).to_bytes(8, "little")] + wire.dumps_frames(["forged"]))
    except BaseException:
        disconnect()
        raise
    return disconnect


def test_zmq_runner_drops_messages_from_other_processes():
    r = MultiProcessRunnerZMQ(Numbers(20, delay=0.01, sized=False), num_proc=1, hwm=4)
    r.reset_state()
    try:
        it = iter(r)
        check_datapoint(next(it))
        disconnect = _send_garbage(r.address)
        got = []
        while r.num_malformed < 5 and len(got) < 2000:
            got.append(next(it))
        disconnect()
        for dp in got:
            check_datapoint(dp)
        assert all(dp[1] >= 0 for dp in got)
        assert r.num_malformed == 5
    finally:
        r.close()


@pytest.mark.parametrize("strict", [True, False])
def test_process_map_drops_messages_from_other_processes(strict):
    ds = MultiProcessMapDataZMQ(Numbers(30, delay=0.005), 2, lambda dp: dp, buffer_size=4, strict=strict)
    ds.reset_state()
    try:
        first = list(ds)
        disconnect = _send_garbage(ds.address, router=True, hello=True)
        second = list(ds)
        disconnect()
        for dp in first + second:
            check_datapoint(dp)
        assert sorted(dp[1] for dp in first + second) == sorted(list(range(30)) * 2)
        assert ds.num_malformed == 6
    finally:
        ds.close()


class Huge(DataFlow):
    def __iter__(self):
        while True:
            yield [np.zeros(200 << 10, np.uint8)]


def test_worker_datapoint_over_the_message_limit_is_a_clear_error():
    r = MultiProcessRunnerZMQ(Huge(), num_proc=1, shared_memory=False, max_message_bytes=64 << 10)
    r.reset_state()
    exc = run_with_deadline(lambda: next(iter(r)))
    assert isinstance(exc, DataFlowWorkerError) and "max_message_bytes=65536" in str(exc), exc
    r.close()
    ds = MultiProcessMapDataZMQ(Numbers(5), 1, lambda dp: [np.zeros(200 << 10, np.uint8)],
                                max_message_bytes=64 << 10)
    ds.reset_state()
    exc = run_with_deadline(lambda: list(ds))
    assert isinstance(exc, DataFlowWorkerError) and "max_message_bytes" in str(exc), exc
    ds.close()
    with pytest.raises(ValueError, match="max_message_bytes"):
        MultiProcessRunnerZMQ(Numbers(), max_message_bytes=1)


def test_workers_use_opencv_after_the_parent_used_its_thread_pool():
    # a child forked while OpenCV's pool had threads hung in its first parallel call
    pytest.importorskip("cv2")
    prog = textwrap.dedent("""
        import cv2, numpy as np
        from kerastrainer.dataflow import DataFlow, MultiProcessRunnerZMQ
        img = np.random.RandomState(0).randint(0, 255, (2000, 2000, 3)).astype(np.uint8)
        threads = cv2.getNumThreads()
        for _ in range(3):
            cv2.resize(img, (1000, 1000)); cv2.GaussianBlur(img, (5, 5), 1)

        class Blur(DataFlow):
            def __iter__(self):
                for _ in range(2):
                    yield [cv2.GaussianBlur(cv2.resize(img, (600, 600)), (5, 5), 1).mean()]

        for _ in range(3):  # the hang was a race: it struck about every other fork
            ds = MultiProcessRunnerZMQ(Blur(), num_proc=2)
            ds.reset_state()
            out = [dp for _, dp in zip(range(4), ds)]
            ds.close()
            assert len(out) == 4 and cv2.getNumThreads() == threads
            cv2.resize(img, (1000, 1000))  # the parent's pool works again
        print("OK")
    """)
    r = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-2000:]



def _huge_page_advice() -> bool:
    """Whether numpy advises huge pages for its large arrays in this process."""
    from numpy._core import multiarray
    before = multiarray._set_madvise_hugepage(False)
    multiarray._set_madvise_hugepage(before)   # read it without changing it
    return bool(before)


class HugePageAdvice(DataFlow):
    def __iter__(self):
        while True:
            yield [np.array(_huge_page_advice())]


@pytest.mark.parametrize("make", PROCESS_RUNNERS + [
    pytest.param(lambda ds, n: MultiProcessMapDataZMQ(Numbers(10 ** 6), n, lambda dp: [np.array(_huge_page_advice())]),
                 id="zmq-map")])
def test_workers_make_batches_without_huge_pages(make):
    # numpy's huge-page advice made the kernel zero fresh 2 MiB pages for every batch a worker
    # built and dropped; the workers turn it off, the parent keeps its own setting
    multiarray = pytest.importorskip("numpy._core.multiarray")
    parent = multiarray._set_madvise_hugepage(True)
    try:
        r = make(HugePageAdvice(), 2)
        r.reset_state()
        try:
            flags = [bool(dp[0]) for _, dp in zip(range(6), r)]
        finally:
            r.close()
        assert flags == [False] * 6
        assert _huge_page_advice() is True
    finally:
        multiarray._set_madvise_hugepage(parent)
