"""The Keras functional API guide's multi-input, multi-output model (issue tickets: three inputs,
two named outputs, a loss per output and ``loss_weights``), with a metric per output.

Origin: https://github.com/keras-team/keras-io/blob/master/guides/functional_api.py, section
"Models with multiple inputs and outputs" (fchollet, created 2019/03/01).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments, and
  ``evaluate`` / ``predict`` through the same runner;
- for the test: ``metrics`` per output added to compile (the guide compiles losses only), 88 samples
  (not 1280: the last batch of 32 is partial, 24), titles of 6 and bodies of 12 tokens (not 10 and 100), ``num_words`` 100 (not 10000),
  ``shuffle=False`` and ``verbose=0``, a seed and ``clear_session``, no plot_model; a function
  returning what the test compares. The dummy data is the guide's own (int64 token ids, float64
  priority targets, int64 department targets).
"""
import keras
import numpy as np
from keras import layers

from kerastrainer.keras import KerasModel  # EDIT


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    num_tags = 12  # Number of unique issue tags
    num_words = 100  # EDIT: 10000
    num_departments = 4  # Number of departments for predictions

    title_input = keras.Input(shape=(None,), name="title")  # Variable-length sequence of ints
    body_input = keras.Input(shape=(None,), name="body")  # Variable-length sequence of ints
    tags_input = keras.Input(shape=(num_tags,), name="tags")  # Binary vectors of size `num_tags`

    # Embed each word in the title into a 64-dimensional vector
    title_features = layers.Embedding(num_words, 64)(title_input)
    # Embed each word in the text into a 64-dimensional vector
    body_features = layers.Embedding(num_words, 64)(body_input)

    # Reduce sequence of embedded words in the title into a single 128-dimensional vector
    title_features = layers.LSTM(128)(title_features)
    # Reduce sequence of embedded words in the body into a single 32-dimensional vector
    body_features = layers.LSTM(32)(body_features)

    # Merge all available features into a single large vector via concatenation
    x = layers.concatenate([title_features, body_features, tags_input])

    # Stick a logistic regression for priority prediction on top of the features
    priority_pred = layers.Dense(1, name="priority")(x)
    # Stick a department classifier on top of the features
    department_pred = layers.Dense(num_departments, name="department")(x)

    # Instantiate an end-to-end model predicting both priority and department
    model = keras.Model(
        inputs=[title_input, body_input, tags_input],
        outputs={"priority": priority_pred, "department": department_pred},
    )

    model.compile(
        optimizer=keras.optimizers.RMSprop(1e-3),
        loss={
            "priority": keras.losses.BinaryCrossentropy(from_logits=True),
            "department": keras.losses.CategoricalCrossentropy(from_logits=True),
        },
        loss_weights={"priority": 1.0, "department": 0.2},
        metrics={"priority": ["mae"], "department": ["categorical_accuracy"]},  # EDIT: per-output metrics
    )

    # Dummy input data
    title_data = np.random.randint(num_words, size=(88, 6))  # EDIT: (1280, 10)
    body_data = np.random.randint(num_words, size=(88, 12))  # EDIT: (1280, 100)
    tags_data = np.random.randint(2, size=(88, num_tags)).astype("float32")  # EDIT: 1280

    # Dummy target data
    priority_targets = np.random.random(size=(88, 1))  # EDIT: 1280
    dept_targets = np.random.randint(2, size=(88, num_departments))  # EDIT: 1280

    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    runner = KerasModel(model) if use_kerastrainer else model  # EDIT: the adoption
    history = runner.fit(
        {"title": title_data, "body": body_data, "tags": tags_data},
        {"priority": priority_targets, "department": dept_targets},
        epochs=2,
        batch_size=32,
        shuffle=False, verbose=0,  # EDIT
    )
    inputs = {"title": title_data[:40], "body": body_data[:40], "tags": tags_data[:40]}  # EDIT: for the test
    targets = {"priority": priority_targets[:40], "department": dept_targets[:40]}
    score = runner.evaluate(inputs, targets, batch_size=16, verbose=0)
    predictions = runner.predict(inputs, batch_size=16, verbose=0)
    return dict(model=model, initial=initial, history=history.history, evaluate=score, predict=predictions)
