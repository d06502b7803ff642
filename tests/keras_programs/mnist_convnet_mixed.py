"""keras-io's "Simple MNIST convnet" under the ``mixed_float16`` policy (float16 compute, float32
variables; ``compile`` wraps the optimizer in a ``LossScaleOptimizer``), with ``validation_split``.

Origin: https://github.com/keras-team/keras-io/blob/master/examples/vision/mnist_convnet.py
(fchollet, created 2015/06/19, last modified 2020/04/21).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments
  (``validation_split`` included), and ``evaluate`` through the same runner;
- for the test: ``keras.mixed_precision.set_global_policy("mixed_float16")`` before the model is
  built (the policy before it is restored at the end), the final softmax's dtype float32 (the mixed
  precision guide's advice for the output layer), 320 training and 64 test images (``fake_digits``)
  instead of the MNIST download, 2 epochs (not 15), ``shuffle=False`` and ``verbose=0``, a seed and
  ``clear_session``, no summary or prints; a function returning what the test compares.
"""
import keras
import numpy as np
from keras import layers

from kerastrainer.keras import KerasModel  # EDIT

from keras_programs.fake_mnist import fake_digits  # EDIT


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    policy = keras.mixed_precision.global_policy()  # EDIT: restored at the end
    keras.mixed_precision.set_global_policy("mixed_float16")  # EDIT
    try:
        # Model / data parameters
        num_classes = 10
        input_shape = (28, 28, 1)

        (x_train, y_train), (x_test, y_test) = fake_digits(320, 1), fake_digits(64, 2)  # EDIT

        # Scale images to the [0, 1] range
        x_train = x_train.astype("float32") / 255
        x_test = x_test.astype("float32") / 255
        # Make sure images have shape (28, 28, 1)
        x_train = np.expand_dims(x_train, -1)
        x_test = np.expand_dims(x_test, -1)

        # convert class vectors to binary class matrices
        y_train = keras.utils.to_categorical(y_train, num_classes)
        y_test = keras.utils.to_categorical(y_test, num_classes)

        model = keras.Sequential(
            [
                keras.Input(shape=input_shape),
                layers.Conv2D(32, kernel_size=(3, 3), activation="relu"),
                layers.MaxPooling2D(pool_size=(2, 2)),
                layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
                layers.MaxPooling2D(pool_size=(2, 2)),
                layers.Flatten(),
                layers.Dropout(0.5),
                layers.Dense(num_classes, activation="softmax", dtype="float32"),  # EDIT: dtype
            ]
        )

        batch_size = 128
        epochs = 2  # EDIT: 15

        model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])

        initial = [w.numpy() for w in model.weights]  # EDIT: for the test
        runner = KerasModel(model) if use_kerastrainer else model  # EDIT: the adoption
        history = runner.fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1,
                             shuffle=False, verbose=0)  # EDIT

        score = runner.evaluate(x_test, y_test, verbose=0)
        return dict(model=model, initial=initial, history=history.history, evaluate=score,
                    optimizer=type(model.optimizer).__name__)
    finally:
        keras.mixed_precision.set_global_policy(policy)  # EDIT
