"""The example scripts run end to end (in subprocesses, as users run them)."""
import glob
import json
import os
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "examples", "*", "*.py"))
                 if "__main__" in open(p).read())
# The flags every training example shares; the exceptions and why.
COMMON_FLAGS = ["--batch", "--gpus", "--steps-per-epoch", "--epochs", "--logdir", "--fake"]
NOT_APPLICABLE = {
    "examples/mnist/mnist-multiworker.py": {"--gpus"},   # one process per device: kerastrainer-run -np N
    "examples/cifar/cifar10_cnn_slurm.py": {"--gpus"},   # one process per device: srun / kerastrainer-run
    "examples/lms/train-under-budget.py": set(COMMON_FLAGS),   # a memory demonstration, not a training recipe
}

# Runs a script's --help as `python script --help` does, then reports what was imported.
HELP_WRAPPER = """
import json, os, runpy, sys
path = sys.argv[1]
sys.argv = [path, '--help']
sys.path.insert(0, os.path.dirname(os.path.abspath(path)))
code = 0
try:
    runpy.run_path(path, run_name='__main__')
except SystemExit as e:
    code = e.code
heavy = sorted(m for m in ('tensorflow', 'keras') if m in sys.modules)
sys.stdout.flush()
print('@@RESULT@@' + json.dumps({'code': code, 'heavy': heavy}))
"""


def run_script(path, *args, timeout=600, tf_log_level="2"):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL=tf_log_level, PYTHONUNBUFFERED="1")
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
    r = run_script("examples/mnist/digits-convnet.py", "--epochs", "2", "--logdir", logdir, tf_log_level="0")
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["epoch_num"] for s in stats] == [1, 2]
    assert stats[-1]["validation_error"] < stats[0]["validation_error"] or stats[-1]["validation_error"] < 0.5
    # the learning rate the epochs trained with (3e-3 until epoch 8)
    assert [s["learning_rate"] for s in stats] == [pytest.approx(3e-3)] * 2
    # quiet, useful output: one layer table, speed and time left, and no TensorFlow
    # C++ warning when the run ends (the input queue used to cancel a pending enqueue)
    assert r.stdout.count("Layers of the model:") == 1 and "conv0 input" not in r.stdout
    assert "throughput/samples_per_sec" in r.stdout and "Estimated time left" in r.stdout
    assert "rendezvous" not in r.stderr and "CANCELLED" not in r.stderr


def test_dcgan_digits_trains_both_objectives_and_writes_sample_grids(tmp_path):
    logdir = str(tmp_path / "dcgan")
    run_script("examples/gan/dcgan-digits.py", "--epochs", "2", "--logdir", logdir)
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["epoch_num"] for s in stats] == [1, 2]
    for s in stats:
        assert np.isfinite(s["d_loss"]) and np.isfinite(s["g_loss"]) and 0 <= s["d_accuracy"] <= 1
        # each optimizer's learning rate, by objective
        assert s["d_loss/learning_rate"] == pytest.approx(2e-4) and s["g_loss/learning_rate"] == pytest.approx(1e-3)
    grids = sorted(os.listdir(os.path.join(logdir, "samples")))
    assert grids == ["epoch-001.png", "epoch-002.png"]
    png = open(os.path.join(logdir, "samples", grids[-1]), "rb").read()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 1000
    assert glob.glob(os.path.join(logdir, "checkpoint-*.index"))


@pytest.mark.slow
def test_mnist_convnet_fake_and_resume(tmp_path):
    logdir = str(tmp_path / "mnist")
    short = ["--fake", "--steps-per-epoch", "5", "--logdir", logdir]
    run_script("examples/mnist/mnist-convnet.py", "--epochs", "1", *short)
    r = run_script("examples/mnist/mnist-convnet.py", "--epochs", "2", *short)
    assert "Auto-resume: resuming" in r.stdout and "training continues at epoch 2" in r.stdout
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert [s["epoch_num"] for s in stats] == [1, 2]


@pytest.mark.slow
def test_cifar10_resnet_two_towers_fake(tmp_path):
    logdir = str(tmp_path / "cifar")
    run_script("examples/cifar/cifar10-resnet.py", "--fake", "--epochs", "1", "--steps-per-epoch", "3", "-n", "1",
               "--gpus", "2", "--logdir", logdir)
    stats = json.load(open(os.path.join(logdir, "stats.json")))
    assert stats[-1]["global_step"] == 3 and "validation_error" in stats[-1]


def test_every_example_is_covered():
    assert len(SCRIPTS) >= 9, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_answers_without_importing_tensorflow(script):
    r = subprocess.run([sys.executable, "-c", HELP_WRAPPER, script], capture_output=True, text=True, cwd=ROOT,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert "@@RESULT@@" in r.stdout, r.stderr[-3000:]
    text, result = r.stdout.split("@@RESULT@@")
    result = json.loads(result)
    assert result["code"] in (0, None), r.stderr[-3000:]
    assert result["heavy"] == [], f"{script} --help imported {result['heavy']}: parse arguments first"
    assert text.startswith("usage:")
    missing = [f for f in COMMON_FLAGS if f not in text and f not in NOT_APPLICABLE.get(script, ())]
    assert not missing, f"{script} lacks the common flags {missing}"


def test_old_flag_names_are_aliases(tmp_path):
    r = subprocess.run([sys.executable, "-c", HELP_WRAPPER, "examples/cifar/cifar10_cnn_mgpu.py"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "--gpus GPUS, --mgpu GPUS" in r.stdout and "--batch BATCH, --batch-size BATCH" in r.stdout
    r = subprocess.run([sys.executable, "-c", HELP_WRAPPER, "examples/cifar/cifar10-resnet.py"],
                       capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert "--steps-per-epoch STEPS_PER_EPOCH, --steps STEPS_PER_EPOCH" in r.stdout
