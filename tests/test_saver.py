"""Tests of ModelSaver (atomic checkpoints, max_to_keep, resume), latest_checkpoint, MinSaver/MaxSaver."""
import glob
import json
import os

import numpy as np
import pytest

from kerastrainer.callbacks import (Callback, MaxSaver, MinSaver, ModelSaver, PeriodicTrigger,
                                    StopTraining, TerminateOnNonFinite, latest_checkpoint)
from kerastrainer.callbacks import saver as saver_mod
from kerastrainer.tfutils import CheckpointWriteError
from kerastrainer.utils import logger

from test_callbacks import MiniTrainer


def ckpt_steps(d):
    return sorted(int(os.path.basename(p)[len("checkpoint-"):-len(".index")])
                  for p in glob.glob(os.path.join(d, "checkpoint-*.index")))


def restore_into_fresh(path, tf):
    """Restore a checkpoint into a new MiniTrainer's objects; returns that trainer."""
    fresh = MiniTrainer()
    fresh.checkpoint.restore(path).expect_partial()  # (save_counter is not written by write())
    return fresh


def test_saves_every_epoch_and_restores(tf, logdir):
    logger.set_logger_dir(logdir)
    tr = MiniTrainer([ModelSaver()], steps_per_epoch=5, max_epoch=3, steps_per_call=2).train()
    assert ckpt_steps(logdir) == [5, 10, 15]
    path = latest_checkpoint(logdir)
    assert path == os.path.join(os.path.abspath(logdir), "checkpoint-15")
    assert tf.train.latest_checkpoint(logdir) == path  # TF reads the pointer too
    fresh = restore_into_fresh(path, tf)
    np.testing.assert_allclose(fresh.model.w.numpy(), tr.model.w.numpy())
    assert int(fresh.global_step_var.numpy()) == 15 and int(fresh.epoch_var.numpy()) == 3
    # the optimizer state (momentum, iterations) came back as well
    assert int(fresh.optimizer.iterations.numpy()) == 15
    assert not glob.glob(os.path.join(logdir, ".tmp-save-*"))


def test_max_to_keep_and_resume_continue_the_list(tf, logdir):
    logger.set_logger_dir(logdir)
    MiniTrainer([ModelSaver(max_to_keep=2, keep_checkpoint_every_n_hours=None)],
                steps_per_epoch=2, max_epoch=4).train()
    assert ckpt_steps(logdir) == [6, 8]
    state = tf.train.get_checkpoint_state(logdir)
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == ["checkpoint-6", "checkpoint-8"]

    class Resume(Callback):
        def _setup_graph(self):
            self.trainer.checkpoint.restore(latest_checkpoint(logdir))
            self.trainer.global_step = int(self.trainer.global_step_var.numpy())

    # a resumed run in the same directory keeps counting its old checkpoints
    MiniTrainer([Resume(), ModelSaver(max_to_keep=2, keep_checkpoint_every_n_hours=None)],
                steps_per_epoch=2, starting_epoch=5, max_epoch=5).train()
    assert ckpt_steps(logdir) == [8, 10]


def test_keep_checkpoint_every_n_hours(tf, logdir, monkeypatch):
    logger.set_logger_dir(logdir)
    clock = [1_000_000.0]
    monkeypatch.setattr(saver_mod.time, "time", lambda: clock[0])

    class Tick(Callback):  # each epoch "takes" 40 minutes
        def _before_epoch(self):
            clock[0] += 2400

    MiniTrainer([Tick(), ModelSaver(max_to_keep=1, keep_checkpoint_every_n_hours=1)],
                steps_per_epoch=1, max_epoch=5).train()
    # at t=40, 80, 120, 160, 200 min; training started at 0: those at 80 and 160 min are kept for good
    assert ckpt_steps(logdir) == [2, 4, 5]
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-5"


def test_crash_while_writing_never_breaks_latest(tf, logdir, monkeypatch):
    logger.set_logger_dir(logdir)
    real_write = ModelSaver._write

    def half_write(self, prefix):
        if self.global_step == 4:
            real_write(self, prefix)
            with open(prefix + ".index", "r+b") as f:  # a torn write: the index is cut short ...
                f.truncate(10)
            raise OSError("killed while writing")        # ... and the process dies
        real_write(self, prefix)

    monkeypatch.setattr(ModelSaver, "_write", half_write)
    tr = MiniTrainer([ModelSaver()], steps_per_epoch=2, max_epoch=3)
    with pytest.raises(OSError, match="killed while writing"):
        tr.train()
    assert ckpt_steps(logdir) == [2]
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-2"
    assert int(restore_into_fresh(latest_checkpoint(logdir), tf).global_step_var.numpy()) == 2

    assert not glob.glob(os.path.join(logdir, ".tmp-save-*"))  # the failed save cleaned up after itself
    # files left by a process killed mid-save are removed by the next run, which saves normally
    stale = os.path.join(logdir, ".tmp-save-6-dead")
    os.makedirs(stale)
    open(os.path.join(stale, "ckpt.index"), "wb").close()
    monkeypatch.setattr(ModelSaver, "_write", real_write)
    MiniTrainer([ModelSaver()], steps_per_epoch=2, max_epoch=1).train()
    assert not glob.glob(os.path.join(logdir, ".tmp-save-*"))


def test_crash_while_moving_files_in_place(tf, logdir, monkeypatch):
    logger.set_logger_dir(logdir)
    real_replace = os.replace

    class BreakMoves(Callback):
        def _trigger_epoch(self):
            if self.epoch_num == 2:
                def replace(src, dst):
                    if dst.endswith(".index"):  # the data file moved, then the process died
                        raise OSError("killed while renaming")
                    return real_replace(src, dst)
                monkeypatch.setattr(saver_mod.os, "replace", replace)

    tr = MiniTrainer([BreakMoves(), ModelSaver()], steps_per_epoch=3, max_epoch=3)
    with pytest.raises(OSError, match="killed while renaming"):
        tr.train()
    monkeypatch.setattr(saver_mod.os, "replace", real_replace)
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-3"
    assert os.path.basename(tf.train.latest_checkpoint(logdir)) == "checkpoint-3"
    assert ckpt_steps(logdir) == [3]  # no index for step 6: TF does not see it


def test_crash_verification_failure_keeps_pointer(tf, logdir, monkeypatch):
    logger.set_logger_dir(logdir)
    real_verify = saver_mod._verify

    def verify(prefix):
        if prefix.endswith("-4"):
            raise ValueError("unreadable checkpoint")
        return real_verify(prefix)
    monkeypatch.setattr(saver_mod, "_verify", verify)
    with pytest.raises(ValueError, match="unreadable"):
        MiniTrainer([ModelSaver()], steps_per_epoch=2, max_epoch=3).train()
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-2"


def test_after_train_saves_the_last_step_once(tf, logdir):
    logger.set_logger_dir(logdir)

    class StopAt7(Callback):
        def _trigger_step(self):
            if self.global_step >= 7:
                raise StopTraining()

    MiniTrainer([StopAt7(), ModelSaver()], steps_per_epoch=5, max_epoch=3, steps_per_call=1).train()
    assert ckpt_steps(logdir) == [5, 7]
    assert int(restore_into_fresh(latest_checkpoint(logdir), tf).epoch_var.numpy()) == 1  # epochs completed


def test_after_train_does_not_save_a_diverged_model(tf, logdir, kt_log):
    logger.set_logger_dir(logdir)
    tr = MiniTrainer([TerminateOnNonFinite(), ModelSaver()], steps_per_epoch=4, max_epoch=3,
                     steps_per_call=2, nan_at=5)
    with pytest.raises(Exception, match="NaN or Inf"):
        tr.train()
    assert ckpt_steps(logdir) == [4]
    assert "not saving at the end of training" in kt_log.text()


def test_step_based_saving_and_sync_counters(tf, logdir):
    logger.set_logger_dir(logdir)
    tr = MiniTrainer([PeriodicTrigger(ModelSaver(), every_k_steps=3)], steps_per_epoch=4, max_epoch=2,
                     steps_per_call=4, with_sync_counters=True).train()
    assert ckpt_steps(logdir) == [3, 6, 8]  # multiples of 3, and the end of training
    assert tr.sync_calls == 3


def test_latest_checkpoint_edge_cases(tf, tmp_path, logdir):
    assert latest_checkpoint(str(tmp_path / "missing")) is None
    assert latest_checkpoint(str(tmp_path)) is None
    logger.set_logger_dir(logdir)
    MiniTrainer([ModelSaver()], steps_per_epoch=2, max_epoch=2).train()
    assert os.path.basename(latest_checkpoint()) == "checkpoint-4"  # the log dir by default
    os.remove(os.path.join(logdir, "checkpoint"))  # pointer lost: the files still tell
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-4"
    with open(os.path.join(logdir, "checkpoint"), "w") as f:
        f.write('model_checkpoint_path: "checkpoint-99"\n')
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-4"


def test_non_chief_worker_keeps_nothing(tf, logdir):
    logger.set_logger_dir(logdir)
    saver = ModelSaver()
    tr = MiniTrainer([saver], steps_per_epoch=2, max_epoch=2, is_chief=False, with_sync_counters=True).train()
    assert ckpt_steps(logdir) == [] and tr.sync_calls == 2  # counters synced, nothing written
    logger.unset_logger_dir()  # non-chief workers often have no log directory
    MiniTrainer([ModelSaver()], steps_per_epoch=1, max_epoch=1, is_chief=False).train()


def test_model_saver_needs_a_directory_and_a_checkpoint(tf):
    logger.unset_logger_dir()
    with pytest.raises(ValueError, match="ModelSaver needs a directory"):
        MiniTrainer([ModelSaver()]).train()
    with pytest.raises(ValueError, match="max_to_keep"):
        ModelSaver(max_to_keep=0)


# --- MinSaver / MaxSaver ------------------------------------------------------------------------
class PutValErr(Callback):
    def __init__(self, values):
        self.values = values

    def _trigger_epoch(self):
        self.trainer.monitors.put_scalar("val/error", self.values[self.epoch_num])


def test_min_and_max_saver(tf, logdir):
    logger.set_logger_dir(logdir)
    values = {1: 0.5, 2: 0.3, 3: 0.4, 4: 0.2, 5: 0.6}
    best_w = {}

    class RememberW(Callback):
        def _trigger_epoch(self):
            best_w[self.epoch_num] = self.trainer.model.w.numpy().copy()

    MiniTrainer([RememberW(), ModelSaver(), PutValErr(values), MinSaver("val/error"), MaxSaver("val/error")],
                steps_per_epoch=2, max_epoch=5).train()
    fresh = restore_into_fresh(os.path.join(logdir, "min-val_error"), tf)
    np.testing.assert_allclose(fresh.model.w.numpy(), best_w[4])
    assert int(fresh.global_step_var.numpy()) == 8
    fresh = restore_into_fresh(os.path.join(logdir, "max-val_error"), tf)
    assert int(fresh.global_step_var.numpy()) == 10
    with open(os.path.join(logdir, "min-val_error.json")) as f:
        side = json.load(f)
    assert side["value"] == 0.2 and side["global_step"] == 8
    # MinSaver copies do not confuse latest_checkpoint
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-10"


def test_min_saver_resume_compares_with_the_saved_best(tf, logdir):
    logger.set_logger_dir(logdir)
    MiniTrainer([ModelSaver(), PutValErr({1: 0.2}), MinSaver("val/error")], steps_per_epoch=2, max_epoch=1).train()
    ms = MinSaver("val/error")
    MiniTrainer([ModelSaver(), PutValErr({1: 0.3}), ms], steps_per_epoch=3, max_epoch=1).train()
    assert ms.best == 0.2
    assert int(restore_into_fresh(os.path.join(logdir, "min-val_error"), tf).global_step_var.numpy()) == 2


def test_min_saver_without_stat_or_checkpoint(tf, logdir, kt_log):
    logger.set_logger_dir(logdir)
    MiniTrainer([ModelSaver(), MinSaver("nope")], steps_per_epoch=1, max_epoch=2).train()
    assert sum("No statistic named 'nope'" in m for m in kt_log.messages) == 1
    assert not glob.glob(os.path.join(logdir, "min-*"))
    other = os.path.join(logdir, "empty")
    os.makedirs(other)
    with pytest.raises(RuntimeError, match="Put a ModelSaver before it"):
        MiniTrainer([PutValErr({1: 0.1}), MinSaver("val/error", checkpoint_dir=other)],
                    steps_per_epoch=1, max_epoch=1).train()


def test_disk_full_is_a_clear_error_and_loses_nothing(tf, logdir, monkeypatch):
    import errno
    logger.set_logger_dir(logdir)
    real_write, calls = ModelSaver._write, []

    def write(self, prefix):
        calls.append(int(self.global_step))
        if self.global_step >= 4:
            with open(prefix + ".data-00000-of-00001", "wb") as f:
                f.write(b"half")                  # part of the data made it before the disk filled
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real_write(self, prefix)

    monkeypatch.setattr(ModelSaver, "_write", write)
    with pytest.raises(CheckpointWriteError) as info:
        MiniTrainer([ModelSaver()], steps_per_epoch=2, max_epoch=3).train()
    msg = str(info.value)
    assert "could not write checkpoint-4" in msg and "No space left on device" in msg
    assert "stays " + os.path.join(logdir, "checkpoint-2") in msg and "free there" in msg
    assert isinstance(info.value, OSError)
    assert calls == [2, 4]            # the end of training does not try the failed save again
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-2"
    assert not glob.glob(os.path.join(logdir, ".tmp-save-*")) and not glob.glob(os.path.join(logdir, "*-4.*"))


def test_pointer_write_failure_removes_the_unlisted_checkpoint(tf, logdir, monkeypatch):
    import errno
    logger.set_logger_dir(logdir)
    real_pointer = saver_mod._write_pointer

    def pointer(directory, latest, kept, last_preserved):
        if latest.endswith("-4"):
            raise OSError(errno.EFBIG, os.strerror(errno.EFBIG))
        real_pointer(directory, latest, kept, last_preserved)

    monkeypatch.setattr(saver_mod, "_write_pointer", pointer)
    with pytest.raises(CheckpointWriteError, match="could not write checkpoint-4.*File too large"):
        MiniTrainer([ModelSaver()], steps_per_epoch=2, max_epoch=3).train()
    assert ckpt_steps(logdir) == [2]   # the files of checkpoint-4 went with the failed save
    assert os.path.basename(latest_checkpoint(logdir)) == "checkpoint-2"
