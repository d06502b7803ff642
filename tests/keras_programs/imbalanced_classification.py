"""keras-io's "Imbalanced classification: credit card fraud detection", as a function.

Origin: https://github.com/keras-team/keras-io/blob/master/examples/structured_data/imbalanced_classification.py
(fchollet, created 2019/05/28, last modified 2020/04/17).

Edits, each marked ``# EDIT``:
- the one change a Keras user makes to adopt kerastrainer: ``model.fit(...)`` ->
  ``KerasModel(model).fit(...)`` (same arguments: ``class_weight``, ``validation_data``,
  ``verbose=2``, the ``ModelCheckpoint`` callback);
- for the test: a small generated imbalanced dataset (5% positives, 30 features) instead of
  the Kaggle CSV, 10 epochs instead of 30, the checkpoints written to ``workdir``, no prints or
  ``model.summary()``, a seed, and the program is a function returning the model and its
  validation data so that the test can evaluate both runs alike.
"""
import os  # EDIT: the checkpoints' directory

import numpy as np


def _fake_transactions(n=6000, seed=0):  # EDIT: instead of reading creditcard.csv
    """30 features; the positives (5%) are shifted along a few of them."""
    rng = np.random.RandomState(seed)
    targets = (rng.rand(n, 1) < 0.05).astype("uint8")
    features = rng.randn(n, 30).astype("float32") * 3 + 10
    features[:, :4] += targets * 2.5
    return features, targets


def program(use_kerastrainer: bool, workdir: str, epochs: int = 10):  # EDIT: a function
    import keras
    keras.utils.set_random_seed(0)  # EDIT: same seed for both runs
    features, targets = _fake_transactions()  # EDIT

    num_val_samples = int(len(features) * 0.2)
    train_features = features[:-num_val_samples]
    train_targets = targets[:-num_val_samples]
    val_features = features[-num_val_samples:]
    val_targets = targets[-num_val_samples:]

    counts = np.bincount(train_targets[:, 0])

    weight_for_0 = 1.0 / counts[0]
    weight_for_1 = 1.0 / counts[1]

    mean = np.mean(train_features, axis=0)
    train_features -= mean
    val_features -= mean
    std = np.std(train_features, axis=0)
    train_features /= std
    val_features /= std

    model = keras.Sequential(
        [
            keras.Input(shape=train_features.shape[1:]),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(256, activation="relu"),
            keras.layers.Dropout(0.3),
            keras.layers.Dense(1, activation="sigmoid"),
        ]
    )

    metrics = [
        keras.metrics.FalseNegatives(name="fn"),
        keras.metrics.FalsePositives(name="fp"),
        keras.metrics.TrueNegatives(name="tn"),
        keras.metrics.TruePositives(name="tp"),
        keras.metrics.Precision(name="precision"),
        keras.metrics.Recall(name="recall"),
    ]

    model.compile(
        optimizer=keras.optimizers.Adam(1e-2), loss="binary_crossentropy", metrics=metrics
    )

    callbacks = [keras.callbacks.ModelCheckpoint(os.path.join(workdir, "fraud_model_at_epoch_{epoch}.keras"))]  # EDIT
    class_weight = {0: weight_for_0, 1: weight_for_1}

    if use_kerastrainer:  # EDIT: the adoption
        from kerastrainer.keras import KerasModel
        fit = KerasModel(model).fit
    else:
        fit = model.fit
    history = fit(
        train_features,
        train_targets,
        batch_size=2048,
        epochs=epochs,  # EDIT: 30
        verbose=2,
        callbacks=callbacks,
        validation_data=(val_features, val_targets),
        class_weight=class_weight,
    )
    return model, history, (val_features, val_targets)  # EDIT: for the test
