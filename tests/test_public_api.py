"""The public API: what `from kerastrainer import *` gives a tensorpack user."""
import subprocess
import sys


def test_star_import_gives_the_tensorpack_names():
    code = ("from kerastrainer import *\n"
            "names = ['ModelDesc', 'TrainConfig', 'AutoResumeTrainConfig', 'launch_train_with_config',\n"
            "         'SimpleTrainer', 'SyncMultiGPUTrainerReplicated', 'SyncMultiGPUTrainerParameterServer',\n"
            "         'QueueInput', 'StagingInput', 'FeedInput', 'TFDatasetInput', 'DummyConstantInput',\n"
            "         'Conv2D', 'FullyConnected', 'BatchNorm', 'argscope', 'LinearWrap', 'regularize_cost',\n"
            "         'ModelSaver', 'InferenceRunner', 'ScalarStats', 'ClassificationError',\n"
            "         'ScheduledHyperParamSetter', 'SmartInit', 'PredictConfig', 'OfflinePredictor',\n"
            "         'BatchData', 'MultiProcessRunnerZMQ', 'dataset', 'imgaug', 'logger',\n"
            "         'add_moving_summary', 'get_current_tower_context', 'TowerContext']\n"
            "missing = [n for n in names if n not in globals()]\n"
            "assert not missing, missing\n"
            "print('ok')\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip().endswith("ok")


def test_plain_import_stays_tf_free():
    code = "import sys, kerastrainer, kerastrainer.dataflow; print('tensorflow' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "False", r.stderr[-2000:]


def test_dataset_readers_of_tensorpack_examples():
    from kerastrainer.dataflow import dataset
    names = ["Mnist", "FashionMnist", "Cifar10", "Cifar100", "ILSVRC12", "ILSVRC12Files", "ILSVRCMeta",
             "SVHNDigit", "Caltech101Silhouettes"]
    assert not [n for n in names if n not in dataset.__all__ or not hasattr(dataset, n)]
