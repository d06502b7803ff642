"""Programs of public repositories built on tensorpack (not tensorpack's own examples), ported with
the import change and the edits listed in each script's header, trained and evaluated briefly on
tiny generated data.

Each runs in its own process through ``_run.py`` (caps on epochs, steps and batch sizes from the
environment, so the scripts keep their own numbers), with ``PYTHONPATH`` set to this checkout.
"""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def _load(name, path):
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_data = _load("third_party_data", os.path.join(HERE, "_data.py"))   # learnable CIFAR-10
_tp_data = _load("tensorpack_examples_data", os.path.join(os.path.dirname(HERE), "tensorpack_examples", "_data.py"))

ADV = os.path.join(HERE, "ImageNet-Adversarial-Training")
GN = os.path.join(HERE, "GroupNorm-reproduce")


def _env(extra):
    path = [REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1", PYTHONPATH=os.pathsep.join(path),
                **extra)


def run(script, *args, cwd, env=None, timeout=900):
    r = subprocess.run([sys.executable, os.path.join(HERE, "_run.py"), script, *args], cwd=str(cwd),
                       env=_env(env or {}), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{script} {args} failed:\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}"
    return r.stdout + r.stderr


def stats_of(logdir):
    with open(os.path.join(logdir, "stats.json")) as f:
        return json.load(f)


def checkpoint_names(logdir):
    import tensorflow as tf
    return {n for n, _ in tf.train.list_variables(tf.train.latest_checkpoint(str(logdir)))}


@pytest.mark.slow
def test_groupnorm_cifar10_resnet(tmp_path):
    """GroupNorm-reproduce: GroupNorm's tf.get_variable in a use_scope=None layer, named by the
    caller's variable scope; the weight decay an exponential_decay of the global step."""
    _data.write_cifar10(str(tmp_path / "data"))
    run(os.path.join(GN, "cifar10-resnet-gn.py"), "-n", "1", cwd=tmp_path,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_PRETEND_GPU": "1", "TP_MAX_EPOCH": "2",
             "TP_BATCH_SIZE": "16"})
    logdir = tmp_path / "train_log" / "GN-cifar"
    first, last = stats_of(logdir)
    assert (first["global_step"], last["global_step"]) == (20, 40)   # 5 x 64 images in batches of 16
    # trained: the colour of an image says its class; chance is 0.9 error, ln(10) = 2.3 cost. (The jump of
    # the learning rate to 0.1 after epoch 1 may set epoch 2 back, in tensorpack 0.11 too.)
    best = min((first, last), key=lambda s: s["validation_error"])
    assert best["validation_error"] < 0.75 and best["validation_cost"] < 2.0
    # ScheduledHyperParamSetter('learning_rate', [(1, 0.1), ...]) after epoch 1
    assert (first["learning_rate"], last["learning_rate"]) == (pytest.approx(0.01), pytest.approx(0.1))
    assert 0 < last["wd_cost"] < 1
    names = checkpoint_names(logdir)
    # GNReLU unnamed in a residual unit's scope, as Conv2D's activation, and named 'bnlast'
    for n in ("conv0/gamma", "conv0/beta", "res2.0/gamma", "res2.0/beta", "res1.0/conv1/gamma",
              "res3.0/conv1/beta", "bnlast/gamma", "bnlast/beta", "res1.0/conv1/W", "linear/W"):
        assert n in names, (n, sorted(names))
    assert not any("tower" in n for n in names)


@pytest.mark.slow
def test_adversarial_training_cifar10(tmp_path):
    """ImageNet-Adversarial-Training's cifar10.py: PGD in the training tower, an inference tower per
    attacker (clean, 10-step PGD) through InferenceRunner(tower_func=...) under EnableCallbackIf."""
    _data.write_cifar10(str(tmp_path / "data"))
    run(os.path.join(ADV, "cifar10.py"), "--num_units", "1", "--widening_factor", "1", "--batch_size", "16",
        "--attack_iter", "2", cwd=tmp_path,
        env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_PRETEND_GPU": "1", "TP_MAX_EPOCH": "2"})
    logdir = tmp_path / "train_log" / ("adv-cifar10-None-num-units-1-widening-factor-1-GPU-1-batch-16-"
                                       "iter2-epsilon8.0-step2.0")
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [20, 40]
    for s in stats:
        for k in ("eval-clean-error", "eval-10step-error"):
            assert 0.0 <= s[k] <= 1.0, (k, s)
        assert "eval-50step-error" not in s   # EnableCallbackIf: only every 10th epoch
    # the adversarially trained model learns the clean task; its training loss falls
    assert stats[-1]["eval-clean-error"] < 0.5
    assert stats[-1]["cross_entropy_loss"] < stats[0]["cross_entropy_loss"]
    assert stats[0]["learning_rate"] == pytest.approx(0.1 * 16 / 128)
    names = checkpoint_names(logdir)
    # the attack's loop and the inference towers reused the trained layers
    assert "res1.0/conv1/W" in names and not any("attack_loop" in n or "eval" in n for n in names)


def _start_data_server(tmp_path, env):
    """third_party/serve-data.py, the program's data server (send_dataflow_zmq), started first as
    INSTRUCTIONS.md says; the trainer connects its RemoteDataZMQ later."""
    log = open(tmp_path / "serve-data.log", "w")
    proc = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "_run.py"), os.path.join(ADV, "third_party", "serve-data.py"),
         "--data", str(tmp_path / "data" / "ilsvrc"), "--batch", "256", "--no-zmq-ops"],
        cwd=str(tmp_path), env=_env(env), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
        start_new_session=True)
    return proc, log


@pytest.mark.slow
def test_adversarial_training_imagenet_horovod_zmq(tmp_path):
    """ImageNet-Adversarial-Training's main.py: HorovodTrainer (one rank, a stand-in for Horovod),
    training data from the ZMQ data server, Horovod-style evaluation (HorovodClassificationError's
    placeholder + hvd.allreduce, run with .eval(feed_dict)) of a clean and a PGD inference tower,
    then --eval (eval_on_ILSVRC12, a PGD attack in a PredictConfig's tower) and --eval-directory."""
    # the ResNet-50 of the program on 224x224 images; batches capped at 2, three training steps.
    # --batch 256 keeps the program's learning rate (0.1 * (total_batch // 256)) above 0
    _tp_data.write_ilsvrc12(str(tmp_path / "data" / "ilsvrc"), meta_dir=str(tmp_path / "data" / "ilsvrc_metadata"),
                         n_val=4)
    env = {"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_FAKE_HOROVOD": "1", "TP_BATCH_SIZE": "2",
           "TP_MAX_EPOCH": "1", "TP_STEPS_PER_EPOCH": "3"}
    server, log = _start_data_server(tmp_path, env)
    try:
        out = run(os.path.join(ADV, "main.py"), "--data", str(tmp_path / "data" / "ilsvrc"), "--batch", "256",
                  "--no-zmq-ops", "--attack-iter", "1", cwd=tmp_path, env=env, timeout=1800)
    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
        log.close()
    assert "Sending datapoints to ipc://@imagenet-train-b256" in (tmp_path / "serve-data.log").read_text()
    logdir = tmp_path / "train_log" / "PGD-ResNet50-Batch256-1GPUs-iter1-epsilon16.0-step1.0"
    (stats,) = stats_of(logdir)
    assert stats["global_step"] == 3 and stats["learning_rate"] == pytest.approx(0.1)
    for name in ("eval-clean", "eval-10step"):
        for metric in ("top1-error", "top5-error", "attack-success-rate"):
            assert 0.0 <= stats[f"{name}-{metric}"] <= 1.0, (name, metric, stats)
    assert stats["eval-clean-attack-success-rate"] == 0.0   # NoOpAttacker's target label is -1
    assert not any(k.startswith("eval-50step") for k in stats)
    assert "HorovodClassificationError._setup_graph builds TF1 graph ops" in out
    assert np.isfinite(stats["xentropy-loss"]) and stats["l2_regularize_loss"] > 0

    ckpt = str(logdir / "checkpoint")
    out = run(os.path.join(ADV, "main.py"), "--eval", "--load", ckpt, "--data", str(tmp_path / "data" / "ilsvrc"),
              "--batch", "2", "--attack-iter", "2", cwd=tmp_path, env=env, timeout=1800)
    found = {k: float(v) for k, v in re.findall(r"(Top1 Error|Top5 Error|Attack Success Rate): ([0-9.eE+-]+)", out)}
    assert set(found) == {"Top1 Error", "Top5 Error", "Attack Success Rate"}, out[-3000:]
    assert all(0.0 <= v <= 1.0 for v in found.values())

    run(os.path.join(ADV, "main.py"), "--eval-directory", str(tmp_path / "data" / "ilsvrc" / "val"), "--load", ckpt,
        "--batch", "2", "--prediction-file", str(tmp_path / "predictions.txt"), cwd=tmp_path, env=env, timeout=1800)
    lines = (tmp_path / "predictions.txt").read_text().split()
    assert len(lines) == 4 and all(0 <= int(line.rsplit(",", 1)[1]) < 1000 for line in lines)
