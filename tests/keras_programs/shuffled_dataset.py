"""The Keras guide "Training & evaluation with the built-in methods", its ``tf.data`` section: a
``shuffle(buffer_size=1024).batch(64)`` pipeline given to ``fit`` for 3 epochs (reshuffled each
epoch), then ``evaluate`` on a test dataset.

Origin: https://github.com/keras-team/keras-io/blob/master/guides/training_with_built_in_methods.py,
section "Training & evaluation from tf.data Datasets" (fchollet, created 2019/03/01).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments, and
  ``evaluate`` / ``predict`` through the same runner;
- for the test: 320 training and 64 test images (``fake_digits``, flattened to 784 as the guide's
  MNIST) instead of the MNIST download, ``buffer_size`` 320 (the whole data, as 1024 is for the
  guide's 50000 samples: 1024 would take it all too), ``verbose=0``, a seed and ``clear_session``;
  a function returning what the test compares.
"""
import keras
import tensorflow as tf
from keras import layers

from kerastrainer.keras import KerasModel  # EDIT

from keras_programs.fake_mnist import fake_digits  # EDIT


def get_uncompiled_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x = layers.Dense(64, activation="relu", name="dense_1")(inputs)
    x = layers.Dense(64, activation="relu", name="dense_2")(x)
    outputs = layers.Dense(10, activation="softmax", name="predictions")(x)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


def get_compiled_model():
    model = get_uncompiled_model()
    model.compile(
        optimizer="rmsprop",
        loss="sparse_categorical_crossentropy",
        metrics=["sparse_categorical_accuracy"],
    )
    return model


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs (the shuffle's too)
    (x_train, y_train), (x_test, y_test) = fake_digits(320, 1), fake_digits(64, 2)  # EDIT

    # Preprocess the data (these are NumPy arrays)
    x_train = x_train.reshape(len(x_train), 784).astype("float32") / 255  # EDIT: 60000
    x_test = x_test.reshape(len(x_test), 784).astype("float32") / 255  # EDIT: 10000

    y_train = y_train.astype("float32")
    y_test = y_test.astype("float32")

    model = get_compiled_model()

    # First, let's create a training Dataset instance.
    # For the sake of our example, we'll use the same MNIST data as before.
    train_dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))
    # Shuffle and slice the dataset.
    train_dataset = train_dataset.shuffle(buffer_size=320).batch(64)  # EDIT: 1024

    # Now we get a test dataset.
    test_dataset = tf.data.Dataset.from_tensor_slices((x_test, y_test))
    test_dataset = test_dataset.batch(64)

    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    runner = KerasModel(model) if use_kerastrainer else model  # EDIT: the adoption
    # Since the dataset already takes care of batching,
    # we don't pass a `batch_size` argument.
    history = runner.fit(train_dataset, epochs=3, verbose=0)  # EDIT: verbose

    # You can also evaluate or predict on a dataset.
    result = runner.evaluate(test_dataset, verbose=0)  # EDIT: verbose
    predictions = runner.predict(test_dataset, verbose=0)  # EDIT: for the test
    return dict(model=model, initial=initial, history=history.history, evaluate=result, predict=predictions)
