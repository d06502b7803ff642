"""keras-io's "Endpoint layer pattern" (a layer that adds the loss with ``add_loss`` and updates its
own metric in ``call``), as a functional model and as a subclassed one.

Origin: https://github.com/keras-team/keras-io/blob/master/examples/keras_recipes/endpoint_layer_pattern.py
(fchollet, created 2019/05/10, last modified 2023/11/22; the Keras 3 version).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments;
- for the test: 96 samples of 16 features (not 1000 of 764; float64 as published), targets 0 or 1
  (not uniform in [0, 1), which no prediction matches: the accuracy would be 0 on both routes),
  ``shuffle=False`` and ``verbose=0``, and validation (``validation_split=0.25`` for the functional
  model, ``validation_data`` for the subclassed one) so that History has the layer's ``val_``
  accuracy; a seed and ``clear_session``; the two parts are two functions returning what the test
  compares (the inference model's ``predict`` included).
"""
import keras
import numpy as np
import tensorflow as tf

from kerastrainer.keras import KerasModel  # EDIT


class LogisticEndpoint(keras.layers.Layer):
    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_metric = keras.metrics.BinaryAccuracy(name="accuracy")

    def call(self, logits, targets=None, sample_weight=None):
        if targets is not None:
            # Compute the training-time loss value and add it
            # to the layer using `self.add_loss()`.
            loss = self.loss_fn(targets, logits, sample_weight)
            self.add_loss(loss)

            # Log the accuracy as a metric (we could log arbitrary metrics,
            # including different metrics for training and inference.)
            self.accuracy_metric.update_state(targets, logits, sample_weight)

        # Return the inference-time prediction tensor (for `.predict()`).
        return tf.nn.softmax(logits)


class LogReg(keras.Model):
    def __init__(self):
        super().__init__()
        self.dense = keras.layers.Dense(1)
        self.logistic_endpoint = LogisticEndpoint()

    def call(self, inputs):
        # Note that all inputs should be in the first argument
        # since we want to be able to call `model.fit(inputs)`.
        logits = self.dense(inputs["inputs"])
        preds = self.logistic_endpoint(
            logits=logits,
            targets=inputs["targets"],
            sample_weight=inputs["sample_weight"],
        )
        return preds


def _data(n):  # EDIT: 1000 samples of 764 features; 0/1 targets (an accuracy other than 0)
    return {
        "inputs": np.random.random((n, 16)),
        "targets": np.random.randint(0, 2, (n, 1)).astype("float64"),
        "sample_weight": np.random.random((n, 1)),
    }


def functional(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    inputs = keras.Input((16,), name="inputs")  # EDIT: 764
    logits = keras.layers.Dense(1)(inputs)
    targets = keras.Input((1,), name="targets")
    sample_weight = keras.Input((1,), name="sample_weight")
    preds = LogisticEndpoint()(logits, targets, sample_weight)
    model = keras.Model([inputs, targets, sample_weight], preds)

    data = _data(96)  # EDIT

    model.compile(keras.optimizers.Adam(1e-3))
    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    fit = KerasModel(model).fit if use_kerastrainer else model.fit  # EDIT: the adoption
    history = fit(data, epochs=2, validation_split=0.25, shuffle=False, verbose=0)  # EDIT

    inputs = keras.Input((16,), name="inputs")  # EDIT: 764
    logits = keras.layers.Dense(1)(inputs)
    preds = LogisticEndpoint()(logits, targets=None, sample_weight=None)
    inference_model = keras.Model(inputs, preds)

    inference_model.set_weights(model.get_weights())

    preds = inference_model.predict(np.random.random((40, 16)), verbose=0)  # EDIT: (1000, 764), verbose
    return dict(model=model, initial=initial, history=history.history, predict=preds)


def subclassed(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    model = LogReg()
    data = _data(96)  # EDIT
    val = _data(32)  # EDIT: validation data

    model.compile(keras.optimizers.Adam(1e-3))
    model({k: v[:1] for k, v in data.items()})  # EDIT: built here, for the test's initial weights
    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    fit = KerasModel(model).fit if use_kerastrainer else model.fit  # EDIT: the adoption
    history = fit(data, epochs=2, validation_data=val, shuffle=False, verbose=0)  # EDIT
    return dict(model=model, initial=initial, history=history.history)
