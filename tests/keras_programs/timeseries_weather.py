"""keras-io's "Timeseries forecasting for weather prediction" (an LSTM on
``keras.utils.timeseries_dataset_from_array`` over float64 data).

Origin: https://github.com/keras-team/keras-io/blob/master/examples/timeseries/timeseries_weather_forecasting.py
(Prabhanshu Attri, Yashika Sharma, Kaily Zhu, Mohammad Akbari; created 2020/06/23).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments (the
  ``validation_data`` dataset, the ``EarlyStopping`` and ``ModelCheckpoint`` callbacks), and the
  ``predict`` calls through the same runner;
- for the test: a generated float64 series of 7 features (numpy, as ``features.values`` is) instead of
  the Jena climate CSV, so no pandas (``.loc``/``.iloc`` become array slices); ``past`` 48, ``future``
  6, ``step`` 6, ``batch_size`` 16, 2 epochs (not 720, 72, 6, 256, 10); the checkpoint written to
  ``workdir`` and named ``.weights.h5`` (Keras 3 requires that suffix with ``save_weights_only``),
  ``verbose=0`` for fit and the checkpoint callback, no plots or prints; a seed and
  ``clear_session``; a function returning what the test compares.
"""
import os

import keras
import numpy as np

from kerastrainer.keras import KerasModel  # EDIT


def _fake_climate(n=700, seed=0):  # EDIT: instead of reading jena_climate_2009_2016.csv
    """Seven float64 features: daily and slower cycles, coupled, plus noise."""
    rng = np.random.RandomState(seed)
    t = np.arange(n, dtype=np.float64)
    base = np.stack([np.sin(t / 24 * 2 * np.pi + k) * (k + 1) + np.cos(t / 97 + k) for k in range(7)], 1)
    return base + rng.randn(n, 7) * 0.3


def normalize(data, train_split):
    data_mean = data[:train_split].mean(axis=0)
    data_std = data[:train_split].std(axis=0)
    return (data - data_mean) / data_std


def program(use_kerastrainer: bool, workdir: str):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    values = _fake_climate()  # EDIT
    split_fraction = 0.715
    train_split = int(split_fraction * int(values.shape[0]))
    step = 6

    past = 48  # EDIT: 720
    future = 6  # EDIT: 72
    learning_rate = 0.001
    batch_size = 16  # EDIT: 256
    epochs = 2  # EDIT: 10

    features = normalize(values, train_split)

    train_data = features[0:train_split]  # EDIT: features.loc[0 : train_split - 1]
    val_data = features[train_split:]  # EDIT: features.loc[train_split:]

    start = past + future
    end = start + train_split

    x_train = train_data[:, [i for i in range(7)]]  # EDIT: train_data[[...]].values
    y_train = features[start:end][:, [1]]  # EDIT: features.iloc[start:end][[1]]

    sequence_length = int(past / step)

    dataset_train = keras.utils.timeseries_dataset_from_array(
        x_train,
        y_train,
        sequence_length=sequence_length,
        sampling_rate=step,
        batch_size=batch_size,
    )

    x_end = len(val_data) - past - future

    label_start = train_split + past + future

    x_val = val_data[:x_end][:, [i for i in range(7)]]  # EDIT: .iloc / .values
    y_val = features[label_start:][:, [1]]  # EDIT: .iloc

    dataset_val = keras.utils.timeseries_dataset_from_array(
        x_val,
        y_val,
        sequence_length=sequence_length,
        sampling_rate=step,
        batch_size=batch_size,
    )

    for batch in dataset_train.take(1):
        inputs, targets = batch

    inputs = keras.layers.Input(shape=(inputs.shape[1], inputs.shape[2]))
    lstm_out = keras.layers.LSTM(32)(inputs)
    outputs = keras.layers.Dense(1)(lstm_out)

    model = keras.Model(inputs=inputs, outputs=outputs)
    model.compile(optimizer=keras.optimizers.Adam(learning_rate=learning_rate), loss="mse")

    path_checkpoint = os.path.join(workdir, "model_checkpoint.weights.h5")  # EDIT
    es_callback = keras.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)

    modelckpt_callback = keras.callbacks.ModelCheckpoint(
        monitor="val_loss",
        filepath=path_checkpoint,
        verbose=0,  # EDIT: 1
        save_weights_only=True,
        save_best_only=True,
    )

    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    runner = KerasModel(model) if use_kerastrainer else model  # EDIT: the adoption
    history = runner.fit(
        dataset_train,
        epochs=epochs,
        validation_data=dataset_val,
        callbacks=[es_callback, modelckpt_callback],
        verbose=0,  # EDIT
    )
    # EDIT: the program plots model.predict(x) of 5 validation batches; the test compares them
    predictions = np.concatenate([runner.predict(x, verbose=0) for x, y in dataset_val.take(5)])
    return dict(model=model, initial=initial, history=history.history, predict=predictions,
                checkpoint=path_checkpoint)
