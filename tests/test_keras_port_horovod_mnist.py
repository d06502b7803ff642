"""horovod's ``tensorflow2_keras_mnist.py`` ported to ``KerasModel`` (tests/keras_programs/), run
under ``kerastrainer-run -np 2`` on generated MNIST-shaped digits, against the original's plain
``keras.Model.fit`` in one process on the same global batch, learning rates, steps, data and seed.

"Within noise": test accuracy within 0.05 of ``fit``'s (both runs draw their own dropout masks
and, between one process and two, shuffle the data alike but run different kernels).
"""
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAM = os.path.join(HERE, "keras_programs", "horovod_tf2_keras_mnist.py")


def _run(out, epochs, steps, launcher):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KT_PORT_OUT=str(out), KT_PORT_EPOCHS=str(epochs),
               KT_PORT_STEPS=str(steps),
               PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE] + [
                   p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    if launcher == "keras":
        env["KT_PORT_MODE"], env["KT_PORT_SIZE"] = "keras", "2"
        cmd = [sys.executable, "-m", "keras_programs.fake_mnist", PROGRAM]
    else:
        cmd = [sys.executable, "-m", "kerastrainer.run", "-np", "2", "--grace", "5",
               sys.executable, "-m", "keras_programs.fake_mnist", PROGRAM]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return json.loads((out / "score.json").read_text()), proc.stdout


@pytest.mark.slow
def test_port_runs_on_two_workers(tmp_path):
    score, output = _run(tmp_path, 1, 2, "kerastrainer-run")
    assert "[0] " in output and "[1] " in output  # both ranks ran
    assert "rank 0 of 2 (chief), 2 replica(s) in sync" in output
    assert "trains on its part of each global batch" in output  # the dataset's batch is global
    assert (tmp_path / "checkpoint-1.h5").is_file()  # ModelCheckpoint on rank 0
    assert score["history"]["learning_rate"] == pytest.approx([0.001])  # the warm-up's first epoch
    assert 0.0 <= score["accuracy"] <= 1.0


@pytest.mark.slow
def test_port_reaches_fits_accuracy(tmp_path):
    (tmp_path / "kt").mkdir()
    (tmp_path / "keras").mkdir()
    ours, _ = _run(tmp_path / "kt", 3, 16, "kerastrainer-run")
    ref, _ = _run(tmp_path / "keras", 3, 16, "keras")
    assert ours["history"]["learning_rate"] == pytest.approx(ref["history"]["learning_rate"], rel=1e-6)
    assert abs(ours["accuracy"] - ref["accuracy"]) <= 0.05, (ours, ref)
    assert ref["accuracy"] > 0.6 and ours["accuracy"] > 0.6
