"""Loading weights: npz by name, checkpoints, and the errors for bad files."""
import logging
import os

import numpy as np
import pytest

from _models import MLP, LinearData, weights_of
from kerastrainer.callbacks import ModelSaver
from kerastrainer.predict import OfflinePredictor, PredictConfig
from kerastrainer.tfutils import CheckpointLoadError, SmartInit
from kerastrainer.train import SimpleTrainer, TrainConfig, launch_train_with_config
from kerastrainer.utils import logger


def _train(logdir, epochs=1, session_init=None, model=None):
    logger.set_logger_dir(logdir, "d")
    t = SimpleTrainer()
    launch_train_with_config(TrainConfig(model=model or MLP(), dataflow=LinearData(), callbacks=[ModelSaver()],
                                         extra_callbacks=[], monitors=[], session_init=session_init,
                                         max_epoch=epochs), t)
    logger.unset_logger_dir()
    return t


def test_npz_loads_by_name_and_warns_about_the_rest(tmp_path, caplog):
    t = _train(str(tmp_path / "a"))
    w = weights_of(t)
    path = str(tmp_path / "w.npz")
    np.savez(path, **{"fc1/W": w["fc1/W"], "fc1/b": w["fc1/b"], "unused/W": np.zeros(3)})
    pred = OfflinePredictor(PredictConfig(model=MLP(), session_init=path, input_names=["x"],
                                          output_names=["prob"]))
    loaded = pred._target.named_variables()
    np.testing.assert_array_equal(loaded["fc1/W"].numpy(), w["fc1/W"])
    assert not np.array_equal(loaded["fc2/W"].numpy(), w["fc2/W"])  # not in the file: initial value


def test_npz_shape_mismatch_is_an_error(tmp_path):
    path = str(tmp_path / "w.npz")
    np.savez(path, **{"fc1/W": np.zeros((3, 3), "float32")})
    with pytest.raises(CheckpointLoadError, match="'fc1/W' has shape \\(8, 16\\) in the model but \\(3, 3\\)"):
        OfflinePredictor(PredictConfig(model=MLP(), session_init=path, output_names=["prob"]))


def test_npz_values_a_cast_would_change_are_an_error(tmp_path):
    path = str(tmp_path / "w.npz")
    w = np.zeros((8, 16))
    w[2, 3] = 1e300                  # float64 -> the float32 variable: inf
    np.savez(path, **{"fc1/W": w})
    with pytest.raises(CheckpointLoadError, match=r"variable 'fc1/W': the value 1e\+300 at index \(2, 3\).*would "
                                                  r"make it inf"):
        OfflinePredictor(PredictConfig(model=MLP(), session_init=path, output_names=["prob"]))
    w[2, 3] = 0.5                    # rounding to float32 is fine
    np.savez(path, **{"fc1/W": w})
    pred = OfflinePredictor(PredictConfig(model=MLP(), session_init=path, output_names=["prob"]))
    assert pred._target.named_variables()["fc1/W"].numpy()[2, 3] == 0.5


def test_missing_files_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.npz"):
        SmartInit(str(tmp_path / "nope.npz"))
    with pytest.raises(FileNotFoundError, match="No checkpoint in directory"):
        SmartInit(str(tmp_path))
    with pytest.raises(FileNotFoundError, match="missing"):
        SmartInit(str(tmp_path / "checkpoint-5"))


def test_checkpoint_of_another_shape_is_an_error(tmp_path):
    _train(str(tmp_path / "a"))
    with pytest.raises(CheckpointLoadError, match="does not fit the model"):
        OfflinePredictor(PredictConfig(model=MLP(dim=5), session_init=str(tmp_path / "a"), input_names=["x"],
                                       output_names=["prob"]))


def test_corrupt_checkpoint_is_an_error(tmp_path):
    _train(str(tmp_path / "a"))
    prefix = SmartInit(str(tmp_path / "a")).path
    with open(prefix + ".data-00000-of-00001", "r+b") as f:
        f.truncate(10)
    with pytest.raises(CheckpointLoadError, match="corrupt"):
        OfflinePredictor(PredictConfig(model=MLP(), session_init=prefix, output_names=["prob"]))


def test_session_init_continues_from_a_checkpoint(tmp_path):
    t1 = _train(str(tmp_path / "a"), epochs=2)
    t2 = _train(str(tmp_path / "b"), epochs=0, session_init=str(tmp_path / "a"))
    for k, v in weights_of(t1).items():
        np.testing.assert_array_equal(weights_of(t2)[k], v)
    assert t2.global_step == t1.global_step
    assert os.path.isdir(str(tmp_path / "b"))


def test_log_dir_without_its_pointer_file_still_loads_the_newest_checkpoint(tmp_path):
    t1 = _train(str(tmp_path / "a"), epochs=2)
    os.remove(str(tmp_path / "a" / "checkpoint"))  # the pointer is lost; the checkpoint files remain
    init = SmartInit(str(tmp_path / "a"))
    assert os.path.basename(init.path) == f"checkpoint-{t1.global_step}"


def _predictor(init, model=None):
    return OfflinePredictor(PredictConfig(model=model or MLP(), session_init=init, input_names=["x"],
                                          output_names=["prob"]))


def test_partial_checkpoint_loads_on_purpose_warn_and_plain_ones_refuse(tmp_path, kt_log):
    """A checkpoint that leaves a variable of the model unrestored: an error, unless the load is
    partial on purpose (SaverRestoreRelaxed's ignore list, ignore_mismatch=True)."""
    from kerastrainer.tfutils.sessinit import SaverRestoreRelaxed
    from kerastrainer.tfutils.varmanip import save_chkpt_vars
    w = weights_of(_train(str(tmp_path / "a")))
    prefix = str(tmp_path / "fc1_only" / "ckpt")
    os.makedirs(os.path.dirname(prefix))
    save_chkpt_vars({k: v for k, v in w.items() if k.startswith("fc1/")}, prefix)   # a TF1-style checkpoint
    with pytest.raises(CheckpointLoadError, match=r"(?s)2 variable\(s\) of the model are not in the checkpoint: "
                                                  r"fc2/W \[16, 3\], fc2/b \[3\].*ignore_mismatch=True"):
        _predictor(prefix)
    for init in (SmartInit(prefix, ignore_mismatch=True), SaverRestoreRelaxed(str(tmp_path / "a"), ignore=["fc2/W:0"])):
        kt_log.clear()
        loaded = _predictor(init)._target.named_variables()
        np.testing.assert_array_equal(loaded["fc1/W"].numpy(), w["fc1/W"])
        assert not np.array_equal(loaded["fc2/W"].numpy(), w["fc2/W"])
        warned = kt_log.at_level(logging.WARNING)
        assert len(warned) == 1 and "fc2/W [16, 3]" in warned[0] and "keep their current values" in warned[0], warned


def test_a_checkpoint_with_more_variables_than_the_model_loads_it_whole_with_a_warning(tmp_path, kt_log):
    w = weights_of(_train(str(tmp_path / "a")))
    prefix = str(tmp_path / "more" / "ckpt")
    os.makedirs(os.path.dirname(prefix))
    from kerastrainer.tfutils.varmanip import save_chkpt_vars
    save_chkpt_vars(dict(w, **{"aux/W": np.zeros((2, 2), "float32")}), prefix)
    loaded = _predictor(prefix)._target.named_variables()
    for k, v in w.items():
        np.testing.assert_array_equal(loaded[k].numpy(), v)
    assert any("not in the model: aux/W [2, 2]" in m for m in kt_log.at_level(logging.WARNING)), kt_log.text()


def test_dict_of_automatic_keras_names_loads_into_the_model_built_again():
    import keras
    from kerastrainer.tfutils.sessinit import DictRestore
    from kerastrainer.tfutils.tower_func import ModelVariables
    from kerastrainer.tfutils.layer_store import LayerStore

    class Target:
        def __init__(self):
            self.model = keras.Sequential([keras.Input((5, 5, 1)), keras.layers.Conv2D(2, 3),
                                           keras.layers.Conv2D(2, 3)])
            self.mv = ModelVariables(LayerStore(), {"net": self.model})

        def named_variables(self):
            return self.mv.named_variables()

    first, second = Target(), Target()
    arrays = {k: np.random.RandomState(1).randn(*v.shape).astype("float32") for k, v in first.named_variables().items()}
    assert set(arrays) != set(second.named_variables())    # conv2d_2 where the dict has conv2d
    DictRestore(arrays).init(second)
    for (k1, v1), v2 in zip(arrays.items(), second.named_variables().values()):
        np.testing.assert_array_equal(v2.numpy(), v1, err_msg=k1)
