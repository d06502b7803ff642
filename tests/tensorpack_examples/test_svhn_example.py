"""tensorpack 0.11's examples/basics/svhn-digit-convnet.py, ported with the import change only,
trains briefly on tiny SVHN .mat files made at test time (see test_tensorpack_examples.py)."""
import os
import sys

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import _data  # noqa: E402
from test_tensorpack_examples import run, stats_of  # noqa: E402

pytest.importorskip("scipy.io")


@pytest.mark.slow
def test_svhn_digit_convnet(tmp_path):
    _data.write_svhn(str(tmp_path / "data"))  # train 256 + extra 128 images: 3 batches of 128 per epoch
    out = run("svhn-digit-convnet.py", cwd=tmp_path,
              env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "3"})
    assert "AdamOptimizer translated to keras.optimizers.Adam" in out
    logdir = tmp_path / "train_log" / "svhn-digit-convnet"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [3, 6, 9]
    # the bar's row says the class: the model learns it far above chance (0.1), and the costs fall
    assert stats[-1]["validation_accuracy"] > 0.5
    assert stats[-1]["validation_cost"] < stats[0]["validation_cost"]
    assert stats[-1]["cross_entropy_loss"] < stats[0]["cross_entropy_loss"]
    assert np.isfinite(stats[-1]["regularize_cost"]) and stats[-1]["learning_rate"] == pytest.approx(1e-3)
    assert "param-summary/fc0/W/rms" in stats[-1]  # add_param_summary(('.*/W', ['histogram', 'rms']))
    assert os.path.isfile(logdir / "checkpoint")
