"""The Keras guide "Training & evaluation with the built-in methods", its first section: numpy
arrays given to ``fit`` with ``batch_size=64``, ``epochs=2`` and ``validation_data``, Keras's default
``shuffle=True`` kept (the samples reshuffled each epoch), then ``evaluate`` and ``predict``.

Origin: https://github.com/keras-team/keras-io/blob/master/guides/training_with_built_in_methods.py,
section "API overview: a first end-to-end example" (fchollet, created 2019/03/01).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments, and
  ``evaluate`` / ``predict`` through the same runner;
- for the test: 320 + 64 training/validation and 64 test images (``fake_digits``, flattened to 784)
  instead of the MNIST download (so 64 validation samples, not 10000), ``verbose=0``, a seed and
  ``clear_session``, no prints; a function returning what the test compares.
"""
import keras
from keras import layers

from kerastrainer.keras import KerasModel  # EDIT

from keras_programs.fake_mnist import fake_digits  # EDIT


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs (the shuffle's too)
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)

    model = keras.Model(inputs=inputs, outputs=outputs)

    (x_train, y_train), (x_test, y_test) = fake_digits(384, 1), fake_digits(64, 2)  # EDIT

    # Preprocess the data (these are NumPy arrays)
    x_train = x_train.reshape(len(x_train), 784).astype("float32") / 255  # EDIT: 60000
    x_test = x_test.reshape(len(x_test), 784).astype("float32") / 255  # EDIT: 10000

    y_train = y_train.astype("float32")
    y_test = y_test.astype("float32")

    # Reserve 64 samples for validation
    x_val = x_train[-64:]  # EDIT: 10000
    y_val = y_train[-64:]
    x_train = x_train[:-64]
    y_train = y_train[:-64]

    model.compile(
        optimizer=keras.optimizers.RMSprop(),  # Optimizer
        # Loss function to minimize
        loss=keras.losses.SparseCategoricalCrossentropy(),
        # List of metrics to monitor
        metrics=[keras.metrics.SparseCategoricalAccuracy()],
    )

    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    runner = KerasModel(model) if use_kerastrainer else model  # EDIT: the adoption
    history = runner.fit(
        x_train,
        y_train,
        batch_size=64,
        epochs=2,
        # We pass some validation for
        # monitoring validation loss and metrics
        # at the end of each epoch
        validation_data=(x_val, y_val),
        verbose=0,  # EDIT
    )

    # Evaluate the model on the test data using `evaluate`
    results = runner.evaluate(x_test, y_test, batch_size=128, verbose=0)  # EDIT: verbose

    # Generate predictions (probabilities -- the output of the last layer)
    # on new data using `predict`
    predictions = runner.predict(x_test[:3], verbose=0)  # EDIT: verbose
    return dict(model=model, initial=initial, history=history.history, evaluate=results, predict=predictions)
