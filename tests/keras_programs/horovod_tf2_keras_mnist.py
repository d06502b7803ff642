"""horovod's ``examples/tensorflow2/tensorflow2_keras_mnist.py``, ported to ``KerasModel``.

Origin: https://github.com/horovod/horovod/blob/master/examples/tensorflow2/tensorflow2_keras_mnist.py
(Copyright 2019 Uber Technologies, Inc., Apache License 2.0). Run it as horovod's is run,
with the launcher swapped: ``kerastrainer-run -np 2 python horovod_tf2_keras_mnist.py``
instead of ``horovodrun -np 2 python tensorflow2_keras_mnist.py``.

Edits, each marked ``# EDIT``. What a Horovod user changes to adopt kerastrainer:
- ``import horovod.tensorflow.keras as hvd`` / ``hvd.init()`` -> ``trainer = MultiWorkerTrainer()``
  (first thing: it joins the workers); ``hvd.rank()`` / ``hvd.size()`` -> ``trainer.rank`` /
  ``trainer.size``; the GPU pinning lines go (the trainer pins its local rank's GPU);
- ``hvd.DistributedOptimizer(opt)``, ``experimental_run_tf_function=False`` (Keras 3's compile
  refuses it), ``BroadcastGlobalVariablesCallback(0)`` and ``MetricAverageCallback()`` go: the
  trainer all-reduces the gradients, broadcasts the chief's variables and averages the loss;
- ``hvd.callbacks.LearningRateWarmupCallback(initial_lr=scaled_lr, warmup_epochs=3)`` ->
  ``keras.callbacks.LearningRateScheduler`` with the same linear warm-up, per epoch (Horovod's
  moves it each batch);
- ``.batch(128)`` -> ``.batch(128 * size)``: under Horovod a dataset's batch is each worker's,
  under ``KerasModel`` it is the global batch (Keras's rule), split over the workers;
- ``mnist_model.fit(dataset, ...)`` -> ``KerasModel(mnist_model, trainer=trainer).fit(dataset, ...)``.
For the test only: ``KT_PORT_EPOCHS`` / ``KT_PORT_STEPS`` (epochs, 24, and steps of an epoch on
one worker, 500) and ``KT_PORT_OUT`` (where rank 0 writes the checkpoints and ``score.json``:
``evaluate`` on the held-out digits that the original discards); the data come from
``keras_programs.fake_mnist`` (``load_data`` patched, nothing downloaded); a seed; a
``KT_PORT_MODE=keras`` mode that runs the original's plain ``mnist_model.fit`` in one process on
the same global batch, learning rate and steps as ``size`` workers (the reference).
"""
import json  # EDIT: the test's score file
import os  # EDIT: the test's settings
import sys

import tensorflow as tf

import keras  # EDIT: for the learning-rate warm-up

REFERENCE = os.environ.get("KT_PORT_MODE") == "keras"  # EDIT: the test's reference run
if not REFERENCE:
    from kerastrainer.keras import KerasModel  # EDIT: instead of import horovod.tensorflow.keras as hvd
    from kerastrainer.train import MultiWorkerTrainer  # EDIT


def train():
    # EDIT: hvd.init() and the GPU pinning
    trainer = None if REFERENCE else MultiWorkerTrainer()
    rank = 0 if REFERENCE else trainer.rank
    size = int(os.environ.get("KT_PORT_SIZE", 2)) if REFERENCE else trainer.size
    keras.utils.set_random_seed(0)  # EDIT: same seed in every run
    epochs = int(os.environ.get("KT_PORT_EPOCHS", 24))  # EDIT
    steps = int(os.environ.get("KT_PORT_STEPS", 500))  # EDIT
    out = os.environ.get("KT_PORT_OUT", ".")  # EDIT

    (mnist_images, mnist_labels), (test_images, test_labels) = \
        tf.keras.datasets.mnist.load_data(path='mnist-%d.npz' % rank)  # EDIT: the test set kept

    dataset = tf.data.Dataset.from_tensor_slices(
        (tf.cast(mnist_images[..., tf.newaxis] / 255.0, tf.float32),
                 tf.cast(mnist_labels, tf.int64))
    )
    dataset = dataset.repeat().shuffle(10000).batch(128 * size)  # EDIT: the global batch

    mnist_model = tf.keras.Sequential([
        tf.keras.layers.Conv2D(32, [3, 3], activation='relu'),
        tf.keras.layers.Conv2D(64, [3, 3], activation='relu'),
        tf.keras.layers.MaxPooling2D(pool_size=(2, 2)),
        tf.keras.layers.Dropout(0.25),
        tf.keras.layers.Flatten(),
        tf.keras.layers.Dense(128, activation='relu'),
        tf.keras.layers.Dropout(0.5),
        tf.keras.layers.Dense(10, activation='softmax')
    ])

    # Horovod: adjust learning rate based on number of GPUs.
    scaled_lr = 0.001 * size
    opt = tf.optimizers.Adam(scaled_lr)

    # EDIT: hvd.DistributedOptimizer(opt, ...) and experimental_run_tf_function=False
    mnist_model.compile(loss=tf.losses.SparseCategoricalCrossentropy(),
                        optimizer=opt,
                        metrics=['accuracy'])

    # EDIT: BroadcastGlobalVariablesCallback(0), MetricAverageCallback(); the warm-up with Keras's scheduler
    def warmup(epoch, lr, warmup_epochs=3):
        if epoch >= warmup_epochs:
            return scaled_lr
        return scaled_lr / size * (epoch * (size - 1) / warmup_epochs + 1)
    callbacks = [keras.callbacks.LearningRateScheduler(warmup, verbose=0)]

    # Horovod: save checkpoints only on worker 0 to prevent other workers from corrupting them.
    if rank == 0:
        callbacks.append(tf.keras.callbacks.ModelCheckpoint(os.path.join(out, 'checkpoint-{epoch}.h5')))  # EDIT: out

    # Horovod: write logs on worker 0.
    verbose = 1 if rank == 0 else 0

    # Train the model.
    # Horovod: adjust number of steps based on number of GPUs.
    fit = mnist_model.fit if REFERENCE else KerasModel(mnist_model, trainer=trainer).fit  # EDIT: the adoption
    history = fit(dataset, steps_per_epoch=steps // size, callbacks=callbacks, epochs=epochs, verbose=verbose)

    if rank == 0:  # EDIT: the test's score, on the held-out digits
        score = mnist_model.evaluate(test_images[..., None] / 255.0, test_labels.astype("int64"), verbose=0)
        with open(os.path.join(out, "score.json"), "w") as f:
            json.dump({"loss": score[0], "accuracy": score[1], "history": history.history}, f)

    # Return the model
    return mnist_model


if __name__ == '__main__':
    if len(sys.argv) == 4:
        raise SystemExit("horovod.run is not ported: start the program with kerastrainer-run -np N.")  # EDIT
    else:
        # this is running via kerastrainer-run  # EDIT: horovodrun
        train()
