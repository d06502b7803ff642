"""The global-batch rule of ``KerasModel.fit``, for every input kind (a test client).

One small regression model, trained with SGD on the same 32 samples in the same order
from the same initial weights, given as numpy arrays, a ``tf.data.Dataset``, a Python
generator, a ``keras.utils.PyDataset`` or a DataFlow, with a global batch of 8. Every
run, on one device, two replicas or two workers, must end with the weights of
``keras.Model.fit`` on one device with ``batch_size=8``.

As a script (``kerastrainer-run -np 2 python batch_rule.py OUT KIND...``) each worker trains
each kind with its own ``MultiWorkerTrainer`` and rank 0 writes ``OUT/<kind>.npz``.
"""
import os
import sys

import numpy as np

N, DIM, BATCH, EPOCHS, LR = 32, 4, 8, 2, 0.05
KINDS = ("numpy", "tfdata", "generator", "pydataset", "dataflow")


def make_data():
    rng = np.random.RandomState(0)
    x = rng.randn(N, DIM).astype("float32")
    y = (x @ rng.randn(DIM, 1) + 0.1 * rng.randn(N, 1)).astype("float32")
    return x, y


def build():
    import keras
    keras.utils.set_random_seed(3)
    model = keras.Sequential([keras.Input((DIM,)), keras.layers.Dense(1)])
    model.compile(keras.optimizers.SGD(LR), "mse")
    return model


def fit_args(kind):
    """``(args, kwargs)`` of ``fit`` for one input kind: global batches of 8, in order."""
    import keras
    import tensorflow as tf
    from kerastrainer.dataflow import DataFromList
    x, y = make_data()
    batches = [(x[i:i + BATCH], y[i:i + BATCH]) for i in range(0, N, BATCH)]
    if kind == "numpy":
        return (x, y), dict(batch_size=BATCH, shuffle=False)
    if kind == "tfdata":
        return (tf.data.Dataset.from_tensor_slices((x, y)).batch(BATCH),), {}
    if kind == "generator":
        def gen():
            while True:
                yield from batches
        return (gen(),), dict(steps_per_epoch=len(batches))
    if kind == "pydataset":
        class Batches(keras.utils.PyDataset):
            def __len__(self):
                return len(batches)

            def __getitem__(self, i):
                return batches[i]
        return (Batches(),), dict(shuffle=False)   # (fit reorders a PyDataset's batches by default)
    if kind == "dataflow":
        return (DataFromList(batches, shuffle=False),), {}
    raise ValueError(kind)


def keras_reference():
    """The weights after ``keras.Model.fit`` on one device."""
    x, y = make_data()
    model = build()
    model.fit(x, y, batch_size=BATCH, epochs=EPOCHS, shuffle=False, verbose=0)
    return model.get_weights()


def train(kind, trainer=None):
    """The weights after ``KerasModel(model, trainer=trainer).fit`` on ``kind``."""
    from kerastrainer.keras import KerasModel
    model = build()
    args, kwargs = fit_args(kind)
    KerasModel(model, trainer=trainer).fit(*args, epochs=EPOCHS, verbose=0, extra_callbacks=[], monitors=[],
                                           **kwargs)
    return model.get_weights()


def main(out, kinds):
    from kerastrainer.train import MultiWorkerTrainer
    for kind in kinds:
        trainer = MultiWorkerTrainer()  # first thing: it configures TF's collectives
        weights = train(kind, trainer)
        if trainer.is_chief:
            np.savez(os.path.join(out, f"{kind}.npz"), *weights)
        print("DONE", kind, trainer.rank, trainer.size, flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
