"""keras-io's "Simple MNIST convnet", run with ``keras.Model.fit`` and with ``KerasModel``.

Origin: https://github.com/keras-team/keras-io/blob/master/examples/vision/mnist_convnet.py
(fchollet, last modified 2020/04/21).

Edits, all marked ``# EDIT``:
- the one change a Keras user makes to adopt kerastrainer:
  ``model.fit(x_train, ...)`` -> ``KerasModel(model).fit(x_train, ...)`` (same arguments,
  ``validation_split`` included; the compiled model, its ``evaluate`` and its score are Keras's);
- for the test: small random data with a learnable pattern instead of the MNIST download
  (``keras.datasets.mnist.load_data()``), fewer samples and epochs (5, not 15), ``verbose=0``,
  no ``model.summary()`` / prints, ``import keras`` (Keras 3) instead of ``tensorflow.keras``,
  and the program is a function so that both runs share data and seed.
"""
import numpy as np
import keras
from keras import layers

from kerastrainer.keras import KerasModel

from keras_programs.fake_mnist import fake_digits

num_classes = 10
input_shape = (28, 28, 1)


def _fake_mnist(n, seed):  # EDIT: instead of keras.datasets.mnist.load_data()
    """Digits as a bright 6x6 patch at a class-dependent place, plus noise."""
    return fake_digits(n, seed)


def program(use_kerastrainer: bool):
    keras.utils.set_random_seed(0)  # EDIT: same seed for both runs
    (x_train, y_train), (x_test, y_test) = _fake_mnist(640, 1), _fake_mnist(256, 2)  # EDIT

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
            layers.Dense(num_classes, activation="softmax"),
        ]
    )

    batch_size = 128
    epochs = 5  # EDIT: 15

    model.compile(loss="categorical_crossentropy", optimizer="adam", metrics=["accuracy"])

    fit = KerasModel(model).fit if use_kerastrainer else model.fit  # EDIT: the adoption
    history = fit(x_train, y_train, batch_size=batch_size, epochs=epochs, validation_split=0.1,
                  verbose=0)  # EDIT: verbose=0

    score = model.evaluate(x_test, y_test, verbose=0)
    return history, score


def test_mnist_convnet_reaches_keras_accuracy():
    ref_hist, ref_score = program(use_kerastrainer=False)
    hist, score = program(use_kerastrainer=True)
    assert set(ref_hist.history) <= set(hist.history)
    assert len(hist.history["val_accuracy"]) == 5
    # same data, seed and model; dropout draws differ, so "within noise"
    assert abs(score[1] - ref_score[1]) < 0.05, (score, ref_score)
    assert abs(score[0] - ref_score[0]) < 0.1, (score, ref_score)
    assert score[1] > 0.6 and ref_score[1] > 0.6
