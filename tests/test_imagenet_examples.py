"""The ImageNet examples end to end, on a tiny ILSVRC12 directory of generated JPEGs.

The directory has the real layout (``train/<wnid>/*.JPEG``, a flat ``val/`` with
``val.txt``, ``synsets.txt``). The scripts run in subprocesses with timeouts, on
ResNet-18 (ModelDesc) / ResNet-50 (Keras) at 32 px, batch 2-4, a few steps: train
with validation and a checkpoint, resume from it, evaluate it; ``--fake``; two towers
on logical CPU devices. The pipeline's pieces (fused colour jitter, the schedule,
the DataFlows, the on-device normalisation) are checked directly.
"""
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(REPO, "examples", "imagenet")
MODELDESC_SCRIPT = os.path.join(EXAMPLES, "imagenet-resnet.py")
KERAS_SCRIPT = os.path.join(EXAMPLES, "imagenet-resnet-keras.py")
sys.path.insert(0, EXAMPLES)

import imagenet_utils as U  # noqa: E402

WNIDS = ["n01440764", "n01443537", "n01484850"]
N_TRAIN_PER_CLASS = 6
N_VAL = 5
ERRORS_LINE = re.compile(r"Top-1 error: ([0-9.]+)\s+Top-5 error: ([0-9.]+)\s+\((\d+) images\)")


@pytest.fixture(scope="module")
def ilsvrc(tmp_path_factory):
    """A tiny ILSVRC12 root: 3 classes x 6 training JPEGs, 5 flat val JPEGs with val.txt."""
    root = tmp_path_factory.mktemp("ilsvrc12")
    rng = np.random.RandomState(0)

    def jpeg(path, label):
        h, w = rng.randint(40, 70, size=2)
        img = np.clip(rng.rand(h, w, 3) * 90 + label * 70, 0, 255).astype(np.uint8)
        assert cv2.imwrite(str(path), img)

    for label, wnid in enumerate(WNIDS):
        (root / "train" / wnid).mkdir(parents=True)
        for i in range(N_TRAIN_PER_CLASS):
            jpeg(root / "train" / wnid / f"{wnid}_{i}.JPEG", label)
    (root / "val").mkdir()
    lines = []
    for i in range(N_VAL):
        name = f"ILSVRC2012_val_{i + 1:08d}.JPEG"
        jpeg(root / "val" / name, i % 3)
        lines.append(f"{name} {i % 3}\n")
    (root / "val.txt").write_text("".join(lines))
    (root / "synsets.txt").write_text("".join(w + "\n" for w in WNIDS))
    return str(root)


def run_script(args, timeout=600, logical_cpus=None):
    """Run an example in a subprocess (its own process group, killed afterwards); return its output.

    ``logical_cpus``: split the CPU into that many logical devices before TF starts (towers).
    """
    script, rest = args[0], [str(a) for a in args[1:]]
    if script == "-m":  # a module: python -m <module> <args>
        cmd = [sys.executable, "-m"] + rest
    elif logical_cpus:
        boot = ("import sys, runpy, tensorflow as tf\n"
                "cpu = tf.config.list_physical_devices('CPU')[0]\n"
                f"tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * {logical_cpus})\n"
                "sys.argv = sys.argv[1:]\n"
                "runpy.run_path(sys.argv[0], run_name='__main__')\n")
        cmd = [sys.executable, "-c", boot, script] + rest
    else:
        cmd = [sys.executable, script] + rest
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd[:4])} timed out after {timeout} s; output tail:\n{out[-4000:]}")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # data workers must not outlive the test
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, f"{' '.join(cmd[:4])} failed ({proc.returncode}):\n{out[-6000:]}"
    return out


def read_stats(logdir):
    with open(os.path.join(logdir, "stats.json")) as f:
        return json.load(f)


def checkpoint_steps(logdir):
    return sorted(int(m.group(1)) for f in os.listdir(logdir) if (m := re.match(r"checkpoint-(\d+)\.index$", f)))


# ------------------------------------------------------------------------- pipeline pieces

def test_learning_rate_schedule_follows_goyal_et_al():
    epochs, warmup = U.learning_rate_schedule(1024, steps_per_epoch=100)
    assert [e for e, _ in epochs] == [0, 30, 60, 80]
    assert [v for _, v in epochs] == pytest.approx([0.4, 0.04, 0.004, 0.0004])
    assert [e for e, _ in warmup] == [0, 500] and [v for _, v in warmup] == pytest.approx([0.1, 0.4])
    epochs, warmup = U.learning_rate_schedule(256, steps_per_epoch=100)
    assert epochs[0] == (0, pytest.approx(0.1)) and warmup is None  # nothing to warm up to
    assert U.learning_rate_schedule(2048, 10, warmup_epochs=0)[1] is None


def test_image_preprocess_normalises_bgr_on_the_device(tf):
    img = np.random.RandomState(0).randint(0, 256, (2, 5, 5, 3)).astype(np.uint8)
    out = U.image_preprocess(tf.constant(img)).numpy()
    ref = (img[..., ::-1] / 255.0 - U.MEAN_RGB) / U.STD_RGB  # RGB order
    np.testing.assert_allclose(out[..., ::-1], ref, atol=1e-5)
    assert out.dtype == np.float32


def test_train_dataflow_sends_uint8_batches_from_workers(ilsvrc):
    ds = U.get_imagenet_dataflow(ilsvrc, "train", batch_size=4, image_size=32, num_proc=2)
    ds.reset_state()
    try:
        batches = [dp for _, dp in zip(range(6), ds)]
    finally:
        ds.close()
    for images, labels in batches:
        assert images.dtype == np.uint8 and images.shape == (4, 32, 32, 3)
        assert labels.dtype == np.int32 and labels.shape == (4,)
        assert set(labels.tolist()) <= {0, 1, 2}
    # colour follows the class: the generator made class c about 70 * c brighter
    means = {}
    for images, labels in batches:
        for im, lab in zip(images, labels):
            means.setdefault(int(lab), []).append(im.mean())
    assert len(means) >= 2
    ordered = [np.mean(means[c]) for c in sorted(means)]
    assert ordered == sorted(ordered)


def test_val_dataflow_is_one_exact_pass(ilsvrc):
    ds = U.get_imagenet_dataflow(ilsvrc, "val", batch_size=2, image_size=32, num_proc=2)
    ds.reset_state()
    try:
        for _ in range(2):  # every pass: each val image once, the last batch short
            batches = list(ds)
            assert [len(b[1]) for b in batches] == [2, 2, 1]
            labels = sorted(int(x) for _, lab in batches for x in lab)
            assert labels == sorted(i % 3 for i in range(N_VAL))
            assert all(b[0].shape[1:] == (32, 32, 3) and b[0].dtype == np.uint8 for b in batches)
    finally:
        ds.close()


# ------------------------------------------------------------------------- the scripts

@pytest.mark.slow
def test_modeldesc_fake_mode(tmp_path):
    logdir = str(tmp_path / "fake")
    out = run_script([MODELDESC_SCRIPT, "--fake", "--depth", 18, "--batch", 2, "--image-size", 32,
                      "--steps-per-epoch", 2, "--epochs", 1, "--logdir", logdir])
    assert "Training has finished" in out
    stats = read_stats(logdir)
    assert stats[-1]["global_step"] == 2 and np.isfinite(stats[-1]["cost"])
    assert "train-error-top1" in stats[-1] and "val-error-top1" not in stats[-1]  # no val set in --fake
    assert checkpoint_steps(logdir) == [2]


@pytest.mark.slow
def test_modeldesc_fake_mode_with_lms_recomputes_the_stem_and_the_residual_blocks(tmp_path):
    logdir = str(tmp_path / "lms")
    out = run_script([MODELDESC_SCRIPT, "--fake", "--depth", 18, "--batch", 2, "--image-size", 32,
                      "--steps-per-epoch", 2, "--epochs", 1, "--logdir", logdir, "--lms", "recompute"])
    assert "Training has finished" in out
    assert "9 block(s) found; 9 handled (stem=recompute, group0/block0=recompute" in out, out[-3000:]
    assert np.isfinite(read_stats(logdir)[-1]["cost"])


def test_multiworker_trainers_fail_clearly_when_unavailable(tmp_path):
    try:
        import horovod.tensorflow  # noqa: F401
        pytest.skip("Horovod is installed here")
    except ImportError:
        pass
    cmd = [sys.executable, MODELDESC_SCRIPT, "--fake", "--trainer", "horovod", "--logdir", str(tmp_path / "h")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode != 0
    assert "--trainer horovod is not available" in res.stderr and "multiworker" in res.stderr
    res = subprocess.run([sys.executable, MODELDESC_SCRIPT, "--batch", "2"], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0 and "--data" in res.stderr


@pytest.mark.slow
def test_modeldesc_train_resume_and_evaluate(ilsvrc, tmp_path):
    logdir = str(tmp_path / "r18")
    common = [MODELDESC_SCRIPT, "--data", ilsvrc, "--depth", 18, "--batch", 4, "--image-size", 32,
              "--steps-per-epoch", 2, "--data-workers", 1, "--logdir", logdir]
    run_script(common + ["--epochs", 1])
    stats = read_stats(logdir)
    assert [s["epoch_num"] for s in stats] == [1]
    for key in ("val-error-top1", "val-error-top5"):
        assert 0.0 <= stats[0][key] <= 1.0
    assert stats[0]["val-error-top5"] <= stats[0]["val-error-top1"]
    assert checkpoint_steps(logdir) == [2]

    # the second run continues from the saved epoch: epoch 2, global steps 3-4
    out = run_script(common + ["--epochs", 2])
    assert "Auto-resume: resuming" in out and "continues at epoch 2" in out
    assert "Start Epoch 2" in out and "Start Epoch 1 " not in out
    stats = read_stats(logdir)
    assert [s["epoch_num"] for s in stats] == [1, 2] and stats[-1]["global_step"] == 4
    assert checkpoint_steps(logdir) == [2, 4]

    # --eval of the last checkpoint gives the errors the last validation reported
    out = run_script([MODELDESC_SCRIPT, "--data", ilsvrc, "--depth", 18, "--batch", 2, "--image-size", 32,
                      "--data-workers", 1, "--eval", "--load", logdir])
    m = ERRORS_LINE.search(out)
    assert m, out[-3000:]
    assert int(m.group(3)) == N_VAL
    assert float(m.group(1)) == pytest.approx(stats[-1]["val-error-top1"], abs=1e-4)
    assert float(m.group(2)) == pytest.approx(stats[-1]["val-error-top5"], abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("trainer", ["replicated", "ps"])
def test_modeldesc_two_towers_on_logical_cpus(ilsvrc, tmp_path, trainer):
    logdir = str(tmp_path / trainer)
    out = run_script([MODELDESC_SCRIPT, "--data", ilsvrc, "--depth", 18, "--batch", 2, "--image-size", 32,
                      "--gpus", 2, "--trainer", trainer, "--steps-per-epoch", 2, "--epochs", 1,
                      "--data-workers", 1, "--logdir", logdir], logical_cpus=2)
    assert "2 replica(s)" in out and "Total batch 4 (2 per tower x 2 towers)" in out
    stats = read_stats(logdir)
    assert stats[-1]["global_step"] == 2 and np.isfinite(stats[-1]["cost"])
    assert 0.0 <= stats[-1]["val-error-top1"] <= 1.0


@pytest.mark.slow
def test_keras_train_resume_and_evaluate(ilsvrc, tmp_path):
    logdir = str(tmp_path / "keras50")
    common = [KERAS_SCRIPT, "--data", ilsvrc, "--batch", 2, "--image-size", 32, "--steps-per-epoch", 2,
              "--data-workers", 1, "--logdir", logdir]
    run_script(common + ["--epochs", 1], timeout=900)
    stats = read_stats(logdir)
    assert [s["epoch_num"] for s in stats] == [1]
    assert 0.0 <= stats[0]["val_error_top1"] <= 1.0 and 0.0 <= stats[0]["val_error_top5"] <= 1.0
    assert checkpoint_steps(logdir) == [2]

    out = run_script(common + ["--epochs", 2], timeout=900)
    assert "training resumes from it" in out and "Start Epoch 2" in out and "Start Epoch 1 " not in out
    stats = read_stats(logdir)
    assert [s["epoch_num"] for s in stats] == [1, 2] and stats[-1]["global_step"] == 4

    out = run_script([KERAS_SCRIPT, "--data", ilsvrc, "--batch", 2, "--image-size", 32, "--data-workers", 1,
                      "--eval", "--load", logdir], timeout=900)
    m = ERRORS_LINE.search(out)
    assert m, out[-3000:]
    assert int(m.group(3)) == N_VAL
    assert float(m.group(1)) == pytest.approx(stats[-1]["val_error_top1"], abs=1e-4)
    assert float(m.group(2)) == pytest.approx(stats[-1]["val_error_top5"], abs=1e-4)


@pytest.mark.slow
def test_keras_fake_mode(tmp_path):
    logdir = str(tmp_path / "kfake")
    run_script([KERAS_SCRIPT, "--fake", "--batch", 2, "--image-size", 32, "--steps-per-epoch", 2,
                "--epochs", 1, "--logdir", logdir], timeout=900)
    stats = read_stats(logdir)
    # Keras's names, as fit's History has them ('loss', the compiled metrics)
    assert stats[-1]["global_step"] == 2 and np.isfinite(stats[-1]["loss"]) and "error_top1" in stats[-1]
    assert checkpoint_steps(logdir) == [2]


@pytest.mark.slow
def test_modeldesc_multiworker_two_processes(tmp_path):
    """``--trainer multiworker`` under kerastrainer-run: 2 processes on 127.0.0.1, TF collectives."""
    pytest.importorskip("kerastrainer.train.multiworker")
    logdir = str(tmp_path / "mw")
    out = run_script(["-m", "kerastrainer.run", "-np", 2, sys.executable, MODELDESC_SCRIPT, "--fake", "--depth", 18,
                      "--batch", 2, "--image-size", 32, "--trainer", "multiworker", "--steps-per-epoch", 2,
                      "--epochs", 1, "--logdir", logdir], timeout=900)
    assert "Total batch 4 (2 per tower x 2 towers)" in out
    stats = read_stats(logdir)  # written by the chief only
    assert stats[-1]["global_step"] == 2 and np.isfinite(stats[-1]["cost"])
    assert checkpoint_steps(logdir) == [2]
