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


def make_model(objectives=False):
    import keras
    import tensorflow as tf
    from kerastrainer.models import FullyConnected
    from kerastrainer.train import ModelDesc, Objective

    class TwoObjectives(ModelDesc):
        """fc1 minimises an auxiliary cost, fc2 the classification cost: two optimizers."""

        def inputs(self):
            return [tf.TensorSpec((None, DIM), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

        def build_graph(self, x, y):
            h = FullyConnected("fc1", x, 16, activation=tf.nn.tanh)
            logits = FullyConnected("fc2", tf.stop_gradient(h), 3)
            xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            aux = tf.reduce_mean(tf.square(tf.reduce_mean(h, 1) - tf.cast(y, tf.float32)))
            return {"xent": xent, "aux": aux}

        def optimizer(self):
            return [Objective("xent", keras.optimizers.SGD(LR), variables="fc2/"),
                    Objective("aux", keras.optimizers.SGD(LR, momentum=0.9), variables="fc1/")]

    if objectives:
        return TwoObjectives()

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
    p.add_argument("--staging", action="store_true", help="StagingInput's thread stages the batches (forced on CPU)")
    p.add_argument("--objectives", action="store_true", help="a model with two costs and two optimizers")
    p.add_argument("--same-logdir", action="store_true",
                   help="every rank calls logger.set_logger_dir(logdir, 'k'), as tensorpack programs do")
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
    if args.same_logdir:
        logger.set_logger_dir(args.logdir, action="k")
    else:
        set_logger_dir_on_chief(args.logdir, action="k")
    record = {"rank": rank, "is_chief": trainer.is_chief}

    class Record(Callback):
        _chief_only = False

        def _setup_graph(self):  # before the trainer's broadcast: the values MWMS created
            np.savez(os.path.join(args.out, f"created-{rank}.npz"), **_weights(self.trainer))

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
    data = shard_dataflow(make_data(BATCH, NUM_BATCHES))
    if args.staging:
        from kerastrainer.input_source import QueueInput, StagingInput
        data = dict(data=StagingInput(QueueInput(data), force=True))
    else:
        data = dict(dataflow=data)
    config = AutoResumeTrainConfig(model=make_model(args.objectives), callbacks=callbacks, max_epoch=args.epochs,
                                   **data)
    launch_train_with_config(config, trainer)
    record.update(logdir=logger.get_logger_dir(), global_step=trainer.global_step, epoch=trainer.epoch_num,
                  steps_per_epoch=trainer.steps_per_epoch,
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


def reference_training(init, steps, objectives=False):
    """One process, SimpleTrainer, batch 2*BATCH made of the two workers' batches of each step."""
    from kerastrainer.train import SimpleTrainer, TrainConfig, launch_train_with_config

    trainer = SimpleTrainer(steps_per_call=1)
    config = TrainConfig(model=make_model(objectives), dataflow=make_data(2 * BATCH, NUM_BATCHES // 2), session_init=init,
                         extra_callbacks=[], monitors=[], steps_per_epoch=steps, max_epoch=1)
    launch_train_with_config(config, trainer)
    return _weights(trainer)


# --- tests ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", ["queue"] + [pytest.param(v, marks=pytest.mark.slow)
                                                 for v in ("staging-thread", "same-logdir", "objectives")])
def test_two_workers_train_like_one_process_on_the_concatenated_batch(tmp_path, variant):
    # same-logdir: the script calls logger.set_logger_dir(dir, 'k') on both ranks (tensorpack's
    # programs do); rank 1 must not take the chief's lock (it died with LogDirLockedError)
    # objectives: two costs, two optimizers (each one's state broadcast and averaged alike)
    staging = variant == "staging-thread"
    flags = {"queue": [], "staging-thread": ["--staging"], "same-logdir": ["--same-logdir"],
             "objectives": ["--objectives"]}[variant]
    rc, output = launch(tmp_path, "--epochs", "2", *flags)
    assert rc == 0, output
    assert "LogDirLockedError" not in output
    moved = "[1] " in output and "Rank 1 of 2 (kerastrainer-run): the log directory" in output
    assert moved == (variant == "same-logdir"), output
    out = tmp_path / "out"
    assert "[0] WORKER-DONE 0 2" in output and "[1] WORKER-DONE 1 2" in output
    if staging:
        assert output.count("StagingInput: a thread copies each batch to /device:CPU:0") == 2, output
    records = [json.loads((out / f"record-{r}.json").read_text()) for r in range(2)]
    spe = NUM_BATCHES // 2
    for r, rec in enumerate(records):
        assert rec["is_chief"] == (r == 0)
        assert (rec["global_step"], rec["epoch"], rec["steps_per_epoch"], rec["num_replicas"]) == (2 * spe, 2, spe, 2)

    # identical initial weights although each worker seeded its RNG differently: MWMS
    # broadcasts the chief's initial values when variables are created, before ours
    created = [load(out / f"created-{r}.npz") for r in range(2)]
    init = [load(out / f"init-{r}.npz") for r in range(2)]
    final = [load(out / f"final-{r}.npz") for r in range(2)]
    for k in init[0]:
        np.testing.assert_array_equal(created[0][k], created[1][k])
        np.testing.assert_array_equal(init[0][k], init[1][k])
        np.testing.assert_array_equal(final[0][k], final[1][k])
        assert not np.allclose(init[0][k], final[0][k])

    # equal to one process on the concatenated batches, from the same initial weights
    expected = reference_training(init[0], 2 * spe, objectives=variant == "objectives")
    for k, v in expected.items():
        np.testing.assert_allclose(final[0][k], v, rtol=1e-5, atol=1e-6)

    # only the chief wrote the log directory; the other worker's temporary one is gone
    log = tmp_path / "log"
    assert (log / "log.log").is_file() and (log / f"checkpoint-{2 * spe}.index").is_file()
    assert len(list(log.glob("log.log*"))) == 1
    text = (log / "log.log").read_text()
    # the model's 4, each optimizer's step and learning rate (+ 2 momentums), the 2 counters
    broadcast = 4 + 2 + (2 + 2) + 2 if variant == "objectives" else 8
    assert f"Rank 0: {broadcast} variables broadcast" in text and "Model saved to" in text
    assert "Rank 1:" not in text and "Chief-only callbacks not run on this worker" not in text
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


@pytest.mark.slow
def test_srun_step_needs_no_launcher(tmp_path):
    """Two processes with the variables srun sets (faked): they find each other and train."""
    from kerastrainer.utils.cluster import find_free_ports

    out = tmp_path / "out"
    out.mkdir()
    base = find_free_ports(1)[0]
    procs = []
    try:
        for r in range(2):
            env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASTRAINER_", "TF_CONFIG", "SLURM_"))}
            env.update(SLURM_PROCID=str(r), SLURM_LOCALID=str(r), SLURM_NODEID="0", SLURM_NTASKS="2",
                       SLURM_STEP_NUM_TASKS="2", SLURM_STEP_NODELIST="localhost", SLURM_STEP_TASKS_PER_NODE="2",
                       SLURM_JOB_ID="4242", SLURM_STEP_ID="0", KERASTRAINER_PORT_BASE=str(base),
                       TF_CPP_MIN_LOG_LEVEL="2")
            procs.append(subprocess.Popen(
                [sys.executable, __file__, "worker", "--out", str(out), "--logdir", str(tmp_path / "log"),
                 "--epochs", "1"], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                start_new_session=True))
        outputs = [p.communicate(timeout=240)[0].decode(errors="replace") for p in procs]
        assert [p.returncode for p in procs] == [0, 0], outputs
    finally:
        for p in procs:
            _kill_group(p)
    assert "rank 0 of 2 (chief)" in outputs[0] and "rank 1 of 2" in outputs[1]
    a, b = load(out / "final-0.npz"), load(out / "final-1.npz")
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])


# --- cluster helpers (no processes) --------------------------------------------------------------
def test_tf_config_with_chief_and_workers():
    from kerastrainer.utils.cluster import parse_tf_config

    cfg = {"cluster": {"chief": ["a:1"], "worker": ["a:2", "b:1", "b:2"]}, "task": {"type": "worker", "index": 2}}
    info = parse_tf_config(json.dumps(cfg))
    assert (info.rank, info.size, info.local_rank, info.local_size) == (3, 4, 1, 2)
    assert info.workers == ["a:1", "a:2", "b:1", "b:2"]
    cfg["task"] = {"type": "chief", "index": 0}
    assert parse_tf_config(json.dumps(cfg)).rank == 0
    with pytest.raises(ValueError, match="'ps'"):
        parse_tf_config(json.dumps({"cluster": {"worker": ["a:1"], "ps": ["b:1"]}, "task": {"type": "worker"}}))
    with pytest.raises(ValueError, match="task index 5 is out of range"):
        parse_tf_config(json.dumps({"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 5}}))
    with pytest.raises(ValueError, match="not valid JSON"):
        parse_tf_config("{worker")


def test_where_rank_and_size_come_from():
    from kerastrainer.utils.cluster import get_cluster_info, make_tf_config

    assert (get_cluster_info({}).rank, get_cluster_info({}).size, get_cluster_info({}).source) == (0, 1, "single")
    tf_config = make_tf_config(["h:1", "h:2"], 1)
    info = get_cluster_info({"TF_CONFIG": tf_config})
    assert (info.rank, info.size, info.local_rank, info.source) == (1, 2, 1, "TF_CONFIG")
    launched = {"TF_CONFIG": tf_config, "KERASTRAINER_RANK": "1", "KERASTRAINER_SIZE": "2",
                "KERASTRAINER_LOCAL_RANK": "1", "SLURM_PROCID": "0", "SLURM_STEP_NUM_TASKS": "5"}
    info = get_cluster_info(launched)  # the launcher wins over an enclosing SLURM allocation
    assert (info.rank, info.size, info.source, info.workers) == (1, 2, "kerastrainer-run", ["h:1", "h:2"])
    with pytest.raises(ValueError, match="TF_CONFIG says rank 1 of 2"):
        get_cluster_info(dict(launched, KERASTRAINER_RANK="0"))
    info = get_cluster_info({"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "4",
                             "OMPI_COMM_WORLD_LOCAL_RANK": "1"})
    assert (info.rank, info.size, info.local_rank, info.workers, info.source) == (3, 4, 1, None, "MPI")
    with pytest.raises(ValueError, match="KERASTRAINER_RANK='x' is not an integer|KERASTRAINER_RANK=.x."):
        get_cluster_info({"KERASTRAINER_RANK": "x", "KERASTRAINER_SIZE": "2"})


SLURM = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "n[9-10]",
         "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_JOB_ID": "1234", "SLURM_NODEID": "1", "SLURM_LOCALID": "1"}


def test_slurm_cluster_keeps_slurm_host_order_and_block_distribution():
    from kerastrainer.utils.cluster import get_cluster_info

    info = get_cluster_info(SLURM)
    base = 20000 + 234 * 32
    # n9 before n10 (TF's SlurmClusterResolver sorts them as strings and swaps the ranks)
    assert info.workers == [f"n9:{base}", f"n9:{base + 1}", f"n10:{base}", f"n10:{base + 1}"]
    assert (info.rank, info.size, info.local_rank, info.local_size, info.source) == (3, 4, 1, 2, "SLURM")
    info = get_cluster_info(dict(SLURM, SLURM_DISTRIBUTION="cyclic", SLURM_NODEID="1", SLURM_LOCALID="1",
                                 KERASTRAINER_PORT_BASE="5000"))
    assert info.workers == ["n9:5000", "n10:5000", "n9:5001", "n10:5001"]
    with pytest.raises(ValueError, match="SLURM_NODEID=0 but rank 3"):
        get_cluster_info(dict(SLURM, SLURM_NODEID="0"))
    with pytest.raises(ValueError, match="only block .* and cyclic"):
        get_cluster_info(dict(SLURM, SLURM_DISTRIBUTION="arbitrary"))
    with pytest.raises(ValueError, match="adds up to 4 tasks but SLURM_STEP_NUM_TASKS is 3"):
        get_cluster_info(dict(SLURM, SLURM_STEP_NUM_TASKS="3", SLURM_PROCID="0"))


def test_slurm_hostlists():
    from kerastrainer.utils.cluster import expand_slurm_hostlist, expand_slurm_tasks_per_node

    assert expand_slurm_hostlist("n[9-10],gpu[01-02]-ib,login") == ["n9", "n10", "gpu01-ib", "gpu02-ib", "login"]
    assert expand_slurm_hostlist("r[1-2]n[1,3]") == ["r1n1", "r1n3", "r2n1", "r2n3"]
    assert expand_slurm_tasks_per_node("3(x2),1") == [3, 3, 1]
    for bad in ("n[1-", "n[a-b]", "n[3-1]", "a,,b"):
        with pytest.raises(ValueError, match="Cannot expand the SLURM host list"):
            expand_slurm_hostlist(bad)
    with pytest.raises(ValueError, match="Cannot parse SLURM tasks per node"):
        expand_slurm_tasks_per_node("2(3)")


def test_shards_are_disjoint_and_of_equal_length():
    from kerastrainer.dataflow import DataFromList
    from kerastrainer.utils.cluster import shard_dataflow, shard_list

    df = DataFromList([[i] for i in range(7)], shuffle=False)
    shards = [shard_dataflow(df, rank=r, size=2) for r in range(2)]
    for s in shards:
        s.reset_state()
    got = [[dp[0] for dp in s] for s in shards]
    assert got == [[0, 2, 4], [1, 3, 5]] and [len(s) for s in shards] == [3, 3]
    ragged = shard_dataflow(df, rank=0, size=2, drop_remainder=False)
    assert [dp[0] for dp in ragged] == [0, 2, 4, 6] and len(ragged) == 4
    assert shard_dataflow(df, rank=0, size=1) is df
    assert shard_list(list("abcde"), rank=1, size=2) == ["b", "d"]
    with pytest.raises(ValueError, match="rank 2 is out of range for 2"):
        shard_list([1], rank=2, size=2)


def test_non_chief_logs_to_a_private_directory(monkeypatch, tmp_path):
    from kerastrainer.utils import logger
    from kerastrainer.utils.cluster import set_logger_dir_on_chief

    monkeypatch.setenv("KERASTRAINER_RANK", "1")
    monkeypatch.setenv("KERASTRAINER_SIZE", "2")
    try:
        d = set_logger_dir_on_chief(str(tmp_path / "log"), action="k")
        assert d != str(tmp_path / "log") and "kerastrainer-rank1-" in d and os.path.isdir(d)
        assert not (tmp_path / "log").exists()
        monkeypatch.setenv("KERASTRAINER_RANK", "0")
        assert set_logger_dir_on_chief(str(tmp_path / "log"), action="k") == str(tmp_path / "log")
    finally:
        logger.unset_logger_dir()


@pytest.mark.parametrize("launcher", ["kerastrainer-run", "horovodrun", "mpirun", "srun"])
def test_set_logger_dir_on_a_non_chief_rank_leaves_the_chiefs_directory_alone(monkeypatch, tmp_path, caplog,
                                                                              launcher):
    """The same script on every rank: rank 1's set_logger_dir(dir, 'd') neither deletes the chief's
    files nor takes its lock; it logs to a private directory and says so."""
    import logging
    from kerastrainer.utils import logger
    from kerastrainer.utils.dirlock import LogDirLock

    env = {"kerastrainer-run": {"KERASTRAINER_RANK": "1", "KERASTRAINER_SIZE": "2"},
           "horovodrun": {"HOROVOD_RANK": "1", "HOROVOD_SIZE": "2"},
           "mpirun": {"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "2"},
           "srun": {"SLURM_PROCID": "1", "SLURM_STEP_NUM_TASKS": "2", "SLURM_STEP_NODELIST": "localhost",
                    "SLURM_STEP_TASKS_PER_NODE": "2"}}[launcher]
    for k in ("KERASTRAINER_RANK", "KERASTRAINER_SIZE", "TF_CONFIG", "SLURM_PROCID", "HOROVOD_RANK",
              "OMPI_COMM_WORLD_RANK", "PMI_RANK"):
        monkeypatch.delenv(k, raising=False)
    chief_dir = tmp_path / "log"
    chief_dir.mkdir()
    (chief_dir / "checkpoint").write_text("the chief's")
    chief_lock = LogDirLock(str(chief_dir))
    chief_lock.acquire()   # what rank 0 holds while it trains
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    logger._logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.WARNING, logger="kerastrainer"):
            logger.set_logger_dir(str(chief_dir), action="d")
        d = logger.get_logger_dir()
        assert "kerastrainer-rank1-" in d and os.path.isdir(d) and os.path.isfile(os.path.join(d, "log.log"))
        assert (chief_dir / "checkpoint").read_text() == "the chief's"
        assert not (chief_dir / "log.log").exists()
        msg = caplog.text
        assert "Rank 1 of 2" in msg and str(chief_dir) in msg and d in msg, msg
    finally:
        logger._logger.removeHandler(caplog.handler)
        logger.unset_logger_dir()
        chief_lock.release()


def test_trainer_after_tf_started_or_without_addresses_is_a_clear_error(monkeypatch):
    from kerastrainer.train.multiworker import MultiWorkerTrainer
    from kerastrainer.utils.cluster import find_free_ports, make_tf_config

    import tensorflow as tf
    tf.constant(1.0) + 1  # the test process's runtime is running
    monkeypatch.setenv("TF_CONFIG", make_tf_config([f"127.0.0.1:{p}" for p in find_free_ports(2)], 0))
    with pytest.raises(RuntimeError, match="must be created before TensorFlow runs its first op"):
        MultiWorkerTrainer()
    monkeypatch.delenv("TF_CONFIG")
    monkeypatch.setenv("HOROVOD_RANK", "0")
    monkeypatch.setenv("HOROVOD_SIZE", "2")
    with pytest.raises(ValueError, match="no worker addresses are known.*HorovodTrainer"):
        MultiWorkerTrainer()
    monkeypatch.delenv("HOROVOD_RANK")
    with pytest.raises(ValueError, match="'nccl' needs a GPU"):
        MultiWorkerTrainer(communication="nccl")
    with pytest.raises(ValueError, match="communication must be one of"):
        MultiWorkerTrainer(communication="grpc")


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    worker_main(sys.argv[2:])
