"""``KerasModel.fit`` gives ``keras.Model.fit``'s numbers and accepts what ``fit`` accepts.

Each test trains two models with the same initial weights on the same data, in the same order
(``shuffle=False``), one with ``keras.Model.fit`` and one with ``KerasModel``, and compares
History and the weights (1e-5).
"""
import keras
import numpy as np
import pytest
import tensorflow as tf

from _devices import cpus
from kerastrainer.callbacks import ModelSaver
from kerastrainer.keras import KerasModel
from kerastrainer.train import SyncMultiGPUTrainerReplicated
from kerastrainer.tfutils import load_chkpt_vars
from kerastrainer.tfutils.checkpoint_files import latest_checkpoint
from kerastrainer.utils import logger

QUIET = dict(extra_callbacks=[], monitors=[], verbose=0)
TOL = 1e-5


def _twins(build, seed=0):
    """Two models from ``build`` with the same initial weights."""
    keras.utils.set_random_seed(seed)
    a = build()
    b = build()
    b.set_weights(a.get_weights())
    return a, b


def _close(a, b, tol=TOL):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    assert a.shape == b.shape and np.allclose(a, b, atol=tol, rtol=0), (a.tolist(), b.tolist())


def _same_weights(ref, model, tol=TOL):
    assert len(ref.weights) == len(model.weights)
    for u, v in zip(ref.weights, model.weights):
        _close(u.numpy(), v.numpy(), tol)


def _fit_both(ref, model, loss, x, y=None, opt=lambda: keras.optimizers.SGD(0.1), metrics=None, **fit_kw):
    """``(History of keras fit, History of KerasModel)`` after compiling both alike."""
    ref.compile(opt(), loss, metrics=metrics)
    km = KerasModel(model)
    km.compile(opt(), loss, metrics=metrics)
    h_ref = ref.fit(x, y, verbose=0, **fit_kw)
    h = km.fit(x, y, **QUIET, **fit_kw)
    return h_ref, h


# --- item 1: a model inside a model --------------------------------------------------------------
def _siamese():
    """keras-io's siamese pattern: one tower shared by two inputs, a head on their distance. Built
    right after a fresh session, the tower's layer is 'dense' and the head 'dense_1'."""
    t_in = keras.Input((6,))
    tower = keras.Model(t_in, keras.layers.Dense(5, activation="tanh")(t_in))
    a, b = keras.Input((6,)), keras.Input((6,))
    distance = keras.layers.Lambda(lambda t: keras.ops.abs(t[0] - t[1]))([tower(a), tower(b)])
    return keras.Model([a, b], keras.layers.Dense(1)(distance))


def test_nested_model_trains_and_checkpoints_every_variable(tmp_path):
    rng = np.random.RandomState(0)
    xa, xb = rng.randn(40, 6).astype("float32"), rng.randn(40, 6).astype("float32")
    y = rng.randn(40, 1).astype("float32")
    keras.backend.clear_session()   # Keras's numbering from 0: the head's 'dense_1' is the 2nd dense
    model = _siamese()
    ref = _siamese()
    keras.utils.set_random_seed(0)
    ref.set_weights([np.random.RandomState(i).randn(*w.shape).astype("float32") * 0.5
                     for i, w in enumerate(ref.get_weights())])
    model.set_weights(ref.get_weights())
    ref.compile(keras.optimizers.SGD(0.05), "mse")
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.05), "mse")
    h_ref = ref.fit([xa, xb], y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    logger.set_logger_dir(str(tmp_path / "a"), "k")
    try:
        h = km.fit([xa, xb], y, batch_size=8, epochs=2, shuffle=False, callbacks=[ModelSaver()], **QUIET)
    finally:
        logger.unset_logger_dir()
    assert len(km.trainer.model_variables.trainable_list) == len(model.trainable_variables) == 4
    _close(h.history["loss"], h_ref.history["loss"])
    _same_weights(ref, model)
    # every variable under a name of its place in the model, the same in any process
    saved = load_chkpt_vars(latest_checkpoint(str(tmp_path / "a")))
    names = sorted(k for k in saved if k.startswith("keras_model/"))
    assert names == ["keras_model/dense/bias", "keras_model/dense/kernel", "keras_model/functional/dense/bias",
                     "keras_model/functional/dense/kernel"], names
    # restored by name into the same model built again (other Keras numbers)
    again = _siamese()
    km2 = KerasModel(again)
    km2.compile(keras.optimizers.SGD(0.05), "mse")
    km2.fit([xa, xb], y, batch_size=8, epochs=0, session_init=str(tmp_path / "a"), **QUIET)
    _same_weights(model, again, 0)


# --- item 2: cross-entropy from the logits behind a softmax / sigmoid output ---------------------
def _saturating(activation, units, shape=(4,), conv=False):
    def build():
        inp = keras.Input(shape)
        layer = keras.layers.Conv2D(units, 1, activation=activation) if conv else \
            keras.layers.Dense(units, activation=activation)
        return keras.Model(inp, layer(inp))
    return build


def _big_weights(ref, model, scale=8.0):
    # logits of tens: the probabilities saturate (1e-7 clipping would change the loss and its gradient)
    w = [np.random.RandomState(i).randn(*v.shape).astype("float32") * scale for i, v in enumerate(ref.weights)]
    ref.set_weights(w)
    model.set_weights(w)


@pytest.mark.parametrize("case", ["softmax_categorical", "sigmoid_binary", "softmax_sparse_pixels"])
def test_cross_entropy_on_an_activation_uses_its_logits_as_keras(case):
    rng = np.random.RandomState(1)
    if case == "softmax_categorical":
        build, loss = _saturating("softmax", 3), "categorical_crossentropy"
        x = rng.randn(32, 4).astype("float32")
        y = keras.utils.to_categorical(rng.randint(0, 3, 32), 3)
    elif case == "sigmoid_binary":
        build, loss = _saturating("sigmoid", 1), "binary_crossentropy"
        x = rng.randn(32, 4).astype("float32")
        y = rng.randint(0, 2, (32, 1)).astype("float32")
    else:  # a U-Net's head: per-pixel softmax over the classes
        build, loss = _saturating("softmax", 3, shape=(5, 5, 2), conv=True), "sparse_categorical_crossentropy"
        x = rng.randn(32, 5, 5, 2).astype("float32")
        y = rng.randint(0, 3, (32, 5, 5)).astype("int32")
    ref, model = _twins(build)
    _big_weights(ref, model)
    h_ref, h = _fit_both(ref, model, loss, x, y, opt=lambda: keras.optimizers.SGD(0.01), batch_size=8,
                         epochs=2, shuffle=False)
    _close(h.history["loss"], h_ref.history["loss"], 1e-5 * max(1.0, h_ref.history["loss"][0]))
    _same_weights(ref, model)


# --- item 3: the epoch's statistics weight each batch by its size ---------------------------------
@pytest.mark.parametrize("replicas", [1, 2])
def test_epoch_loss_and_metrics_weight_a_partial_last_batch_as_keras(replicas):
    rng = np.random.RandomState(1)
    x, y = rng.randn(35, 4).astype("float32"), rng.randint(0, 3, 35)   # 4 batches of 8, then 3
    ref, model = _twins(lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ref.compile(keras.optimizers.SGD(0.1), xent, metrics=["accuracy"])
    km = KerasModel(model, trainer=SyncMultiGPUTrainerReplicated(cpus(2)) if replicas > 1 else None)
    km.compile(keras.optimizers.SGD(0.1), xent, metrics=["accuracy"])
    h_ref = ref.fit(x, y, batch_size=8, epochs=2, shuffle=False, verbose=0)
    h = km.fit(x, y, batch_size=8, epochs=2, shuffle=False, **QUIET)
    _close(h.history["loss"], h_ref.history["loss"])
    # the metrics too: every replica's part of every batch, each sample once (Keras's running mean)
    _close(h.history["accuracy"], h_ref.history["accuracy"])
    _same_weights(ref, model)


# --- item 7: integer and float64 data into a float Input, cast as Keras casts ---------------------
def _dense_on(shape):
    def build():
        inp = keras.Input(shape)
        h = keras.layers.Dense(4)(keras.layers.Flatten()(inp) if len(shape) > 1 else inp)
        return keras.Model(inp, keras.layers.Dense(1)(h))
    return build


@pytest.mark.parametrize("form", ["int_numpy", "int_dataset", "float64_timeseries"])
def test_integer_and_float64_data_into_a_float_input_are_cast_as_keras(form):
    rng = np.random.RandomState(1)
    if form == "float64_timeseries":   # keras-io's timeseries forecasting: a float64 pipeline
        series = rng.randn(60, 3)                                          # float64
        x = keras.utils.timeseries_dataset_from_array(series[:-5], series[5:, :1], sequence_length=5,
                                                      batch_size=8, shuffle=False)
        y, shape, fit_kw, lr = None, (5, 3), {}, 0.01
    else:
        x = rng.randint(0, 10, (28, 5))                                    # int64 token ids
        y = rng.randn(28, 1).astype("float32")
        shape, fit_kw, lr = (5,), dict(batch_size=8), 1e-3
        if form == "int_dataset":
            x, y, fit_kw = tf.data.Dataset.from_tensor_slices((x, y)).batch(8), None, {}
    ref, model = _twins(_dense_on(shape))
    h_ref, h = _fit_both(ref, model, "mse", x, y, opt=lambda: keras.optimizers.SGD(lr), epochs=2, shuffle=False,
                         **fit_kw)
    _close(h.history["loss"], h_ref.history["loss"], 1e-5 * max(1.0, h_ref.history["loss"][0]))
    _same_weights(ref, model)


def test_a_cast_that_would_change_an_id_is_an_error_not_a_silent_rounding():
    inp = keras.Input((5,))
    km = KerasModel(keras.Model(inp, keras.layers.Dense(1)(inp)))
    km.compile("sgd", "mse")
    x = np.ones((16, 5), "int64")
    x[9, 2] = 2 ** 25 + 1                      # float32 would make it 2**25
    y = np.zeros((16, 1), "float32")
    for data in [(x, y), (tf.data.Dataset.from_tensor_slices((x, y)).batch(8), None)]:
        with pytest.raises(tf.errors.InvalidArgumentError, match="input input: a value of the data changes in "
                                                                 "the cast from int64 to float32"):
            km.fit(*data, epochs=1, shuffle=False, **QUIET)


# --- item 8: data one axis short of the Input's rank -----------------------------------------------
@pytest.mark.parametrize("form", ["numpy", "dataset"])
def test_data_one_axis_short_of_the_input_gets_it_as_keras(form):
    rng = np.random.RandomState(1)
    x, y = rng.randn(28, 6, 6).astype("float32"), rng.randint(0, 3, 28)   # into Input((6, 6, 1))

    def build():
        inp = keras.Input((6, 6, 1))
        h = keras.layers.Flatten()(keras.layers.Conv2D(2, 3)(inp))
        return keras.Model(inp, keras.layers.Dense(3)(h))
    ref, model = _twins(build)
    data, fit_kw = ((x, y), dict(batch_size=8)) if form == "numpy" else \
        ((tf.data.Dataset.from_tensor_slices((x, y)).batch(8), None), {})
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    h_ref, h = _fit_both(ref, model, xent, *data, epochs=2, shuffle=False, validation_data=(x, y), **fit_kw)
    _close(h.history["loss"], h_ref.history["loss"])
    _close(h.history["val_loss"], h_ref.history["val_loss"])
    _same_weights(ref, model)
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.1), xent)
    _close(km.evaluate(x, y, verbose=0), ref.evaluate(x, y, verbose=0))


# --- item 9: a model with its own train_step, given x alone -----------------------------------------
class AutoEncoder(keras.Model):
    """keras-io's VAE pattern: ``fit(x)`` without targets, ``train_step`` takes the data as they come
    (a per-sample sum: a 1-tuple ``(x,)`` would broadcast into another number, silently)."""

    def __init__(self):
        super().__init__()
        self.enc = keras.layers.Dense(3, activation="tanh")
        self.dec = keras.layers.Dense(6)
        self.tracker = keras.metrics.Mean(name="loss")

    @property
    def metrics(self):
        return [self.tracker]

    def call(self, x):
        return self.dec(self.enc(x))

    def train_step(self, data):
        if isinstance(data, dict):
            data = data["image"]
        with tf.GradientTape() as tape:
            loss = keras.ops.mean(keras.ops.sum(keras.ops.square(data - self(data)), axis=1))
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply(grads, self.trainable_weights)
        self.tracker.update_state(loss)
        return {"loss": self.tracker.result()}


class ImageBatches(keras.utils.PyDataset):
    def __init__(self, x, as_dict):
        super().__init__()
        self.x, self.as_dict = x, as_dict

    def __len__(self):
        return 4

    def __getitem__(self, i):
        batch = self.x[i * 8:(i + 1) * 8]
        return {"image": batch} if self.as_dict else batch   # Keras: a dict as it is, an array as (x,)


@pytest.mark.parametrize("form", ["array", "dict", "dataset", "pydataset_array", "pydataset_dict"])
def test_own_train_step_given_x_alone_receives_what_keras_gives(form):
    x = np.random.RandomState(0).randn(32, 6).astype("float32")

    def build():
        m = AutoEncoder()
        m(x[:1])
        return m
    ref, model = _twins(build)
    data, fit_kw = {"array": (x, dict(batch_size=8)), "dict": ({"image": x}, dict(batch_size=8)),
                    "dataset": (tf.data.Dataset.from_tensor_slices(x).batch(8), {}),
                    "pydataset_array": (ImageBatches(x, False), {}),
                    "pydataset_dict": (ImageBatches(x, True), {})}[form]
    ref.compile(keras.optimizers.SGD(0.1))
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.1))
    h_ref = ref.fit(data, epochs=2, shuffle=False, verbose=0, **fit_kw)
    h = km.fit(data, epochs=2, shuffle=False, **QUIET, **fit_kw)
    _close(h.history["loss"], h_ref.history["loss"])
    _same_weights(ref, model)


# --- item 6: metrics owned by the model's layers ----------------------------------------------------
class LogisticEndpoint(keras.layers.Layer):
    """keras-io's endpoint layer: its loss by add_loss, its own metric updated in call."""

    def __init__(self, name=None):
        super().__init__(name=name)
        self.loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)
        self.accuracy_fn = keras.metrics.BinaryAccuracy()

    def call(self, targets, logits):
        self.add_loss(self.loss_fn(targets, logits))
        self.accuracy_fn.update_state(targets, keras.ops.sigmoid(logits))
        return keras.ops.sigmoid(logits)


def _endpoint_model():
    inputs, targets = keras.Input((3,), name="inputs"), keras.Input((10,), name="targets")
    predictions = LogisticEndpoint(name="predictions")(targets, keras.layers.Dense(10)(inputs))
    return keras.Model(inputs=[inputs, targets], outputs=predictions)


@pytest.mark.parametrize("replicas", [1, 2])
def test_metrics_of_the_models_layers_are_in_history_as_under_fit(replicas):
    rng = np.random.RandomState(0)
    data = {"inputs": rng.random((35, 3)).astype("float32"),
            "targets": rng.randint(0, 2, (35, 10)).astype("float32")}
    ref, model = _twins(_endpoint_model)
    ref.compile(keras.optimizers.Adam(0.01))
    # (2 replicas: the add_loss loss of a Keras Loss is each replica's mean, as on one device)
    km = KerasModel(model, trainer=SyncMultiGPUTrainerReplicated(cpus(2)) if replicas > 1 else None)
    km.compile(keras.optimizers.Adam(0.01))
    seen = []
    h_ref = ref.fit(data, batch_size=8, epochs=2, shuffle=False, verbose=0)
    h = km.fit(data, batch_size=8, epochs=2, shuffle=False, **QUIET, callbacks=[
        keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(logs["binary_accuracy"]))])
    _close(h.history["loss"], h_ref.history["loss"])
    _close(h.history["binary_accuracy"], h_ref.history["binary_accuracy"])   # reset each epoch, as fit
    _close(seen, h_ref.history["binary_accuracy"])                           # the Keras callbacks see it
    _same_weights(ref, model)
    _close(model.metrics[-1].result(), ref.metrics[-1].result())              # its state after fit


# --- item 4: a PyDataset reordered each epoch, read ahead no further than Keras's queue -------------
class CountedBatches(keras.utils.PyDataset):
    def __init__(self, x, y, batch):
        super().__init__()
        self.x, self.y, self.batch, self.reads = x, y, batch, []

    def __len__(self):
        return int(np.ceil(len(self.x) / self.batch))

    def __getitem__(self, i):
        self.reads.append(i)
        return self.x[i * self.batch:(i + 1) * self.batch], self.y[i * self.batch:(i + 1) * self.batch]


def test_pydataset_with_shuffle_is_reordered_each_epoch_as_keras():
    rng = np.random.RandomState(0)
    x, y = rng.randn(48, 4).astype("float32"), rng.randint(0, 3, 48)
    ref, model = _twins(lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ref.compile(keras.optimizers.SGD(0.1), xent)
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.1), xent)
    a, b = CountedBatches(x, y, 4), CountedBatches(x, y, 4)     # 12 batches an epoch
    keras.utils.set_random_seed(7)
    h_ref = ref.fit(a, epochs=3, verbose=0)                       # shuffle=True: Keras's default
    keras.utils.set_random_seed(7)
    h = km.fit(b, epochs=3, **QUIET)
    trained = a.reads[-36:]                                       # (Keras reads 2 batches first, to build)
    assert trained[:12] != list(range(12)) and trained[12:24] != trained[:12]   # Keras reorders each epoch
    assert b.reads[:36] == trained                                # kerastrainer: the same orders
    assert len(b.reads) <= 36 + 10 + 1                            # ahead: Keras's max_queue_size
    _close(h.history["loss"], h_ref.history["loss"])
    _same_weights(ref, model)


# --- item 5: a shuffled tf.data pipeline's first reshuffle is the first epoch's -------------------
def test_a_shuffled_dataset_gives_the_first_epoch_fits_order():
    rng = np.random.RandomState(0)
    x, y = rng.randn(48, 4).astype("float32"), rng.randint(0, 3, 48)
    ref, model = _twins(lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ref.compile(keras.optimizers.SGD(0.1), xent)
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.1), xent)

    def shuffled():   # the same seed, the same pipeline: the same first order
        keras.utils.set_random_seed(3)
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(48).batch(8)
    h_ref = ref.fit(shuffled(), epochs=1, verbose=0)
    h = km.fit(shuffled(), epochs=1, **QUIET)   # (no batch read ahead of training to learn the shapes)
    _close(h.history["loss"], h_ref.history["loss"])
    _same_weights(ref, model)


# --- each epoch reads the batches fit reads, in its order (Keras's epoch iterator's iterators) ------
def _shuffled_fits(data, replicas=1, **fit_kw):
    """``(Keras's fit, KerasModel's fit)`` of twin models from the same seed; ``data()`` makes the data
    (called after the seed is set, once for each run); KerasModel on ``replicas`` replicas."""
    ref, model = _twins(lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    xent = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ref.compile(keras.optimizers.SGD(0.1), xent)
    km = KerasModel(model, trainer=SyncMultiGPUTrainerReplicated(cpus(2)) if replicas > 1 else None)
    km.compile(keras.optimizers.SGD(0.1), xent)
    keras.utils.set_random_seed(3)
    h_ref = ref.fit(*data(), verbose=0, **fit_kw)
    keras.utils.set_random_seed(3)
    h = km.fit(*data(), **QUIET, **fit_kw)
    _close(h.history["loss"], h_ref.history["loss"])
    _same_weights(ref, model)
    return h_ref, h


def _samples(n):
    rng = np.random.RandomState(0)
    return rng.randn(n, 4).astype("float32"), rng.randint(0, 3, n)


@pytest.mark.parametrize("replicas", [1, 2])
def test_a_reshuffled_dataset_gives_each_epoch_fits_order(replicas):
    """fit makes a new iterator at each epoch's start and one more, unread, at its end: each epoch
    reads its own reshuffle, every other one of the pipeline's; two replicas split each batch
    (46 samples: the last batch of 6) and several steps run in each call."""
    x, y = _samples(46)
    h_ref, _ = _shuffled_fits(lambda: (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(46).batch(8),),
                              replicas, epochs=4)
    assert len(set(np.round(h_ref.history["loss"], 6))) == 4


def test_a_reshuffled_dataset_with_steps_per_epoch_reads_on_as_fit():
    """With steps_per_epoch, fit's iterator goes on over the epochs until it has read a pass, then
    the next is made (6 batches, 3 a step: two epochs a reshuffle)."""
    x, y = _samples(48)
    _shuffled_fits(lambda: (tf.data.Dataset.from_tensor_slices((x, y)).shuffle(48).batch(8),),
                   epochs=4, steps_per_epoch=3)


@pytest.mark.parametrize("replicas", [1, 2])
def test_numpy_arrays_shuffled_in_fits_order(replicas):
    """Keras's array adapter draws the permutation of each iterator (under a global seed, each epoch's
    iterator draws the same one: fit's order, so KerasModel's too)."""
    x, y = _samples(44)
    _shuffled_fits(lambda: (x, y), replicas, batch_size=10, epochs=3)


def test_numpy_arrays_shuffled_within_batches_as_fit():
    x, y = _samples(44)
    _shuffled_fits(lambda: (x, y), batch_size=10, epochs=2, shuffle="batch")


class _AddLoss(keras.layers.Layer):
    def call(self, target, pred):
        self.add_loss(keras.ops.mean(keras.ops.square(target - pred)))
        return pred


def _dict_input_add_loss_model():
    x_in, t_in = keras.Input((3,), name="x"), keras.Input((1,), name="t")
    return keras.Model({"x": x_in, "t": t_in}, _AddLoss()(t_in, keras.layers.Dense(1)(x_in)))


def test_x_alone_a_dict_of_arrays_with_validation_split_as_keras():
    # keras-io's endpoint-layer pattern: the targets are inputs, fit(x) with no y; validation_split
    # holds out the last fraction of x alone (an UnboundLocalError before)
    rng = np.random.RandomState(0)
    x = {"x": rng.randn(40, 3).astype("float32"), "t": rng.randn(40, 1).astype("float32")}
    ref, model = _twins(_dict_input_add_loss_model)
    h_ref, h = _fit_both(ref, model, None, x, batch_size=8, epochs=2, shuffle=False, validation_split=0.25)
    assert {"loss", "val_loss"} <= set(h_ref.history)
    for k in h_ref.history:
        _close(h.history[k], h_ref.history[k])
    _same_weights(ref, model)


# --- per-output losses: Keras 3 averages them over the batches, unweighted ---------------------------
@pytest.mark.parametrize("replicas", [1, 2])
def test_per_output_losses_of_a_partial_last_batch_as_under_fit(replicas):
    """Keras weights an epoch's loss and metrics by each batch's size but its per-output loss trackers
    by nothing (their ``sample_weight`` is the static batch size: None in a traced step): with a short
    last batch the two means differ. Training, validation and evaluate (its list order too), on one
    device and two replicas."""
    rng = np.random.RandomState(3)
    # batches of 8, 8, 6 (an even split over two replicas: where Keras's replicas train as one device)
    x = rng.randn(22, 4).astype("float32")
    ya, yb = rng.randn(22, 1).astype("float32"), rng.randint(0, 3, 22)
    xv, yva, yvb = x[:14] * 0.5, ya[:14], yb[:14]                # 8 and 6

    def build():
        inp = keras.Input((4,))
        h = keras.layers.Dense(6, activation="relu")(inp)
        return keras.Model(inp, {"a": keras.layers.Dense(1, name="a")(h),
                                 "b": keras.layers.Dense(3, activation="softmax", name="b")(h)})
    # the reference: keras.Model.fit on one device (every batch splits evenly over two replicas, where
    # Keras's replicas train as one device and each replica's loss counts once in the batch's mean)
    ref, model = _twins(build)
    loss = {"a": "mse", "b": "sparse_categorical_crossentropy"}
    metrics = {"a": ["mae"], "b": ["accuracy"]}
    ref.compile(keras.optimizers.SGD(0.1), loss, metrics=metrics, loss_weights={"a": 1.0, "b": 0.5})
    km = KerasModel(model, **({} if replicas == 1 else {"trainer": SyncMultiGPUTrainerReplicated(cpus(2))}))
    km.compile(keras.optimizers.SGD(0.1), loss, metrics=metrics, loss_weights={"a": 1.0, "b": 0.5})
    kw = dict(batch_size=8, epochs=2, shuffle=False, validation_data=(xv, {"a": yva, "b": yvb}))
    h_ref = ref.fit(x, {"a": ya, "b": yb}, verbose=0, **kw)
    h = km.fit(x, {"a": ya, "b": yb}, **QUIET, **kw)
    for key in ("loss", "a_loss", "b_loss", "a_mae", "b_accuracy",
                "val_loss", "val_a_loss", "val_b_loss", "val_a_mae", "val_b_accuracy"):
        assert np.allclose(h.history[key], h_ref.history[key], atol=TOL, rtol=0), (key, h.history[key], h_ref.history[key])
    _same_weights(ref, model)
    got = km.evaluate(xv, {"a": yva, "b": yvb}, batch_size=8, verbose=0)
    want = ref.evaluate(xv, {"a": yva, "b": yvb}, batch_size=8, verbose=0)
    _close(got, want)   # the values, in Keras's order


def test_a_steps_per_epoch_that_does_not_divide_the_data_is_named_in_a_warning(kt_log):
    """keras.Model.fit ends the epoch that runs out of data early; KerasModel's epochs keep their length
    and read on into the next pass: said, naming steps_per_epoch (none when it divides the batches)."""
    x, y = np.random.rand(40, 3).astype("float32"), np.random.rand(40, 1).astype("float32")
    inp = keras.Input((3,))
    km = KerasModel(keras.Model(inp, keras.layers.Dense(1)(inp)))
    km.compile("sgd", "mse")
    ds = tf.data.Dataset.from_tensor_slices((x, y)).batch(8)   # 5 batches
    km.fit(ds, epochs=1, steps_per_epoch=5, **QUIET)
    assert "does not divide" not in kt_log.warnings()
    km.fit(ds, epochs=1, steps_per_epoch=3, **QUIET)
    assert "steps_per_epoch=3 does not divide the data's 5 batches" in kt_log.warnings()


# --- metrics that are not means of per-batch values: Keras's own state, as fit ----------------------
@pytest.mark.parametrize("replicas", [1, 2])
def test_auc_and_precision_are_keras_stateful_results_as_under_fit(replicas):
    """Every Keras model trains through Keras's own train_step: AUC and Precision accumulate over the
    epoch (a mean of per-batch AUCs would differ), on one device and across two replicas, training
    and validation."""
    rng = np.random.RandomState(5)
    x = rng.randn(60, 4).astype("float32")
    y = (x[:, :1] + 0.5 * rng.randn(60, 1) > 0).astype("float32")
    ref, model = _twins(lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, activation="sigmoid")]))
    metrics = lambda: [keras.metrics.AUC(name="auc"), keras.metrics.Precision(name="precision")]  # noqa: E731
    ref.compile(keras.optimizers.SGD(0.1), "binary_crossentropy", metrics=metrics())
    km = KerasModel(model, trainer=SyncMultiGPUTrainerReplicated(cpus(2)) if replicas > 1 else None)
    km.compile(keras.optimizers.SGD(0.1), "binary_crossentropy", metrics=metrics())
    kw = dict(batch_size=10, epochs=2, shuffle=False, validation_data=(x[:30], y[:30]))
    h_ref = ref.fit(x, y, verbose=0, **kw)
    h = km.fit(x, y, **QUIET, **kw)
    for name in ("loss", "auc", "precision", "val_loss", "val_auc", "val_precision"):
        _close(h.history[name], h_ref.history[name])
    _same_weights(ref, model)


def test_weighted_metrics_are_keras_weighted_metrics_as_under_fit():
    """compile(weighted_metrics=...) is Keras's own: weighted by sample_weight, beside the same metric
    unweighted, training and validation; a model compiled by Keras with them trains the same."""
    rng = np.random.RandomState(6)
    x, y = rng.randn(48, 4).astype("float32"), rng.randint(0, 3, 48)
    sw = rng.rand(48).astype("float32") * 2
    build = lambda: keras.Sequential([keras.Input((4,)), keras.layers.Dense(3, activation="softmax")])  # noqa: E731
    ref, model = _twins(build)
    args = dict(loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                weighted_metrics=[keras.metrics.SparseCategoricalAccuracy(name="w_acc")])
    ref.compile(keras.optimizers.SGD(0.1), **args)
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.1), **args)
    kw = dict(sample_weight=sw, batch_size=16, epochs=2, shuffle=False, validation_data=(x[:16], y[:16], sw[:16]))
    h_ref = ref.fit(x, y, verbose=0, **kw)
    h = km.fit(x, y, **QUIET, **kw)
    for name in ("loss", "accuracy", "w_acc", "val_loss", "val_accuracy", "val_w_acc"):
        _close(h.history[name], h_ref.history[name])
    assert not np.allclose(h.history["w_acc"], h.history["accuracy"])
    _same_weights(ref, model)


def test_an_inference_runner_mid_epoch_leaves_the_epochs_metrics_as_under_fit():
    """tensorpack's pattern beside a KerasModel: the user's InferenceRunner triggered every step runs the
    model's inference tower through a predictor pruned to what it fetches: no metric of History's (compile's
    per-output loss trackers) is updated by it."""
    from kerastrainer.callbacks import InferenceRunner, PeriodicTrigger, ScalarStats
    from kerastrainer.dataflow import DataFromList

    rng = np.random.RandomState(8)
    x, ya, yb = rng.randn(32, 4).astype("float32"), rng.randn(32, 1).astype("float32"), rng.randn(32, 2).astype("float32")

    def build():
        inp = keras.Input((4,))
        return keras.Model(inp, [keras.layers.Dense(1, name="a")(inp), keras.layers.Dense(2, name="b")(inp)])
    ref, model = _twins(build)
    ref.compile(keras.optimizers.SGD(0.1), ["mse", "mae"])
    km = KerasModel(model)
    km.compile(keras.optimizers.SGD(0.1), ["mse", "mae"])
    h_ref = ref.fit(x, [ya, yb], batch_size=8, epochs=2, shuffle=False, verbose=0)
    # tensorpack's datapoints ([inputs..., targets...]): a runner inside PeriodicTrigger is given the replica
    # share as a bare one is
    runner = InferenceRunner(DataFromList([[x[:8], ya[:8], yb[:8]]], shuffle=False),
                             ScalarStats(["loss"]))
    h = km.fit(x, [ya, yb], batch_size=8, epochs=2, shuffle=False, **QUIET,
               callbacks=[PeriodicTrigger(runner, every_k_steps=1)])
    for name in ("loss", "a_loss", "b_loss"):
        _close(h.history[name], h_ref.history[name])
    assert len(h.history["validation_loss"]) == 2 and np.isfinite(h.history["validation_loss"]).all()
