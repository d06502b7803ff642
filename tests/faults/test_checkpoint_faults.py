"""Checkpoint faults with real training processes and real files.

SIGKILL while saving (in a loop), damaged index/data/pointer files, and a NaN step
with per-step saving: after each, the latest checkpoint is whole and finite and
auto-resume continues from the newest good one, saying which file was bad.
Each run is ``ckpt_prog.py`` in a subprocess.
"""
import glob
import os
import random
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
PROG = os.path.join(HERE, "ckpt_prog.py")


def run(logdir, *opts, timeout=240, max_file_bytes=None):
    """Run a training to its end; returns (rc, output). ``max_file_bytes``: the kernel refuses
    to grow any file past that size (RLIMIT_FSIZE, as on a full disk or a quota)."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

    def limit_files():
        import resource
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)   # a write past the limit fails with EFBIG instead
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    p = subprocess.run([sys.executable, PROG, logdir, *opts], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=timeout, env=env, preexec_fn=limit_files if max_file_bytes else None)
    return p.returncode, p.stdout


def steps_on_disk(d):
    return sorted(int(os.path.basename(p)[len("checkpoint-"):-len(".index")])
                  for p in glob.glob(os.path.join(d, "checkpoint-*.index")))


def check_latest_whole_and_finite(d):
    from kerastrainer.tfutils import load_chkpt_vars
    from kerastrainer.tfutils.checkpoint_files import latest_checkpoint
    path = latest_checkpoint(d)
    assert path is not None, os.listdir(d)
    arrays = load_chkpt_vars(path)  # reads every byte: raises on a damaged file
    assert all(np.isfinite(v).all() for v in arrays.values() if v.dtype.kind == "f"), path
    return int(arrays["global_step"])


def test_sigkill_during_saves_in_a_loop_loses_nothing(tmp_path):
    d = str(tmp_path / "log")
    rng = random.Random(0)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    # a 4M-float variable makes each (per-step) save take most of the step's time
    opts = ["--epochs", "50", "--steps", "4", "--save-every", "1", "--big", str(4 << 20)]
    kills = 0
    for _ in range(5):
        p = subprocess.Popen([sys.executable, PROG, d, *opts], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env)
        try:
            seen = 0
            for line in p.stdout:
                if line.startswith("STEP"):
                    seen += 1
                    if seen >= 2:
                        time.sleep(rng.uniform(0.0, 0.3))  # somewhere inside the next save or step
                        break
            p.send_signal(signal.SIGKILL)
            kills += 1
        finally:
            p.kill()
            p.wait(timeout=30)
        check_latest_whole_and_finite(d)
        assert not [f for f in os.listdir(d) if f.endswith(".tmp")], os.listdir(d)
    assert kills == 5
    before = check_latest_whole_and_finite(d)
    from kerastrainer.tfutils import load_chkpt_vars
    from kerastrainer.tfutils.checkpoint_files import latest_checkpoint
    epoch = int(load_chkpt_vars(latest_checkpoint(d))["epoch"])
    rc, out = run(d, "--epochs", str(epoch + 2), "--steps", "4", "--save-every", "1", "--big", str(4 << 20))
    assert rc == 0, out[-3000:]
    assert f"global step {before}, epoch {epoch} done" in out and "DONE" in out
    # (an epoch cut short is run whole again: two more epochs of 4 steps)
    assert check_latest_whole_and_finite(d) == before + 8
    assert not glob.glob(os.path.join(d, ".tmp-save-*"))


def _three_checkpoints(d):
    rc, out = run(d, "--epochs", "3", "--steps", "4")
    assert rc == 0, out[-3000:]
    assert steps_on_disk(d) == [4, 8, 12]


def _damage(d, what):
    if what == "garbage-index":
        with open(os.path.join(d, "checkpoint-12.index"), "wb") as f:
            f.write(os.urandom(500))
        return "checkpoint-12.index"
    if what == "empty-index":
        open(os.path.join(d, "checkpoint-12.index"), "wb").close()
        return "checkpoint-12.index"
    if what == "truncated-data":
        data = glob.glob(os.path.join(d, "checkpoint-12.data-*"))[0]
        with open(data, "r+b") as f:
            f.truncate(os.path.getsize(data) // 3)
        return os.path.basename(data)
    if what == "zeroed-data":
        data = glob.glob(os.path.join(d, "checkpoint-12.data-*"))[0]
        size = os.path.getsize(data)
        with open(data, "r+b") as f:
            f.write(b"\0" * size)
        return os.path.basename(data)
    raise ValueError(what)


@pytest.mark.parametrize("what", ["garbage-index", "empty-index", "truncated-data", "zeroed-data"])
def test_damaged_latest_checkpoint_resume_falls_back_and_load_names_it(tmp_path, what):
    d = str(tmp_path / "log")
    _three_checkpoints(d)
    bad_file = _damage(d, what)
    # an explicit session_init of the damaged file: an error naming it
    rc, out = run(str(tmp_path / "other"), "--epochs", "1", "--load", os.path.join(d, "checkpoint-12"))
    assert rc != 0 and "CheckpointLoadError" in out and bad_file in out, out[-3000:]
    # auto-resume: falls back to checkpoint-8, saying which file was bad and what it used
    rc, out = run(d, "--epochs", "4", "--steps", "4")
    assert rc == 0, out[-3000:]
    assert bad_file in out and "using checkpoint-8 instead of checkpoint-12" in out, out[-3000:]
    assert "global step 8, epoch 2 done" in out and "DONE 16" in out
    assert check_latest_whole_and_finite(d) == 16


@pytest.mark.parametrize("pointer", ["garbage", "empty", "missing-target", "deleted"])
def test_bad_pointer_file_resumes_from_the_newest_checkpoint(tmp_path, pointer):
    d = str(tmp_path / "log")
    _three_checkpoints(d)
    path = os.path.join(d, "checkpoint")
    if pointer == "deleted":
        os.remove(path)
    else:
        with open(path, "w") as f:
            f.write({"garbage": "\x00\x01 not { a proto", "empty": "",
                     "missing-target": 'model_checkpoint_path: "checkpoint-99"\n'}[pointer])
    rc, out = run(d, "--epochs", "4", "--steps", "4")
    assert rc == 0, out[-3000:]
    assert "global step 12, epoch 3 done" in out and "DONE 16" in out, out[-3000:]
    assert check_latest_whole_and_finite(d) == 16


def test_every_checkpoint_damaged_is_a_clear_error(tmp_path):
    d = str(tmp_path / "log")
    _three_checkpoints(d)
    for f in glob.glob(os.path.join(d, "checkpoint-*.index")):
        with open(f, "wb") as fh:
            fh.write(b"junk")
    rc, out = run(d, "--epochs", "4", "--steps", "4")
    assert rc != 0 and "no usable checkpoint" in out and "Traceback" in out, out[-3000:]


@pytest.mark.parametrize("guard", [True, False])
def test_nan_with_per_step_saving_never_becomes_latest(tmp_path, guard):
    d = str(tmp_path / "log")
    opts = ["--epochs", "3", "--steps", "4", "--save-every", "1", "--nan-at", "6"] + ([] if guard else ["--no-guard"])
    rc, out = run(d, *opts)
    assert rc != 0, out[-3000:]
    assert ("NonFiniteLossError" if guard else "NonFiniteWeightsError") in out, out[-3000:]
    # step 6 (0-based) was NaN: the newest checkpoint is of the 6 steps before it, and finite
    assert check_latest_whole_and_finite(d) == 6
    assert max(steps_on_disk(d)) == 6
    # a resumed run (the NaN was a one-off) continues from there and finishes
    rc, out = run(d, "--epochs", "3", "--steps", "4", "--save-every", "1")
    assert rc == 0, out[-3000:]
    # (epoch 2, cut short at step 6, is run whole again: 8 more steps)
    assert "global step 6, epoch 1 done" in out and "DONE 14" in out
    assert check_latest_whole_and_finite(d) == 14


def test_auto_resume_skips_a_nan_checkpoint_written_by_an_older_version(tmp_path):
    import tensorflow as tf
    from kerastrainer.tfutils import load_chkpt_vars
    d = str(tmp_path / "log")
    _three_checkpoints(d)
    arrays = load_chkpt_vars(os.path.join(d, "checkpoint-12"))
    arrays["fc1/W"] = np.full_like(arrays["fc1/W"], np.nan)
    for f in glob.glob(os.path.join(d, "checkpoint-12.*")):
        os.remove(f)
    names = sorted(arrays)
    tf.raw_ops.SaveV2(prefix=os.path.join(d, "checkpoint-12"), tensor_names=names,
                      shape_and_slices=[""] * len(names), tensors=[tf.constant(arrays[n]) for n in names])
    rc, out = run(d, "--epochs", "4", "--steps", "4")
    assert rc == 0, out[-3000:]
    assert "skipping checkpoint-12: it holds NaN or Inf (fc1/W)" in out, out[-3000:]
    assert "global step 8, epoch 2 done" in out and "DONE 16" in out


def test_checkpoint_too_big_for_the_disk_is_a_clear_error_and_loses_nothing(tmp_path):
    d = str(tmp_path / "log")
    rc, out = run(d, "--epochs", "2", "--steps", "4", "--big", "20000")
    assert rc == 0 and steps_on_disk(d) == [4, 8], out[-3000:]
    size = os.path.getsize(os.path.join(d, "checkpoint-8.data-00000-of-00001"))
    # the resumed run may not write a file as big as a checkpoint's data
    rc, out = run(d, "--epochs", "4", "--steps", "4", "--big", "20000", max_file_bytes=size // 4)
    assert rc != 0, out[-3000:]
    assert "CheckpointWriteError: ModelSaver: could not write checkpoint-12" in out, out[-3000:]
    assert "File too large" in out and f"stays {os.path.join(d, 'checkpoint-8')}" in out, out[-3000:]
    assert out.count("could not write") == 1, out[-3000:]   # no second attempt at the end of training
    assert check_latest_whole_and_finite(d) == 8 and steps_on_disk(d) == [4, 8]
    assert not glob.glob(os.path.join(d, ".tmp-save-*")) and not glob.glob(os.path.join(d, "*.tmp"))
    # with room again, the next run resumes from checkpoint-8 and finishes
    rc, out = run(d, "--epochs", "4", "--steps", "4", "--big", "20000")
    assert rc == 0 and "DONE 16" in out, out[-3000:]
    assert check_latest_whole_and_finite(d) == 16
