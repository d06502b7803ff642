"""One training per log directory: the lock file, with real processes."""
import json
import os
import socket
import subprocess
import sys
import textwrap
import time

import pytest

from kerastrainer.utils import logger
from kerastrainer.utils.dirlock import LogDirLock, LogDirLockedError

HOLD = textwrap.dedent("""
    import sys, time
    from kerastrainer.utils import logger
    logger.set_logger_dir(sys.argv[1], action='k')
    print('LOCKED', flush=True)
    time.sleep(60)
""")


@pytest.fixture
def holder(tmp_path):
    """A process holding tmp_path/run's lock through set_logger_dir."""
    d = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-c", HOLD, str(d)], stdout=subprocess.PIPE, text=True)
    try:
        for line in p.stdout:  # the logger's own lines come first
            if line.strip() == "LOCKED":
                break
        else:
            pytest.fail("the holder process did not take the lock")
        yield str(d), p
    finally:
        p.kill()
        p.wait()


def test_second_run_in_the_directory_stops_naming_the_holder(holder, logdir):
    d, p = holder
    for action in ("k", "d", "b"):
        with pytest.raises(LogDirLockedError, match=rf"pid {p.pid} on host {socket.gethostname()}"):
            logger.set_logger_dir(d, action=action)
    assert os.path.isfile(os.path.join(d, "log.log")), "action 'd' must not delete a live run's files"
    assert logger.get_logger_dir() is None


def test_lock_is_free_once_the_holder_dies(holder, logdir):
    d, p = holder
    p.kill()
    p.wait()
    logger.set_logger_dir(d, action="k")   # the kernel released the flock with the process
    assert json.load(open(os.path.join(d, ".lock")))["pid"] == os.getpid()
    logger.unset_logger_dir()
    assert LogDirLock(d).read_holder() == {}


def test_stale_record_of_a_dead_process_is_taken_over_with_a_warning(tmp_path, logdir, kt_log):
    d = tmp_path / "run"
    d.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (d / ".lock").write_text(json.dumps({"pid": dead.pid, "host": socket.gethostname(), "time": time.time() - 5}))
    logger.set_logger_dir(str(d), action="k")
    assert any("stale lock" in m and f"pid {dead.pid}" in m for m in kt_log.messages)
    assert json.load(open(d / ".lock"))["pid"] == os.getpid()


def test_record_of_a_live_process_without_flock_is_respected(tmp_path, logdir):
    d = tmp_path / "run"
    d.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        time.sleep(0.2)
        (d / ".lock").write_text(json.dumps({"pid": live.pid, "host": socket.gethostname(), "time": time.time()}))
        with pytest.raises(LogDirLockedError, match=f"pid {live.pid}"):
            logger.set_logger_dir(str(d), action="k")
    finally:
        live.kill()
        live.wait()


def test_same_process_may_set_the_directory_again(tmp_path, logdir):
    d = str(tmp_path / "run")
    logger.set_logger_dir(d, action="k")
    logger.set_logger_dir(d, action="k")
    logger.set_logger_dir(d, action="d")  # deletes the directory and its lock: taken again
    assert json.load(open(os.path.join(d, ".lock")))["pid"] == os.getpid()
    other = subprocess.run([sys.executable, "-c", HOLD.replace("time.sleep(60)", ""), d],
                           capture_output=True, text=True, timeout=60)
    assert other.returncode != 0
    assert f"LogDirLockedError: Log directory '{d}' is in use" in other.stderr
    assert f"pid {os.getpid()}" in other.stderr
