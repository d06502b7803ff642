"""make_parallel with the devices of several workers: multi-worker data parallelism (keras_experiments'
``make_parallel(model, wgdev_list)`` of its SLURM example).

The happy path runs 2 worker processes on 127.0.0.1 under ``kerastrainer-run -np 2``: this file
run as a script (``python test_keras_parallel_multiworker.py worker --out DIR``) is the worker.
The checks of the list against the cluster run in this process, on a stand-in trainer that has
what the checks read (rank, size, the cluster resolver, the local devices).
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from _procs import run_group

HERE = os.path.dirname(os.path.abspath(__file__))
WGDEV = ["/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
N, DIM, BATCH, LR, EPOCHS = 64, 8, 32, 0.1, 2


def _data():
    rng = np.random.RandomState(0)
    x = rng.randn(N, DIM).astype("float32")
    y = np.argmax(x @ np.random.RandomState(42).randn(DIM, 3), 1).astype("int32")
    return x, y


def _model(seed):
    import keras
    keras.utils.set_random_seed(seed)
    return keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(16, activation="tanh"), keras.layers.Dense(3)])


def _compile_args():
    import keras
    return dict(optimizer=keras.optimizers.SGD(LR), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


# --- the worker script ---------------------------------------------------------------------------
def worker_main(out):
    from kerastrainer import MultiWorkerTrainer
    trainer = MultiWorkerTrainer()  # first: before any TF op

    from kerastrainer.keras.parallel import ModelMGPU, get_allworkers_devlist, make_parallel
    rank = trainer.rank
    model = _model(seed=10 + rank)  # different local weights: the chief's must win
    record = {"devlist": [d.to_string() for d in get_allworkers_devlist()]}
    try:  # a list of 3 workers in a job of 2: refused before anything runs on the cluster
        make_parallel(model, WGDEV + ["/job:worker/task:2/device:CPU:0"])
    except ValueError as e:
        record["error"] = str(e)
    pmodel = make_parallel(model, WGDEV)
    assert isinstance(pmodel, ModelMGPU)
    record.update(gdev_list=pmodel.gdev_list, local_devices=pmodel.local_devices)
    pmodel.compile(**_compile_args())
    x, y = _data()
    hist = pmodel.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False)
    record.update(loss=hist.history["loss"], global_step=pmodel._km.trainer.global_step)
    np.savez(os.path.join(out, f"final-{rank}.npz"), *model.get_weights())
    with open(os.path.join(out, f"record-{rank}.json"), "w") as f:
        json.dump(record, f)
    print("WORKER-DONE", rank, flush=True)


# --- the tests -----------------------------------------------------------------------------------
def _launch(tmp_path, timeout=240):
    out = tmp_path / "out"
    out.mkdir()
    cmd = [sys.executable, "-m", "kerastrainer.run", "-np", "2", "--grace", "5", sys.executable, __file__,
           "worker", str(out)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(
        [os.path.dirname(HERE)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    rc, output, _ = run_group(cmd, timeout, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                              cwd=str(tmp_path))
    return rc, output.decode(errors="replace"), out


def test_two_workers_train_like_one_process_on_the_global_batch(tmp_path):
    import tensorflow as tf
    rc, output, out = _launch(tmp_path)
    assert rc == 0, output[-6000:]
    assert "[0] WORKER-DONE 0" in output and "[1] WORKER-DONE 1" in output
    records = [json.loads((out / f"record-{r}.json").read_text()) for r in range(2)]
    for r, rec in enumerate(records):
        assert rec["devlist"] == WGDEV
        assert rec["gdev_list"] == WGDEV and rec["local_devices"] == ["/cpu:0"]
        assert "names 3 workers (['worker:0', 'worker:1', 'worker:2']) but this job has 2" in rec["error"]
        assert f"rank {r} of 2" in rec["error"]
        assert rec["global_step"] == EPOCHS * N // BATCH
    # each worker read every other sample, 16 a step: together the serial model's batch of 32
    assert "worker 1 of 2 reads its shard of the data (16 samples a step)" in output
    final = [[z[k] for k in sorted(z.files, key=lambda n: int(n.split("_")[1]))]
             for z in (np.load(out / f"final-{r}.npz") for r in range(2))]
    for a, b in zip(*final):
        np.testing.assert_array_equal(a, b)

    # the same training in one process: keras.Model.fit from the chief's initial weights, batch 32
    x, y = _data()
    with tf.device("/cpu:0"):
        reference = _model(seed=10)
        init = [w.copy() for w in reference.get_weights()]
        reference.compile(**_compile_args())
        href = reference.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    for a, b, w0 in zip(final[0], reference.get_weights(), init):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
        assert not np.allclose(a, w0)
    np.testing.assert_allclose(records[0]["loss"], href.history["loss"], rtol=1e-5)


class _StandIn:
    """What the checks read of a MultiWorkerTrainer: rank, size, cluster resolver, local devices."""

    def __init__(self, workers=2, rank=1, local=("CPU:0",), chief=False):
        import tensorflow as tf
        jobs = {"worker": [f"127.0.0.1:{2000 + i}" for i in range(workers)]}
        if chief:
            jobs = {"chief": ["127.0.0.1:1999"], "worker": jobs["worker"][1:]}
        task = ("chief", 0) if chief and rank == 0 else ("worker", rank - (1 if chief else 0))
        self.cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
            tf.train.ClusterSpec(jobs), task_type=task[0], task_id=task[1])
        self.rank, self.size = rank, workers
        self.local_devices = [f"/job:{task[0]}/replica:0/task:{task[1]}/device:{d}" for d in local]


def test_the_list_is_checked_against_the_cluster(monkeypatch):
    from kerastrainer.keras.parallel import split_worker_devices
    trainer = _StandIn()
    got, names, local = split_worker_devices(WGDEV, trainer=trainer)
    assert got is trainer and names == WGDEV and local == ["/cpu:0"]
    import tensorflow as tf
    specs = [tf.DeviceSpec.from_string(d) for d in reversed(WGDEV)]  # DeviceSpecs, any order
    assert split_worker_devices(specs, trainer=trainer)[1] == WGDEV

    with pytest.raises(ValueError, match=r"names 3 workers \(\['worker:0', 'worker:1', 'worker:2'\]\) but this "
                                         r"job has 2 \(MultiWorkerTrainer: rank 1 of 2"):
        split_worker_devices(WGDEV + ["/job:worker/task:2/device:CPU:0"], trainer=trainer)
    with pytest.raises(ValueError, match=r"names 2 workers \(\['worker:0', 'worker:2'\]\) but this job has 2"):
        split_worker_devices(["/job:worker/task:0/device:CPU:0", "/job:worker/task:2/device:CPU:0"],
                             trainer=trainer)
    # this worker's devices: one per process, of the kind it trains on
    with pytest.raises(ValueError, match=r"gives this worker \(worker:1, .*\) the devices \['GPU:0'\], but it "
                                         r"trains on \['/job:worker/replica:0/task:1/device:CPU:0'\].*srun"):
        split_worker_devices(["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:0"],
                             trainer=trainer)
    two_each = [f"/job:worker/task:{t}/device:CPU:{i}" for t in range(2) for i in range(2)]
    with pytest.raises(ValueError, match=r"the devices \['CPU:0', 'CPU:1'\], but it trains on .*one process per "
                                         r"device.*kerastrainer-run -np <devices>"):
        split_worker_devices(two_each, trainer=trainer)
    with pytest.raises(ValueError, match=r"different numbers of devices \(\{'worker:0': 2, 'worker:1': 1\}\)"):
        split_worker_devices(two_each[:2] + ["/job:worker/task:1/device:CPU:0"], trainer=trainer)
    # names that are not a worker's device
    with pytest.raises(ValueError, match=r"'/job:ps/task:0/device:CPU:0' in the device list is not a device of a "
                                         r"worker.*no parameter servers"):
        split_worker_devices(WGDEV + ["/job:ps/task:0/device:CPU:0"], trainer=trainer)
    with pytest.raises(ValueError, match=r"and '/cpu:1', which names none: name every device with its worker"):
        split_worker_devices(WGDEV + ["/cpu:1"], trainer=trainer)
    with pytest.raises(ValueError, match=r"names a device of worker:1 more than once"):
        split_worker_devices(WGDEV + [WGDEV[1]], trainer=trainer)
    # a GPU may be named by its number on the machine (keras_experiments' one GPU per worker)
    gpu = _StandIn(local=("GPU:0",))
    monkeypatch.setenv("KERASTRAINER_RANK", "1")
    monkeypatch.setenv("KERASTRAINER_SIZE", "2")
    monkeypatch.setenv("KERASTRAINER_LOCAL_RANK", "1")
    listed = ["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:1"]
    assert split_worker_devices(listed, trainer=gpu)[2] == ["/gpu:0"]
    listed = ["/job:worker/task:0/device:GPU:0", "/job:worker/task:1/device:GPU:2"]
    with pytest.raises(ValueError, match=r"the devices \['GPU:2'\], but it trains on"):
        split_worker_devices(listed, trainer=gpu)
    # a cluster with a chief (TF_CONFIG): its tasks are named /job:chief/task:0 and /job:worker/task:i
    chief = _StandIn(workers=3, rank=0, chief=True)
    listed = ["/job:chief/task:0/device:CPU:0", "/job:worker/task:0/device:CPU:0", "/job:worker/task:1/device:CPU:0"]
    assert split_worker_devices(listed, trainer=chief)[1] == listed
    with pytest.raises(ValueError, match=r"names 3 workers \(\['worker:0', 'worker:1', 'worker:2'\]\) but this "
                                         r"job has 3 .*tasks \['chief:0', 'worker:0', 'worker:1'\]"):
        split_worker_devices([f"/job:worker/task:{t}/device:CPU:0" for t in range(3)], trainer=chief)


def test_make_parallel_refuses_the_list_outside_a_job_and_without_the_trainer(monkeypatch):
    import keras
    from kerastrainer import MultiWorkerTrainer
    from kerastrainer.keras.parallel import get_allworkers_devlist, make_parallel
    model = _model(seed=1)
    for k in [k for k in os.environ if k.startswith(("SLURM_", "KERASTRAINER_", "TF_CONFIG", "OMPI_", "PMI_"))]:
        monkeypatch.delenv(k)
    # a process that is not one worker of a job: say how to launch one
    with pytest.raises(RuntimeError, match=r"make_parallel with the devices of 2 workers: this process is not one "
                                           r"worker of a multi-worker job.*srun -n N.*kerastrainer-run -np N.*"
                                           r"MultiWorkerTrainer\(\)"):
        make_parallel(model, WGDEV)
    with pytest.raises(RuntimeError, match="get_allworkers_devlist: this process is not one worker"):
        get_allworkers_devlist()
    # one worker of a job, but no MultiWorkerTrainer made: say where to create it
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    monkeypatch.setenv("SLURM_STEP_NODELIST", "127.0.0.1")
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "2")
    monkeypatch.setenv("SLURM_LOCALID", "1")
    monkeypatch.setenv("SLURM_NODEID", "0")
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    with pytest.raises(RuntimeError, match=r"rank 1 of 2 \(from SLURM\) but no MultiWorkerTrainer was created.*"
                                           r"before TensorFlow runs its first op"):
        make_parallel(model, WGDEV)
    # a mismatch reaches the user through make_parallel and ModelMGPU
    monkeypatch.setattr(MultiWorkerTrainer, "of_this_process", staticmethod(lambda: _StandIn()))
    with pytest.raises(ValueError, match=r"names 3 workers"):
        make_parallel(model, WGDEV + ["/job:worker/task:2/device:CPU:0"])
    assert isinstance(model, keras.Model)


def test_knobs_without_meaning_for_several_workers_are_named(monkeypatch, kt_log):
    from kerastrainer import MultiWorkerTrainer
    from kerastrainer.keras.parallel import ModelMGPU, make_parallel
    stand_in = _StandIn()
    monkeypatch.setattr(MultiWorkerTrainer, "of_this_process", staticmethod(lambda: stand_in))
    pmodel = make_parallel(_model(seed=1), WGDEV)
    assert isinstance(pmodel, ModelMGPU) and pmodel.gdev_list == WGDEV and pmodel.local_devices == ["/cpu:0"]
    assert pmodel._make_trainer() is stand_in  # fit trains on this process's MultiWorkerTrainer
    assert not kt_log.warnings()
    make_parallel(_model(seed=1), WGDEV, ps_device="/gpu:0", usenccl=True)
    text = kt_log.warnings()
    assert "ModelMGPU(usenccl=True) is ignored for the devices of several workers" in text
    assert "ModelMGPU(ps_device='/gpu:0') is ignored for the devices of several workers" in text
    assert "there is no parameter server" in text


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, HERE)
    worker_main(sys.argv[2])
