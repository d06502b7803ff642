"""Functional layers: values against plain Keras layers, sharing across towers and traces,
argscope, LinearWrap, regularization, errors."""
import importlib.util
import logging

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerastrainer.models import (AvgPooling, BatchNorm, BNReLU, ConcatWith, Conv2D, Conv2DTranspose,
                                 Dropout, FullyConnected, GlobalAvgPooling, InstanceNorm, LayerNorm,
                                 LinearWrap, MaxPooling, PReLU, argscope, enable_argscope_for_function,
                                 get_arg_scope, keras_layer,
                                 l1_regularizer, l2_regularizer, layer_register, regularize_cost,
                                 regularize_cost_from_collection)
from kerastrainer.tfutils.layer_store import LayerStore
from kerastrainer.tfutils.tower import TowerContext


@pytest.fixture
def store():
    return LayerStore()


def tower(store, name="tower0", training=True, index=0):
    return TowerContext(name, is_training=training, index=index, layer_store=store)


def rand(*shape, seed=0):
    return tf.constant(np.random.RandomState(seed).randn(*shape).astype("float32"))


def copy_into(ref_layer, layer, x):
    """Build ``ref_layer`` on x and give it ``layer``'s weights."""
    ref_layer(x)
    ref_layer.set_weights(layer.get_weights())
    return ref_layer


# ---------------------------------------------------------------- layers vs Keras

def test_conv2d_matches_keras_and_names(store):
    x = rand(2, 9, 9, 3)
    with tower(store):
        y = Conv2D("conv0", x, 5, 3, strides=2, activation=tf.nn.relu)
    layer = store.layers["conv0"]
    ref = copy_into(keras.layers.Conv2D(5, 3, strides=2, padding="same", activation="relu"), layer, x)
    assert y.shape == (2, 5, 5, 5)
    np.testing.assert_allclose(y.numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-5)
    names = store.named_variables()
    assert set(names) == {"conv0/W", "conv0/b"}
    assert tuple(names["conv0/W"].shape) == (3, 3, 3, 5)


def test_conv2d_tensorpack_argument_names(store):
    x = rand(1, 8, 8, 4)
    with tower(store):
        a = Conv2D("a", x, out_channel=6, kernel_shape=3, stride=2, nl=tf.nn.relu, use_bias=False)
    with tower(store):  # create 'b', then give it a's weights
        Conv2D("b", x, filters=6, kernel_size=3, strides=2, activation="relu", use_bias=False)
    store.layers["b"].set_weights(store.layers["a"].get_weights())
    with tower(store):
        b = Conv2D("b", x, filters=6, kernel_size=3, strides=2, activation="relu", use_bias=False)
    np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-6)
    assert "a/b" not in store.named_variables()


def test_conv2d_groups_and_padding_case(store):
    x = rand(1, 6, 6, 4)
    with tower(store):
        y = Conv2D("g", x, 8, 3, split=2, padding="VALID")
    assert y.shape == (1, 4, 4, 8)
    assert tuple(store.named_variables()["g/W"].shape) == (3, 3, 2, 8)


def test_conv2d_transpose_matches_keras(store):
    x = rand(2, 4, 4, 3)
    with tower(store):
        y = Conv2DTranspose("up", x, 6, 4, strides=2)
    ref = copy_into(keras.layers.Conv2DTranspose(6, 4, strides=2, padding="same"), store.layers["up"], x)
    assert y.shape == (2, 8, 8, 6)
    np.testing.assert_allclose(y.numpy(), ref(x).numpy(), rtol=1e-5, atol=1e-5)


def test_fully_connected_flattens_input(store):
    x = rand(3, 2, 2, 5)
    with tower(store):
        y = FullyConnected("fc", x, 7, activation="tanh")
    flat = tf.reshape(x, [3, 20])
    ref = copy_into(keras.layers.Dense(7, activation="tanh"), store.layers["fc"], flat)
    np.testing.assert_allclose(y.numpy(), ref(flat).numpy(), rtol=1e-5, atol=1e-6)
    assert tuple(store.named_variables()["fc/W"].shape) == (20, 7)


def test_pooling_matches_keras(store):
    x = rand(2, 7, 7, 3)
    with tower(store):
        mp = MaxPooling("mp", x, 3, strides=2, padding="same")
        ap = AvgPooling("ap", x, 2)
        gap = GlobalAvgPooling("gap", x)
    np.testing.assert_allclose(mp.numpy(), keras.layers.MaxPooling2D(3, 2, padding="same")(x).numpy())
    np.testing.assert_allclose(ap.numpy(), keras.layers.AveragePooling2D(2)(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(gap.numpy(), x.numpy().mean(axis=(1, 2)), rtol=1e-5, atol=1e-6)
    assert ap.shape == (2, 3, 3, 3)
    assert store.named_variables() == {}  # pooling holds no variables


def test_layernorm_and_instancenorm_values(store):
    x2, x4 = rand(4, 6), rand(2, 3, 3, 5, seed=1)
    with tower(store):
        ln2 = LayerNorm("ln2", x2)
        ln4 = LayerNorm("ln4", x4)
        inn = InstanceNorm("in", x4)
    ref = copy_into(keras.layers.LayerNormalization(epsilon=1e-5), store.layers["ln2"], x2)
    np.testing.assert_allclose(ln2.numpy(), ref(x2).numpy(), rtol=1e-4, atol=1e-5)
    a = x4.numpy()
    want_ln = (a - a.mean(axis=(1, 2, 3), keepdims=True)) / np.sqrt(a.var(axis=(1, 2, 3), keepdims=True) + 1e-5)
    want_in = (a - a.mean(axis=(1, 2), keepdims=True)) / np.sqrt(a.var(axis=(1, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(ln4.numpy(), want_ln, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(inn.numpy(), want_in, rtol=1e-4, atol=1e-4)
    names = store.named_variables()
    assert tuple(names["ln4/gamma"].shape) == (5,) and tuple(names["in/beta"].shape) == (5,)


def test_prelu_and_concat(store):
    x = tf.constant([[-2.0, 3.0]])
    with tower(store):
        y = PReLU("prelu", x, init=0.25)
        c = ConcatWith(x, [y, x], 1)
    np.testing.assert_allclose(y.numpy(), [[-0.5, 3.0]])
    assert "prelu/alpha" in store.named_variables()
    assert c.shape == (1, 6)


# ---------------------------------------------------------------- BatchNorm / Dropout

def test_batchnorm_training_uses_batch_stats_and_updates_moving(store):
    x = rand(16, 3, 3, 4) * 3.0 + 2.0
    with tower(store):
        y = BatchNorm("bn", x, momentum=0.9)
    a = x.numpy()
    mean, var = a.mean(axis=(0, 1, 2)), a.var(axis=(0, 1, 2))
    np.testing.assert_allclose(y.numpy(), (a - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    v = store.named_variables()
    assert set(v) == {"bn/gamma", "bn/beta", "bn/mean/EMA", "bn/variance/EMA"}
    np.testing.assert_allclose(v["bn/mean/EMA"].numpy(), 0.1 * mean, rtol=1e-4)
    n = a.size // 4   # a 4-D input's moving variance follows the unbiased batch variance (TF's fused kernel)
    np.testing.assert_allclose(v["bn/variance/EMA"].numpy(), 0.9 + 0.1 * var * n / (n - 1), rtol=1e-5)
    assert not v["bn/mean/EMA"].trainable and v["bn/gamma"].trainable


def test_batchnorm_inference_uses_moving_stats_and_does_not_update(store):
    x = rand(8, 4) + 1.0
    with tower(store):
        BatchNorm("bn", x)  # create
    v = store.named_variables()
    v["bn/mean/EMA"].assign([1.0, 2.0, 3.0, 4.0])
    v["bn/variance/EMA"].assign([4.0, 4.0, 4.0, 4.0])
    with tower(store, name="", training=False):
        y = BatchNorm("bn", x)
    want = (x.numpy() - np.array([1, 2, 3, 4.0])) / np.sqrt(4.0 + 1e-5)
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(v["bn/mean/EMA"].numpy(), [1, 2, 3, 4])


def test_batchnorm_updates_inside_tf_function(store):
    x = rand(8, 4) + 5.0
    with tower(store):
        BatchNorm("bn", x)  # eager build pass
    mean_var = store.named_variables()["bn/mean/EMA"]
    before = mean_var.numpy().copy()

    @tf.function
    def step(x):
        with tower(store):
            return BatchNorm("bn", x)

    step(x)
    step(x)
    batch_mean = x.numpy().mean(axis=0)
    want = before * 0.81 + batch_mean * (1 - 0.81)
    np.testing.assert_allclose(mean_var.numpy(), want, rtol=1e-4)


def test_batchnorm_channels_first_axis(store):
    x = rand(4, 3, 5, 5)
    with tower(store):
        y = BatchNorm("bn", x, data_format="NCHW")
    assert tuple(store.named_variables()["bn/gamma"].shape) == (3,)
    np.testing.assert_allclose(y.numpy().mean(axis=(0, 2, 3)), 0, atol=1e-4)


def test_batchnorm_bad_sync_statistics(store):
    with tower(store), pytest.raises(ValueError, match="sync_statistics"):
        BatchNorm("bn", rand(2, 3), sync_statistics="mpi")


@pytest.mark.skipif(importlib.util.find_spec("horovod") is not None, reason="horovod is installed")
def test_batchnorm_horovod_without_horovod(store):
    with tower(store), pytest.raises(ImportError, match="sync_statistics='nccl'"):
        BatchNorm("bn", rand(2, 3), sync_statistics="horovod")


def _mirrored(n=2):
    return tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(n)])


@pytest.mark.parametrize("sync", [None, "nccl"])
def test_batchnorm_under_mirrored_strategy(sync):
    strategy = _mirrored(2)
    store = LayerStore()
    data = [np.full([2, 3], 1.0, "float32"), np.full([2, 3], 3.0, "float32")]
    data[1][0] += 2.0  # replica 1 has spread, replica 0 none
    with strategy.scope(), tower(store):
        BatchNorm("bn", tf.zeros([1, 3]), momentum=0.5, sync_statistics=sync, training=False)
    per_replica = strategy.experimental_distribute_values_from_function(
        lambda ctx: tf.constant(data[ctx.replica_id_in_sync_group]))

    def replica_fn(x):
        rid = int(tf.get_static_value(tf.distribute.get_replica_context().replica_id_in_sync_group))
        with TowerContext(f"tower{rid}", is_training=True, index=rid, total=2, layer_store=store):
            return BatchNorm("bn", x, momentum=0.5, sync_statistics=sync)

    outs = tf.function(lambda x: strategy.run(replica_fn, args=(x,)))(per_replica)
    mm = store.named_variables()["bn/mean/EMA"]
    copies = [c.numpy() for c in mm.value.values]  # the MirroredVariable behind the Keras variable
    np.testing.assert_allclose(copies[0], copies[1])  # mirrored copies never drift apart
    if sync is None:
        np.testing.assert_allclose(copies[0], 0.5 * data[0].mean(0), rtol=1e-5)  # first replica's stats
    else:
        whole = np.concatenate(data)
        np.testing.assert_allclose(copies[0], 0.5 * whole.mean(0), rtol=1e-5)
        got = np.concatenate([o.numpy() for o in strategy.experimental_local_results(outs)])
        want = (whole - whole.mean(0)) / np.sqrt(whole.var(0) + 1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_bnrelu_names_inside_conv(store):
    with tower(store):
        y = Conv2D("conv0", rand(1, 4, 4, 2), 3, 3, activation=BNReLU)
        BNReLU("preact", y)
    names = set(store.named_variables())
    assert {"conv0/W", "conv0/b", "conv0/bn/gamma", "conv0/bn/mean/EMA", "preact/bn/beta"} <= names
    assert float(tf.reduce_min(y)) >= 0.0


def test_dropout_training_and_inference(store):
    x = tf.ones([1000])
    with tower(store, name="", training=False):
        np.testing.assert_array_equal(Dropout("drop", x, rate=0.5).numpy(), x.numpy())
    with tower(store):
        y = Dropout(x, keep_prob=0.75).numpy()
        same = Dropout("d", x, 0.5, training=False).numpy()
    kept = y[y != 0]
    np.testing.assert_allclose(kept, 1.0 / 0.75, rtol=1e-6)
    assert 0.1 < (y == 0).mean() < 0.4
    np.testing.assert_array_equal(same, x.numpy())
    with tower(store), pytest.raises(TypeError, match="ambiguous"):
        Dropout(x, 0.2)


# ---------------------------------------------------------------- sharing

def test_layers_shared_across_towers_and_traces(store):
    x = rand(2, 6, 6, 3)

    def tower_fn(x):
        with tf.name_scope("res1"):
            y = Conv2D("conv0", x, 4, 3, activation=BNReLU)
        return FullyConnected("fc", y, 2)

    with tower(store, "tower0"):
        y0 = tower_fn(x)
    names = dict(store.named_variables())
    assert "res1/conv0/W" in names and "res1/conv0/bn/gamma" in names
    with tower(store, "tower1", index=1):
        y1 = tower_fn(x)
    store.allow_create = False  # the trainer's rule after the build pass

    @tf.function
    def traced(x):
        with tower(store, "tower0"):
            a = tower_fn(x)
        with tower(store, "tower1", index=1):
            b = tower_fn(x)
        with tower(store, "", training=False):
            c = tower_fn(x)
        return a, b, c

    a, b, c = traced(x)
    after = store.named_variables()
    assert set(after) == set(names)
    assert all(after[k] is names[k] for k in names)
    assert a.shape == b.shape == c.shape == y0.shape == y1.shape


def test_same_name_twice_shares_in_eager_and_tf_function(store):
    x = rand(1, 3)
    with tower(store):
        e1, e2 = FullyConnected("fc", x, 2), FullyConnected("fc", x, 2)
    store.allow_create = False

    @tf.function
    def f(x):
        with tower(store):
            return FullyConnected("fc", x, 2), FullyConnected("fc", x, 2)

    g1, g2 = f(x)
    np.testing.assert_allclose(g1.numpy(), g2.numpy())
    np.testing.assert_allclose(e1.numpy(), e2.numpy())
    np.testing.assert_allclose(e1.numpy(), g1.numpy(), rtol=1e-6)
    assert len(store.layers) == 1


def test_new_layer_after_build_is_a_clear_error(store):
    with tower(store):
        FullyConnected("fc", rand(1, 3), 2)
    store.allow_create = False
    with tower(store), pytest.raises(RuntimeError, match="fc2"):
        FullyConnected("fc2", rand(1, 3), 2)


def test_keras_layer_helper_shared(store):
    x = rand(2, 3)
    made = []

    def factory():
        made.append(1)
        return keras.layers.Dense(4, name="dense_head")

    for name in ("tower0", "tower1"):
        with tower(store, name), tf.name_scope("head"):
            layer = keras_layer("fc", factory)
            layer(x)
    assert len(made) == 1
    assert set(store.named_variables()) == {"head/fc/kernel", "head/fc/bias"}
    with tower(store), pytest.raises(TypeError, match="factory"):
        keras_layer("x", keras.layers.Dense(3))


# ---------------------------------------------------------------- argscope / register / LinearWrap

def test_argscope_defaults_and_overrides(store):
    x = rand(1, 8, 8, 3)
    with tower(store):
        with argscope(Conv2D, use_bias=False, kernel_size=3, strides=2):
            a = Conv2D("a", x, 4)
            with argscope([Conv2D, FullyConnected], use_bias=True):
                b = Conv2D("b", x, 4, 5, strides=1)
                assert get_arg_scope()["FullyConnected"] == {"use_bias": True}
            assert get_arg_scope()["Conv2D"]["use_bias"] is False
        c = Conv2D("c", x, 4, 1)
    names = store.named_variables()
    assert "a/b" not in names and "b/b" in names and "c/b" in names
    assert a.shape == (1, 4, 4, 4) and b.shape == (1, 8, 8, 4) and c.shape == (1, 8, 8, 4)
    assert tuple(names["b/W"].shape) == (5, 5, 3, 4)
    assert get_arg_scope()["Conv2D"] == {}


def test_argscope_legacy_name_and_errors():
    with argscope(Conv2D, nl=tf.nn.relu):
        assert get_arg_scope()["Conv2D"] == {"activation": tf.nn.relu}
    with pytest.raises(TypeError, match="Conv2D.*'filterz'"):
        with argscope(Conv2D, filterz=3):
            pass
    with pytest.raises(ValueError, match="argscope"):
        with argscope(tf.nn.relu, name="x"):
            pass


@layer_register(log_shape=True)
def ScaledBlock(x, channels, scale=1.0):
    y = Conv2D("conv", x, channels, 1, use_bias=False)
    return y * scale


def test_user_layer_register_scopes_argscope_and_logging(store):
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    lg = logging.getLogger("kerastrainer")
    lg.addHandler(handler)
    try:
        x = tf.ones([1, 2, 2, 3])
        with tower(store):
            y1 = ScaledBlock("blk", x, 2)
            with argscope(ScaledBlock, scale=0.0):
                y2 = ScaledBlock("blk", x, 2)
                y3 = ScaledBlock("blk", x, 2, scale=2.0)
        from kerastrainer.tfutils.layer_store import log_layer_shapes
        log_layer_shapes(store)   # what TowerFunction.build does after building the model
        log_layer_shapes(store)   # nothing new: nothing logged
    finally:
        lg.removeHandler(handler)
    assert set(store.named_variables()) == {"blk/conv/W"}
    np.testing.assert_allclose(y2.numpy(), 0.0)
    np.testing.assert_allclose(y3.numpy(), 2 * y1.numpy(), rtol=1e-6)
    msgs = [r.getMessage() for r in records]
    tables = [m for m in msgs if m.startswith("Layers of the model:")]
    assert len(tables) == 1        # one table, one row per layer though "blk" was built three times
    rows = [line.split() for line in tables[0].splitlines()[3:]]
    assert rows == [["blk/conv", "[1,", "2,", "2,", "3]", "[1,", "2,", "2,", "2]", "6"],   # (3*2 W, no bias)
                    ["blk", "[1,", "2,", "2,", "3]", "[1,", "2,", "2,", "2]"]]


def test_clear_errors_for_wrong_arguments(store):
    x = rand(1, 4, 4, 3)
    with tower(store):
        with pytest.raises(TypeError, match="first argument must be the layer's name"):
            Conv2D(x, 4, 3)
        with pytest.raises(TypeError, match="unexpected argument 'kernal_size'"):
            Conv2D("c", x, 4, kernal_size=3)
        with pytest.raises(TypeError, match="filters"):
            Conv2D("c", x)
        with pytest.raises(ValueError, match="data_format"):
            Conv2D("c", x, 4, 3, data_format="HWC")
        with pytest.raises(TypeError, match="must be a tensor"):
            FullyConnected("fc", "not a tensor", 3)
        with pytest.raises(TypeError, match="both 'stride' and 'strides'"):
            Conv2D("c", x, 4, 3, stride=1, strides=1)
    assert store.layers == {}


def test_linearwrap_chain_equals_manual_calls(store):
    x = rand(2, 8, 8, 3)
    with tower(store):
        out = (LinearWrap(x)
               .Conv2D("c0", 4, 3, activation=tf.nn.relu)
               .MaxPooling("p0", 2)
               .tf.nn.relu()
               .apply(tf.multiply, 2.0)
               .ConcatWith(tf.zeros([2, 4, 4, 1]), 3)
               .FullyConnected("fc", 5)())
        manual = Conv2D("c0", x, 4, 3, activation=tf.nn.relu)
        manual = tf.nn.relu(MaxPooling("p0", manual, 2)) * 2.0
        manual = FullyConnected("fc", tf.concat([manual, tf.zeros([2, 4, 4, 1])], 3), 5)
    np.testing.assert_allclose(out.numpy(), manual.numpy(), rtol=1e-6)
    assert len(store.layers) == 2
    with pytest.raises(AttributeError, match="not a registered layer"):
        LinearWrap(x).Conv3D("c", 3)


# ---------------------------------------------------------------- regularization

def test_regularize_cost_equals_hand_sum(store):
    x = rand(1, 4, 4, 2)
    with tower(store):
        y = Conv2D("conv0", x, 3, 3)
        FullyConnected("fc", y, 2, kernel_regularizer=keras.regularizers.L2(0.5))
        wd = regularize_cost("conv0/W|fc/b", l2_regularizer(1e-2))
        l1 = regularize_cost(".*/W", l1_regularizer(0.1), include_layer_losses=False)
        coll = regularize_cost_from_collection()
    v = store.named_variables()
    fc_pen = 0.5 * np.sum(v["fc/W"].numpy() ** 2)
    want = 1e-2 * np.sum(v["conv0/W"].numpy() ** 2) / 2 + 1e-2 * np.sum(v["fc/b"].numpy() ** 2) / 2
    np.testing.assert_allclose(wd.numpy(), want + fc_pen, rtol=1e-5)
    want_l1 = 0.1 * (np.abs(v["conv0/W"].numpy()).sum() + np.abs(v["fc/W"].numpy()).sum())
    np.testing.assert_allclose(l1.numpy(), want_l1, rtol=1e-5)
    np.testing.assert_allclose(coll.numpy(), fc_pen, rtol=1e-5)
    assert wd.dtype == tf.float32 and wd.shape == ()


def test_regularize_cost_inference_and_no_match(store):
    with tower(store):
        FullyConnected("fc", rand(1, 3), 2)
        assert float(regularize_cost("nothing_matches", l2_regularizer(1.0))) == 0.0
        with pytest.raises(ValueError, match="regex"):
            regularize_cost("(", l2_regularizer(1.0))
    with tower(store, "", training=False):
        assert float(regularize_cost(".*", l2_regularizer(1.0))) == 0.0


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf.function"])
def test_channels_first_matches_channels_last_on_any_device(store, traced):
    """NCHW layers give the NHWC layers' outputs and gradients, also on CPUs (no NCHW kernels
    there: they run NHWC between transposes). The first conv's output is 4x4 with 4 channels:
    where Keras 3.15's ``ops.add`` puts an NCHW bias along the width."""
    x = rand(2, 8, 8, 3)
    x_nchw = tf.transpose(x, [0, 3, 1, 2])

    def net(x, suffix):
        return (LinearWrap(x).Conv2D("c" + suffix, 4, 3, strides=2).BatchNorm("bn" + suffix)
                .MaxPooling("p", 2).AvgPooling("a", 1).Conv2DTranspose("up" + suffix, 2, 3, strides=2)
                .GlobalAvgPooling("gap")())

    def nchw():
        return argscope([Conv2D, Conv2DTranspose, BatchNorm, MaxPooling, AvgPooling, GlobalAvgPooling],
                        data_format="channels_first")
    with tower(store, name="", training=False):
        net(x, "")
        with nchw():
            net(x_nchw, "_nchw")  # build, then copy the NHWC layers' weights (same layouts)
    for name in ("c", "up"):   # non-zero biases, so that the forward pass checks where they go
        store.layers[name].bias.assign(tf.random.stateless_normal(store.layers[name].bias.shape, seed=[5, 6]))
    for name in ("c", "bn", "up"):
        store.layers[name + "_nchw"].set_weights(store.layers[name].get_weights())

    def run(x, suffix):
        with tower(store, name="", training=False), tf.GradientTape() as tape:
            tape.watch(x)
            if suffix:
                with nchw():
                    y = net(x, suffix)
            else:
                y = net(x, suffix)
            loss = tf.reduce_sum(y * tf.range(1.0, 3.0))
        layer = store.layers["c" + suffix]
        return (y,) + tuple(tape.gradient(loss, [x, layer.kernel, layer.bias]))

    if traced:
        run = tf.function(run, autograph=False)
    y0, dx0, dw0, db0 = run(x, "")
    y1, dx1, dw1, db1 = run(x_nchw, "_nchw")
    np.testing.assert_allclose(y1.numpy(), y0.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dx1.numpy(), tf.transpose(dx0, [0, 3, 1, 2]).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw1.numpy(), dw0.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(db1.numpy(), db0.numpy(), rtol=1e-4, atol=1e-5)


def test_layers_under_mirrored_strategy_share_variables():
    strategy = _mirrored(2)
    store = LayerStore()

    def tower_fn(x):
        x = Conv2D("conv0", x, 4, 3, activation=BNReLU)
        return FullyConnected("fc", GlobalAvgPooling("gap", x), 3)

    with strategy.scope(), tower(store):
        tower_fn(tf.zeros([1, 5, 5, 2]))  # the trainer's eager build pass
    store.allow_create = False
    before = store.named_variables()

    def replica_fn(x):
        rid = int(tf.get_static_value(tf.distribute.get_replica_context().replica_id_in_sync_group))
        with TowerContext(f"tower{rid}", is_training=True, index=rid, total=2, layer_store=store):
            return tower_fn(x)

    outs = tf.function(lambda x: strategy.run(replica_fn, args=(x,)))(tf.ones([2, 5, 5, 2]))
    # a plain tensor goes whole to every replica
    assert [o.shape for o in strategy.experimental_local_results(outs)] == [(2, 3), (2, 3)]
    after = store.named_variables()
    assert set(after) == set(before) and all(after[k] is before[k] for k in before)
    assert isinstance(after["fc/W"].value, tf.distribute.DistributedValues)


def test_enable_argscope_for_function_and_scopeless_layers(store):
    def scale(x, factor=1.0, name=None):
        return x * factor

    scale = enable_argscope_for_function(scale, log_shape=False)

    @layer_register(log_shape=False, use_scope=False)
    def AddOne(x):
        return x + 1.0

    x = tf.ones([2])
    with argscope(scale, factor=3.0):
        np.testing.assert_allclose(scale(x).numpy(), [3.0, 3.0])
        np.testing.assert_allclose(scale(x, factor=2.0).numpy(), [2.0, 2.0])
    np.testing.assert_allclose(AddOne(x).numpy(), [2.0, 2.0])
    np.testing.assert_allclose(LinearWrap(x).AddOne()().numpy(), [2.0, 2.0])
    with pytest.raises(TypeError, match="takes no name"):
        AddOne("a", x)
    with pytest.raises(TypeError, match="scale has no argument 'facto'"):
        with argscope(scale, facto=1):
            pass
