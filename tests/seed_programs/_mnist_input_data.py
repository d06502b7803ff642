"""Stands in for ``tensorflow.examples.tutorials.mnist.input_data`` (gone from TF2; tests download
nothing): ``read_data_sets(path)`` gives MNIST-shaped synthetic data with the same
``train.next_batch(n)`` / ``test.next_batch(n, shuffle=False)`` (tflms_mnist_session_strict.py's
``SyntheticMnist``). A test helper for the ported TFLMS tutorial, not library code."""
from tflms_mnist_session_strict import SyntheticMnist


def read_data_sets(train_dir, *args, **kwargs):
    """``input_data.read_data_sets(train_dir)``: the synthetic set (``train_dir`` is not read)."""
    return SyntheticMnist()
