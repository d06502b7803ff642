"""keras-io's "Image similarity estimation using a Siamese Network with a contrastive loss"
(one embedding model called on two inputs, a custom loss, BatchNormalization in the tower).

Origin: https://github.com/keras-team/keras-io/blob/master/examples/vision/siamese_contrastive.py
(Mehdi, created 2021/05/06).

Edits, each marked ``# EDIT``:
- the adoption: ``siamese.fit(...)`` -> ``KerasModel(siamese).fit(...)`` with the same arguments
  (``validation_data`` included), and ``evaluate`` / ``predict`` through the same runner;
- for the test: generated 28x28 digits (``fake_digits``: 48 train, 24 validation, 24 test images,
  so 96/48/48 pairs) instead of the MNIST download, 2 epochs (not 10), ``shuffle=False`` and
  ``verbose=0``, ``import keras`` (Keras 3) for ``tensorflow.keras`` and ``keras.backend.epsilon()``
  for ``tf.keras.backend.epsilon()``, seeds (``random``, Keras) and ``clear_session``, no plots or
  summary; a function returning what the test compares.
"""
import random

import keras
import numpy as np
import tensorflow as tf
from keras import layers

from kerastrainer.keras import KerasModel  # EDIT

from keras_programs.fake_mnist import fake_digits  # EDIT


def make_pairs(x, y):
    """Creates a tuple containing image pairs with corresponding label."""
    num_classes = max(y) + 1
    digit_indices = [np.where(y == i)[0] for i in range(num_classes)]

    pairs = []
    labels = []

    for idx1 in range(len(x)):
        # add a matching example
        x1 = x[idx1]
        label1 = y[idx1]
        idx2 = random.choice(digit_indices[label1])
        x2 = x[idx2]

        pairs += [[x1, x2]]
        labels += [1]

        # add a non-matching example
        label2 = random.randint(0, num_classes - 1)
        while label2 == label1:
            label2 = random.randint(0, num_classes - 1)

        idx2 = random.choice(digit_indices[label2])
        x2 = x[idx2]

        pairs += [[x1, x2]]
        labels += [0]

    return np.array(pairs), np.array(labels).astype("float32")


def euclidean_distance(vects):
    """Find the Euclidean distance between two vectors."""
    x, y = vects
    sum_square = tf.math.reduce_sum(tf.math.square(x - y), axis=1, keepdims=True)
    return tf.math.sqrt(tf.math.maximum(sum_square, keras.backend.epsilon()))  # EDIT: tf.keras.backend


def loss(margin=1):
    """Provides 'constrastive_loss' an enclosing scope with variable 'margin'."""

    def contrastive_loss(y_true, y_pred):
        square_pred = tf.math.square(y_pred)
        margin_square = tf.math.square(tf.math.maximum(margin - (y_pred), 0))
        return tf.math.reduce_mean((1 - y_true) * square_pred + (y_true) * margin_square)

    return contrastive_loss


def _digits(n, seed):  # EDIT: instead of keras.datasets.mnist.load_data(); every class present
    x, y = fake_digits(n, seed)
    y[:10] = np.arange(10)
    return x, y


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs (random, numpy, Keras)
    random.seed(0)  # EDIT
    epochs = 2  # EDIT: 10
    batch_size = 16
    margin = 1  # Margin for constrastive loss.

    (x_train_val, y_train_val), (x_test, y_test) = _digits(72, 1), _digits(24, 2)  # EDIT
    x_train_val = x_train_val.astype("float32")
    x_test = x_test.astype("float32")
    x_train, x_val = x_train_val[:48], x_train_val[48:]  # EDIT: 30000
    y_train, y_val = y_train_val[:48], y_train_val[48:]
    y_val[:10] = np.arange(10)  # EDIT: every class in the validation part too
    del x_train_val, y_train_val

    pairs_train, labels_train = make_pairs(x_train, y_train)
    pairs_val, labels_val = make_pairs(x_val, y_val)
    pairs_test, labels_test = make_pairs(x_test, y_test)

    x_train_1 = pairs_train[:, 0]
    x_train_2 = pairs_train[:, 1]
    x_val_1 = pairs_val[:, 0]
    x_val_2 = pairs_val[:, 1]
    x_test_1 = pairs_test[:, 0]
    x_test_2 = pairs_test[:, 1]

    input = layers.Input((28, 28, 1))
    x = layers.BatchNormalization()(input)  # EDIT: tf.keras.layers
    x = layers.Conv2D(4, (5, 5), activation="tanh")(x)
    x = layers.AveragePooling2D(pool_size=(2, 2))(x)
    x = layers.Conv2D(16, (5, 5), activation="tanh")(x)
    x = layers.AveragePooling2D(pool_size=(2, 2))(x)
    x = layers.Flatten()(x)

    x = layers.BatchNormalization()(x)  # EDIT: tf.keras.layers
    x = layers.Dense(10, activation="tanh")(x)
    embedding_network = keras.Model(input, x)

    input_1 = layers.Input((28, 28, 1))
    input_2 = layers.Input((28, 28, 1))

    tower_1 = embedding_network(input_1)
    tower_2 = embedding_network(input_2)

    merge_layer = layers.Lambda(euclidean_distance)([tower_1, tower_2])
    normal_layer = layers.BatchNormalization()(merge_layer)  # EDIT: tf.keras.layers
    output_layer = layers.Dense(1, activation="sigmoid")(normal_layer)
    siamese = keras.Model(inputs=[input_1, input_2], outputs=output_layer)

    siamese.compile(loss=loss(margin=margin), optimizer="RMSprop", metrics=["accuracy"])

    initial = [w.numpy() for w in siamese.weights]  # EDIT: for the test
    runner = KerasModel(siamese) if use_kerastrainer else siamese  # EDIT: the adoption
    history = runner.fit(
        [x_train_1, x_train_2],
        labels_train,
        validation_data=([x_val_1, x_val_2], labels_val),
        batch_size=batch_size,
        epochs=epochs,
        shuffle=False, verbose=0,  # EDIT
    )

    results = runner.evaluate([x_test_1, x_test_2], labels_test, verbose=0)  # EDIT: verbose
    predictions = runner.predict([x_test_1, x_test_2], verbose=0)  # EDIT: verbose
    return dict(model=siamese, initial=initial, history=history.history, evaluate=results, predict=predictions)
