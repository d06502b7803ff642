"""MultiWorkerTrainer with real worker processes on 127.0.0.1 (CPU, ring all-reduce).

The worker side of these tests is this file run as a script (``python test_multiworker.py
worker ...``): it trains a small MLP with SGD on a fixed dataset, each worker on its
shard, and writes its weights and counters to ``--out``.
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DIM, BATCH, NUM_BATCHES, LR = 6, 8, 12, 0.3


# --- the worker script ---------------------------------------------------------------------------
def make_data(batch, num_batches):
    """A fixed dataset; ``batch * num_batches`` rows in a fixed order."""
    from kerastrainer.dataflow import DataFlow

    rng = np.random.RandomState(0)
    x = rng.randn(batch * num_batches, DIM).astype("float32")
    y = np.argmax(x @ rng.randn(DIM, 3), 1).astype("int32")

    class Rows(DataFlow):
        def __len__(self):
            return num_batches

        def __iter__(self):
            for i in range(num_batches):
                yield [x[i * batch:(i + 1) * batch], y[i * batch:(i + 1) * batch]]

    return Rows()


def make_model():
    import keras
    import tensorflow as tf
    from kerastrainer.models import FullyConnected
    from kerastrainer.train import ModelDesc

    class MLP(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, DIM), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

        def build_graph(self, x, y):
            h = FullyConnected("fc1", x, 16, activation=tf.nn.tanh)
            logits = FullyConnected("fc2", h, 3)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits),
                                  name="cost")

        def optimizer(self):
            return keras.optimizers.SGD(LR)

    return MLP()


def worker_main(argv):
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--logdir", required=True)
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--stop-after-epoch", type=int, default=0)
    p.add_argument("--sleep-at-step", type=int, default=0, help="rank 1 idles at this step (kill tests)")
    p.add_argument("--trainer", default="multiworker", choices=["multiworker", "horovod"])
    args = p.parse_args(argv)
    if args.trainer == "horovod":
        from kerastrainer.train.horovod import HorovodTrainer
        trainer = HorovodTrainer()  # first: before any TF op
    else:
        from kerastrainer.train.multiworker import MultiWorkerTrainer
        trainer = MultiWorkerTrainer()

    import keras
    from kerastrainer.callbacks import Callback, ModelSaver, StopTraining
    from kerastrainer.train import AutoResumeTrainConfig, launch_train_with_config
    from kerastrainer.utils import logger
    from kerastrainer.utils.cluster import set_logger_dir_on_chief, shard_dataflow

    rank, size = trainer.rank, trainer.size
    keras.utils.set_random_seed(100 + rank)  # different local initial values: the chief's must win
    set_logger_dir_on_chief(args.logdir, action="k")
    record = {"rank": rank, "is_chief": trainer.is_chief}

    class Record(Callback):
        _chief_only = False

        def _before_train(self):
            record["start_step"] = self.trainer.global_step
            record["start_epoch"] = self.trainer.starting_epoch
            np.savez(os.path.join(args.out, f"init-{rank}.npz"), **_weights(self.trainer))

        def _trigger_step(self):
            if args.sleep_at_step and rank == 1 and self.trainer.global_step >= args.sleep_at_step:
                print("WORKER-IDLE", flush=True)
                time.sleep(600)

    class StopOnChief(Callback):  # chief-only: the other worker must stop too
        def _trigger_epoch(self):
            if self.trainer.epoch_num == args.stop_after_epoch:
                raise StopTraining("test stop")

    callbacks = [ModelSaver(), Record()] + ([StopOnChief()] if args.stop_after_epoch else [])
    config = AutoResumeTrainConfig(model=make_model(), dataflow=shard_dataflow(make_data(BATCH, NUM_BATCHES)),
                                   callbacks=callbacks, max_epoch=args.epochs)
    launch_train_with_config(config, trainer)
    record.update(logdir=logger.get_logger_dir(), global_step=trainer.global_step, epoch=trainer.epoch_num, steps_per_epoch=trainer.steps_per_epoch,
                  num_replicas=trainer.num_replicas)
    np.savez(os.path.join(args.out, f"final-{rank}.npz"), **_weights(trainer))
    with open(os.path.join(args.out, f"record-{rank}.json"), "w") as f:
        json.dump(record, f)
    print("WORKER-DONE", rank, size, flush=True)


def _weights(trainer):
    return {k: np.array(v.numpy()) for k, v in trainer.named_variables().items()}


# --- helpers of the tests ------------------------------------------------------------------------
def launch(tmp_path, *worker_args, np_=2, timeout=240, extra_env=None):
    """Run ``kerastrainer-run -np 2`` on the worker script; returns (returncode, output)."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "kerastrainer.run", "-np", str(np_), "--grace", "5", sys.executable, __file__,
           "worker", "--out", str(out), "--logdir", str(tmp_path / "log"), *worker_args]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    env.update(extra_env or {})
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    finally:
        _kill_group(proc)
    return proc.returncode, output.decode(errors="replace")


def _kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


def load(path):
    with np.load(path) as z:
        return {k: z[k] for k in z.files}


def reference_training(init, steps):
    """One process, SimpleTrainer, batch 2*BATCH made of the two workers' batches of each step."""
    from kerastrainer.train import SimpleTrainer, TrainConfig, launch_train_with_config

    trainer = SimpleTrainer(steps_per_call=1)
    config = TrainConfig(model=make_model(), dataflow=make_data(2 * BATCH, NUM_BATCHES // 2), session_init=init,
                         extra_callbacks=[], monitors=[], steps_per_epoch=steps, max_epoch=1)
    launch_train_with_config(config, trainer)
    return _weights(trainer)


# --- tests ---------------------------------------------------------------------------------------
def test_two_workers_train_like_one_process_on_the_concatenated_batch(tmp_path):
    rc, output = launch(tmp_path, "--epochs", "2")
    assert rc == 0, output
    out = tmp_path / "out"
    assert "[0] WORKER-DONE 0 2" in output and "[1] WORKER-DONE 1 2" in output
    records = [json.loads((out / f"record-{r}.json").read_text()) for r in range(2)]
    spe = NUM_BATCHES // 2
    for r, rec in enumerate(records):
        assert rec["is_chief"] == (r == 0)
        assert (rec["global_step"], rec["epoch"], rec["steps_per_epoch"], rec["num_replicas"]) == (2 * spe, 2, spe, 2)

    # identical initial weights although each worker seeded its RNG differently
    init = [load(out / f"init-{r}.npz") for r in range(2)]
    final = [load(out / f"final-{r}.npz") for r in range(2)]
    for k in init[0]:
        np.testing.assert_array_equal(init[0][k], init[1][k])
        np.testing.assert_array_equal(final[0][k], final[1][k])
        assert not np.allclose(init[0][k], final[0][k])

    # equal to one process on the concatenated batches, from the same initial weights
    expected = reference_training(init[0], 2 * spe)
    for k, v in expected.items():
        np.testing.assert_allclose(final[0][k], v, rtol=1e-5, atol=1e-6)

    # only the chief wrote the log directory; the other worker's temporary one is gone
    log = tmp_path / "log"
    assert (log / "log.log").is_file() and (log / f"checkpoint-{2 * spe}.index").is_file()
    assert len(list(log.glob("log.log*"))) == 1
    text = (log / "log.log").read_text()
    assert "rank 0 of 2 (chief)" in text and "rank 1 of 2" not in text
    assert records[1]["logdir"] != records[0]["logdir"] == str(log)
    assert not os.path.exists(records[1]["logdir"])  # the worker's temporary one is removed at exit


@pytest.mark.slow
def test_stop_on_chief_stops_all_and_resume_continues_on_both(tmp_path):
    spe = NUM_BATCHES // 2
    rc, output = launch(tmp_path, "--epochs", "4", "--stop-after-epoch", "2")
    assert rc == 0, output
    out = tmp_path / "out"
    for r in range(2):
        rec = json.loads((out / f"record-{r}.json").read_text())
        assert rec["global_step"] == 2 * spe, (r, rec)
    first = load(out / "final-0.npz")

    rc, output = launch(tmp_path, "--epochs", "3")
    assert rc == 0, output
    for r in range(2):
        rec = json.loads((out / f"record-{r}.json").read_text())
        assert (rec["start_step"], rec["start_epoch"], rec["global_step"], rec["epoch"]) == (2 * spe, 3, 3 * spe, 3)
        resumed = load(out / f"init-{r}.npz")  # the chief's checkpoint, on both workers
        for k, v in first.items():
            np.testing.assert_array_equal(resumed[k], v)
    a, b = load(out / "final-0.npz"), load(out / "final-1.npz")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


@pytest.mark.slow
def test_killing_a_training_worker_stops_the_launcher(tmp_path):
    import psutil

    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "kerastrainer.run", "-np", "2", "--grace", "5", sys.executable, __file__, "worker",
           "--out", str(out), "--logdir", str(tmp_path / "log"), "--epochs", "50", "--sleep-at-step", "3"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        lines, victim = [], None
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            line = proc.stdout.readline().decode(errors="replace")
            if not line:
                break
            lines.append(line)
            if "WORKER-IDLE" in line:
                workers = psutil.Process(proc.pid).children()
                victim = [w for w in workers if w.environ().get("KERASTRAINER_RANK") == "1"][0]
                break
        assert victim is not None, "".join(lines)
        family = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        victim.send_signal(signal.SIGKILL)
        rest, _ = proc.communicate(timeout=30)
        output = "".join(lines) + rest.decode(errors="replace")
        assert proc.returncode != 0
        assert "rank 1 failed" in output and "SIGKILL" in output, output
        alive = [pid for pid in family if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]
        assert alive == [], output
    finally:
        _kill_group(proc)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    worker_main(sys.argv[2:])
