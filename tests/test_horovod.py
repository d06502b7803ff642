"""HorovodTrainer: the error without Horovod, and 2 ranks under horovodrun where Horovod exists.

Horovod is not installed in CI (its last release does not build against TF 2.21), so
the training test is skipped there, with that reason.
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

from test_multiworker import NUM_BATCHES, load, reference_training


def _horovod_importable():
    if importlib.util.find_spec("horovod") is None:
        return False, "Horovod is not installed (its last release, 0.28.1, does not build against TF 2.21)"
    try:
        import horovod.tensorflow  # noqa: F401
    except Exception as e:  # a build for another TF fails with undefined symbols
        return False, f"horovod.tensorflow cannot be imported: {e}"
    return True, ""


HAVE_HOROVOD, WHY_NOT = _horovod_importable()


@pytest.mark.skipif(HAVE_HOROVOD, reason="Horovod is importable here: the constructor does not fail")
def test_constructor_without_horovod_says_so_and_names_the_alternative():
    from kerastrainer.train.horovod import HorovodTrainer, HorovodUnavailableError

    with pytest.raises(HorovodUnavailableError) as e:
        HorovodTrainer()
    msg = str(e.value)
    assert "import horovod.tensorflow" in msg and "MultiWorkerTrainer" in msg and "kerastrainer-run" in msg
    assert isinstance(e.value, ImportError)


@pytest.mark.slow
@pytest.mark.skipif(not HAVE_HOROVOD or shutil.which("horovodrun") is None,
                    reason=WHY_NOT or "horovodrun is not on PATH")
@pytest.mark.parametrize("logdir", ["on-chief", "same-on-every-rank"])
def test_two_ranks_under_horovodrun_train_like_one_process(tmp_path, logdir):
    # same-on-every-rank: logger.set_logger_dir(dir, 'k') on both ranks; rank 1 died with
    # LogDirLockedError before the lock knew Horovod's ranks
    out = tmp_path / "out"
    out.mkdir()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "test_multiworker.py")
    cmd = ["horovodrun", "--gloo", "-np", "2", "-H", "localhost:2", sys.executable, script, "worker",
           "--trainer", "horovod", "--out", str(out), "--logdir", str(tmp_path / "log"), "--epochs", "2"]
    cmd += ["--same-logdir"] if logdir == "same-on-every-rank" else []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    try:
        output = proc.communicate(timeout=300)[0].decode(errors="replace")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    assert proc.returncode == 0, output
    spe = NUM_BATCHES // 2
    for r in range(2):
        rec = json.loads((out / f"record-{r}.json").read_text())
        assert (rec["global_step"], rec["num_replicas"]) == (2 * spe, 2)
    init = [load(out / f"init-{r}.npz") for r in range(2)]
    final = [load(out / f"final-{r}.npz") for r in range(2)]
    for k in init[0]:
        np.testing.assert_array_equal(init[0][k], init[1][k])
        np.testing.assert_array_equal(final[0][k], final[1][k])
    expected = reference_training(init[0], 2 * spe)
    for k, v in expected.items():
        np.testing.assert_allclose(final[0][k], v, rtol=1e-5, atol=1e-6)
    assert (tmp_path / "log" / "log.log").is_file()
    assert "LogDirLockedError" not in output
    assert ("Rank 1 of 2 (MPI): the log directory" in output) == (logdir == "same-on-every-rank"), output
