"""The example scripts run end to end (in subprocesses, as users run them)."""
import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_script(path, *args, timeout=600):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    r = subprocess.run([sys.executable, os.path.join(ROOT, path), *args], capture_output=True, text=True,
                       timeout=timeout, env=env, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, f"{path} failed:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


@pytest.mark.slow
def test_readme_main_job_reaches_95_percent(tmp_path):
    logdir = str(tmp_path / "digits")
    run_script("examples/mnist/digits-convnet.py", "--logdir", logdir)
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert len(stats) == 12
    assert 1 - stats[-1]["validation_error"] >= 0.95
    assert any(f.startswith("events.out.tfevents") for f in os.listdir(logdir))
    assert os.path.isfile(os.path.join(logdir, "checkpoint"))


def test_digits_short_run(tmp_path):
    logdir = str(tmp_path / "digits")
    run_script("examples/mnist/digits-convnet.py", "--epochs", "2", "--logdir", logdir)
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["epoch_num"] for s in stats] == [1, 2]
    assert stats[-1]["validation_error"] < stats[0]["validation_error"] or stats[-1]["validation_error"] < 0.5


def test_mnist_convnet_fake_and_resume(tmp_path):
    logdir = str(tmp_path / "mnist")
    run_script("examples/mnist/mnist-convnet.py", "--fake", "--epochs", "1", "--logdir", logdir)
    r = run_script("examples/mnist/mnist-convnet.py", "--fake", "--epochs", "2", "--logdir", logdir)
    assert "resumes from it" in r.stdout
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["epoch_num"] for s in stats] == [1, 2]


@pytest.mark.slow
def test_cifar10_resnet_two_towers_fake(tmp_path):
    logdir = str(tmp_path / "cifar")
    run_script("examples/cifar/cifar10-resnet.py", "--fake", "--epochs", "1", "--steps", "3", "-n", "1",
               "--gpus", "2", "--logdir", logdir)
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert stats[-1]["global_step"] == 3 and "validation_error" in stats[-1]
