"""tensorpack 0.11's examples/DoReFa-Net/svhn-digit-dorefa.py (with its dorefa.py), ported with the
import change and the edits TF2 forces (listed in the scripts' headers), trains briefly on tiny SVHN
.mat files made at test time. Its ``remap_variables(binarize_weight)`` must binarize the kernels of
conv1..conv6 (the custom getter reaches kerastrainer's layers), and the binarized network must learn."""
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
def test_svhn_digit_dorefa(tmp_path):
    _data.write_svhn(str(tmp_path / "data"))  # train 256 + extra 128 images: 3 batches of 128 per epoch
    out = run("svhn-digit-dorefa.py", cwd=tmp_path, timeout=900,
              env={"KERASTRAINER_DATASET": str(tmp_path / "data"), "TP_MAX_EPOCH": "2"})
    # the program's getter saw each weight under its TF1 name and binarized the middle layers' kernels
    binarized = {line.split("Binarizing weight ")[1].split()[0] for line in out.splitlines()
                 if "Binarizing weight " in line}
    assert binarized == {f"conv{i}/W" for i in range(1, 7)}
    assert "custom getter" not in out
    logdir = tmp_path / "train_log" / "svhn-dorefa-1,2,4"
    stats = stats_of(logdir)
    assert [s["global_step"] for s in stats] == [3, 6]
    assert all(np.isfinite(s["cost"]) for s in stats)
    assert stats[-1]["validation_error"] < stats[0]["validation_error"]   # the 1-bit network learns
    # the variables stay full precision: only what the layers compute with is binarized
    from kerastrainer.tfutils.varmanip import load_chkpt_vars
    from kerastrainer.tfutils import get_checkpoint_path
    weights = load_chkpt_vars(get_checkpoint_path(str(logdir / "checkpoint")))
    w = weights["conv1/W"]
    assert len(np.unique(np.abs(w))) > 2
