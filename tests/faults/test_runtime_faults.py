"""Faults of a running training, with real processes: two runs in one log directory, a stalled
DataFlow worker, Ctrl-C and SIGTERM."""
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

pytestmark = pytest.mark.slow
PROG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_prog.py")


def _stopped_within(run, t0, limit):
    """Ctrl-C -> the training loop left and cleaned up (the KeyboardInterrupt traceback is out)
    within ``limit`` s; the process itself may need a few more for TensorFlow's own teardown."""
    end = t0 + limit
    while time.time() < end and not run.text.rstrip().endswith("KeyboardInterrupt"):
        time.sleep(0.05)
    took = time.time() - t0
    assert run.text.rstrip().endswith("KeyboardInterrupt"), f"not stopped {took:.1f} s after Ctrl-C:\n{run.text[-2000:]}"
    return took


def _ctrl_c_stops(run, workers):
    """SIGINT: stopped within 5 s, the process ends (no hang), and no worker outlives it."""
    t0 = time.time()
    run.proc.send_signal(signal.SIGINT)
    _stopped_within(run, t0, 5.0)
    rc = run.finish(timeout=30)
    assert time.time() - t0 < 15, "the process hung after training stopped"
    assert rc != 0
    time.sleep(0.5)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE], \
        "DataFlow workers outlived the training process"


class Run:
    """train_prog.py in a subprocess; its output is collected by a thread."""

    def __init__(self, logdir, *args, own_group=False):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        self.proc = subprocess.Popen([sys.executable, PROG, str(logdir), *map(str, args)], env=env,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=own_group)
        self.lines = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def text(self):
        return "".join(self.lines)

    def wait_for(self, needle, timeout=120):
        end = time.time() + timeout
        while time.time() < end:
            if needle in self.text:
                return
            if self.proc.poll() is not None and needle not in self.text:
                self._reader.join(2)
                if needle in self.text:
                    return
                pytest.fail(f"process ended (rc {self.proc.returncode}) before {needle!r}:\n{self.text[-3000:]}")
            time.sleep(0.1)
        pytest.fail(f"no {needle!r} within {timeout} s:\n{self.text[-3000:]}")

    def finish(self, timeout=180):
        try:
            rc = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(5)
        return rc

    def children(self):
        return psutil.Process(self.proc.pid).children(recursive=True)


def test_second_run_in_one_dir_stops_at_once_and_loses_nothing(tmp_path):
    d = tmp_path / "run"
    go = tmp_path / "go"
    first = Run(d, "--epochs", 3, "--wait-file", go)   # holds at step 3 until the second run ended
    first.wait_for("STEP 3")
    second = Run(d)
    rc = second.finish(120)
    go.touch()
    assert rc != 0
    assert "LogDirLockedError" in second.text and f"pid {first.proc.pid}" in second.text, second.text[-2000:]
    assert "Start Epoch" not in second.text  # it stopped before building anything
    assert first.finish() == 0, first.text[-2000:]
    assert "DONE" in first.text
    # the first run's checkpoints are all there; the latest is its last one
    pointer = (d / "checkpoint").read_text()
    assert "checkpoint-60" in pointer.splitlines()[0], pointer
    for step in (20, 40, 60):
        assert (d / f"checkpoint-{step}.index").exists()


def test_stalled_worker_is_reported_and_ctrl_c_stops_within_5s(tmp_path):
    run = Run(tmp_path / "run", "--workers", 2, "--epochs", 1000, "--steps", 1000, "--delay", 0.005,
              "--stall-report", 3)
    run.wait_for("STEP 20")
    workers = run.children()
    assert len(workers) >= 2
    for w in workers:
        w.send_signal(signal.SIGSTOP)
    run.wait_for("has waited", timeout=60)
    report = [ln for ln in run.lines if "has waited" in ln][-1]
    for w in workers:
        assert f"pid {w.pid}" in report and "stopped" in report, report
    _ctrl_c_stops(run, workers)


def test_ctrl_c_during_normal_training_stops_within_5s(tmp_path):
    run = Run(tmp_path / "run", "--workers", 1, "--epochs", 1000, "--steps", 1000)
    run.wait_for("STEP 30")
    workers = run.children()
    _ctrl_c_stops(run, workers)


def _checkpoint_step(d):
    from kerastrainer.tfutils import load_chkpt_vars
    from kerastrainer.tfutils.checkpoint_files import latest_checkpoint
    path = latest_checkpoint(str(d))
    assert path is not None, os.listdir(d)
    return int(load_chkpt_vars(path)["global_step"])


@pytest.mark.parametrize("to", ["main process", "process group"])
def test_sigterm_saves_the_last_step_and_a_rerun_resumes_there(tmp_path, to):
    # a scheduler's preemption: SIGTERM to the training process (kill) or to its whole group
    # (SLURM, a container stop), the DataFlow workers included. Epochs are 1000 steps, so
    # without the save on SIGTERM nothing would be on disk.
    d = tmp_path / "run"
    run = Run(d, "--workers", 2, "--epochs", 1000, "--steps", 1000, own_group=True)
    run.wait_for("STEP 30")
    workers = run.children()
    t0 = time.time()
    if to == "main process":
        run.proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(run.proc.pid, signal.SIGTERM)
    rc = run.finish(timeout=60)
    assert time.time() - t0 < 20, "the process took too long to stop"
    assert rc == 128 + signal.SIGTERM, run.text[-3000:]
    assert "Exiting with status 143 (SIGTERM)" in run.text and "Traceback" not in run.text, run.text[-3000:]
    time.sleep(0.5)
    assert not [w for w in workers if w.is_running() and w.status() != psutil.STATUS_ZOMBIE], \
        "DataFlow workers outlived the training process"
    last = max(int(ln.split()[1]) for ln in run.lines if ln.startswith("STEP "))
    saved = _checkpoint_step(d)
    assert last <= saved <= last + 1, (last, saved)   # the call under way when it came may have ended
    # a rerun resumes from that step
    again = Run(d, "--workers", 1, "--epochs", 1, "--steps", 1000)
    assert again.finish() == 0, again.text[-3000:]
    steps = [int(ln.split()[1]) for ln in again.lines if ln.startswith("STEP ")]
    assert steps[0] == saved + 1 and "DONE" in again.text, (saved, steps[:3], again.text[-2000:])
