"""Run a ported program on small generated MNIST-shaped data (nothing downloaded).

``python -m keras_programs.fake_mnist PROGRAM.py [args...]`` replaces
``keras.datasets.mnist.load_data`` (also reached as ``tf.keras.datasets.mnist.load_data``)
by :func:`load_data`, then runs ``PROGRAM.py`` as ``__main__``.
"""
import runpy
import sys

import numpy as np

NUM_CLASSES = 10


def fake_digits(n: int, seed: int):
    """``(uint8 images (n, 28, 28), uint8 labels)``: a bright 6x6 patch at a class-dependent
    place over noise, a pattern a small convnet learns in a few dozen steps."""
    rng = np.random.RandomState(seed)
    y = rng.randint(0, NUM_CLASSES, n)
    x = rng.rand(n, 28, 28).astype("float32") * 100
    for i, c in enumerate(y):
        r, col = 2 + (c // 5) * 12, 2 + (c % 5) * 5
        x[i, r:r + 6, col:col + 6] += 155
    return x.astype("uint8"), y.astype("uint8")


def load_data(path="mnist.npz", n_train=2048, n_test=512):
    """``keras.datasets.mnist.load_data``'s return, generated (``path`` is not read)."""
    return fake_digits(n_train, 1), fake_digits(n_test, 2)


def install() -> None:
    import keras
    keras.datasets.mnist.load_data = load_data


if __name__ == "__main__":
    install()
    program = sys.argv[1]
    sys.argv = sys.argv[1:]
    runpy.run_path(program, run_name="__main__")
