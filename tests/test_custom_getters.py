"""TF1 custom getters reach the weights of kerastrainer's layers, ``tf.compat.v1.layers`` and
``tf.compat.v1.get_variable``, as TF1 and tensorpack define them.

A quantization program (tensorpack's DoReFa-Net: every conv kernel through a quantizing getter)
used to train a full-precision network without a word; ``remap_variables`` / ``freeze_variables``
/ ``custom_getter_scope`` raised. Each test below fails on that behaviour.
"""
import numpy as np
import pytest
import tensorflow as tf

from _devices import cpus
from kerastrainer import (BatchData, BatchNorm, Callback, Conv2D, DataFromList, FullyConnected, ModelDesc, SimpleTrainer,
                          SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config)
from kerastrainer.compat import tfv1
from kerastrainer.tfutils import LayerStore, TowerContext, get_default_layer_store, reset_default_layer_store
from kerastrainer.tfutils.varreplace import custom_getter_scope, freeze_variables, remap_variables


def _quantize(x, levels=4.):
    """round(x * levels) / levels forward, identity backward (DoReFa's straight-through estimator)."""
    @tf.custom_gradient
    def q(v):
        return tf.round(v * levels) / levels, lambda dy: dy
    return q(x)


def _q_np(w, levels=4.):
    return np.round(np.asarray(w) * levels) / levels


def quantizing_getter(getter, name, *args, **kwargs):
    return _quantize(getter(name, *args, **kwargs))


def _images(n=16, seed=0):
    rng = np.random.RandomState(seed)
    return [[rng.normal(size=(6, 6, 2)).astype("float32"), np.int32(i % 3)] for i in range(n)]


def _vectors(n=16, seed=0):
    rng = np.random.RandomState(seed)
    return [[rng.normal(size=5).astype("float32"), np.int32(i % 3)] for i in range(n)]


class _InitialWeights(Callback):
    """Keeps the weights as training starts (after initialisation)."""

    def _before_train(self):
        self.values = {k: np.array(v.numpy()) for k, v in self.trainer.named_variables().items()}


def _train(model, points, trainer=None, epochs=1, batch=4):
    """Train; returns the trainer and the weights it started from."""
    trainer = trainer or SimpleTrainer(steps_per_call=1)
    initial = _InitialWeights()
    launch_train_with_config(TrainConfig(model=model, dataflow=BatchData(DataFromList(points, shuffle=False), batch),
                                         max_epoch=epochs, callbacks=[initial], extra_callbacks=[], monitors=[]),
                             trainer)
    return trainer, initial.values


def _numpy_vars(trainer):
    return {k: np.array(v.numpy()) for k, v in trainer.named_variables().items()}


class _Classifier(ModelDesc):
    input_shape = (None, 6, 6, 2)

    def inputs(self):
        return [tf.TensorSpec(self.input_shape, tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def logits(self, x):
        raise NotImplementedError

    def build_graph(self, x, y):
        logits = tf.identity(self.logits(x), name="logits")
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.5)


def _conv_fc_reference(x, W0, b0, W1, b1):
    h = tf.nn.conv2d(x, W0, 1, "SAME") + b0
    h = tf.reshape(tf.nn.relu(h), [x.shape[0], -1])
    return (h @ W1 + b1).numpy()


# ----------------------------------------------------------------------------- quantizing getter
class _QuantizedConvFC(_Classifier):
    def logits(self, x):
        with tfv1.variable_scope("q", custom_getter=quantizing_getter):
            h = Conv2D("conv0", x, 4, 3, activation=tf.nn.relu)
            return FullyConnected("fc", h, 3)


def test_a_quantizing_getter_changes_what_conv2d_and_fc_compute_and_the_kernels_still_train(kt_log):
    points = _images()
    trainer, init = _train(_QuantizedConvFC(), points, epochs=2)
    after = _numpy_vars(trainer)
    names = ["q/conv0/W", "q/conv0/b", "q/fc/W", "q/fc/b"]
    assert sorted(after) == names
    # the forward pass is the network of the quantized weights, exactly
    x = np.stack([p[0] for p in points[:4]])
    logits, = trainer.get_predictor(["x"], ["logits"])(x)
    np.testing.assert_allclose(logits, _conv_fc_reference(x, *[_q_np(after[k]) for k in names]), rtol=0, atol=1e-5)
    assert np.abs(logits - _conv_fc_reference(x, *[after[k] for k in names])).max() > 1e-2   # the getter mattered
    # the real, full-precision variables are trained (straight-through gradients reach them), and only once each
    assert len(trainer.trainable_variables) == 4
    for k in ("q/conv0/W", "q/fc/W"):
        assert np.abs(after[k] - init[k]).max() > 1e-3, k
        assert np.abs(after[k] - _q_np(after[k])).max() > 0, k   # not themselves quantized
    assert "custom getter" not in kt_log.warnings()


class _QuantizedTFLayers(_Classifier):
    input_shape = (None, 5)

    def logits(self, x):
        with tfv1.variable_scope("q", custom_getter=quantizing_getter):
            h = tfv1.layers.dense(x, 4, activation=tf.nn.relu, name="d0")
            return tfv1.layers.dense(h, 3, name="d1")


def test_a_quantizing_getter_around_tf_layers_dense():
    points = _vectors()
    trainer, init = _train(_QuantizedTFLayers(), points, epochs=2)
    v = _numpy_vars(trainer)
    assert sorted(v) == ["q/d0/bias", "q/d0/kernel", "q/d1/bias", "q/d1/kernel"]
    x = np.stack([p[0] for p in points[:4]])
    logits, = trainer.get_predictor(["x"], ["logits"])(x)
    h = np.maximum(x @ _q_np(v["q/d0/kernel"]) + _q_np(v["q/d0/bias"]), 0)
    np.testing.assert_allclose(logits, h @ _q_np(v["q/d1/kernel"]) + _q_np(v["q/d1/bias"]), rtol=0, atol=1e-5)
    h_full = np.maximum(x @ v["q/d0/kernel"] + v["q/d0/bias"], 0)
    assert np.abs(logits - (h_full @ v["q/d1/kernel"] + v["q/d1/bias"])).max() > 1e-2
    for k in ("q/d0/kernel", "q/d1/kernel"):
        assert np.abs(v[k] - init[k]).max() > 1e-3, k


# ----------------------------------------------------------------------------- what the getter sees
@pytest.fixture
def fresh_store():
    reset_default_layer_store()
    yield get_default_layer_store()
    reset_default_layer_store()


def test_a_counting_getter_sees_each_weight_once_per_layer_call_with_tf1_names_and_arguments(fresh_store):
    calls = []

    def counting(getter, name, *args, **kwargs):
        calls.append((name, kwargs["trainable"], tuple(tf.TensorShape(kwargs["shape"]).as_list()), kwargs["dtype"]))
        return getter(name, *args, **kwargs)

    x = tf.random.normal([2, 6, 6, 2])
    with tfv1.variable_scope("net", custom_getter=counting):
        y = Conv2D("conv0", x, 4, 3)
        y = BatchNorm("bn", y, training=True)
        tfv1.layers.dense(tf.reshape(y, [2, -1]), 3, name="d")
        w = tfv1.get_variable("extra", shape=[3], initializer=tf.zeros_initializer())
    assert calls == [("net/conv0/W", True, (3, 3, 2, 4), tf.float32), ("net/conv0/b", True, (4,), tf.float32),
                     ("net/bn/gamma", True, (4,), tf.float32), ("net/bn/beta", True, (4,), tf.float32),
                     ("net/bn/mean/EMA", False, (4,), tf.float32), ("net/bn/variance/EMA", False, (4,), tf.float32),
                     ("net/d/kernel", True, (144, 3), tf.float32), ("net/d/bias", True, (3,), tf.float32),
                     ("net/extra", True, (3,), tf.float32)]
    assert w.name == "net/extra:0"
    calls.clear()
    with tfv1.variable_scope("net", custom_getter=counting):   # a layer called again: its getter again
        Conv2D("conv0", x, 4, 3)
    assert [c[0] for c in calls] == ["net/conv0/W", "net/conv0/b"]
    calls.clear()
    Conv2D("conv1", x, 4, 3)                                  # outside the scope: no getter
    assert calls == []


def test_the_getter_is_handed_the_variable_under_its_tf1_name(fresh_store):
    seen = {}

    def look(getter, name, *args, **kwargs):
        v = getter(name, *args, **kwargs)
        seen[name] = (v.name, v.op.name, v.shape.as_list(), v.dtype, v.trainable)
        return v
    with tfv1.variable_scope("a", custom_getter=look):
        FullyConnected("fc", tf.ones([2, 3]), 2)
    assert seen == {"a/fc/W": ("a/fc/W:0", "a/fc/W", [3, 2], tf.float32, True),
                    "a/fc/b": ("a/fc/b:0", "a/fc/b", [2], tf.float32, True)}


def test_nested_getters_compose_as_tf1_composes_them(fresh_store):
    order = []

    def outer(getter, *args, **kwargs):
        order.append("outer")
        return getter(*args, **kwargs) * 2.

    def inner(getter, *args, **kwargs):
        order.append("inner")
        return getter(*args, **kwargs) + 1.

    x = tf.constant([[1., 2., 3.]])
    with tfv1.variable_scope("o", custom_getter=outer), tfv1.variable_scope("i", custom_getter=inner):
        y = FullyConnected("fc", x, 2)
        g = tfv1.get_variable("g", initializer=tf.constant([3., 4.]))   # TF's own get_variable, for reference
    v = fresh_store.named_variables()
    W, b = v["o/i/fc/W"].numpy(), v["o/i/fc/b"].numpy()
    # TF1: the inner scope's getter wraps the outer's, which wraps the variable: inner(outer(v))
    np.testing.assert_allclose(y.numpy(), x.numpy() @ (2 * W + 1) + (2 * b + 1), rtol=1e-6)
    np.testing.assert_allclose(g.numpy(), [7., 9.])
    assert order == ["inner", "outer"] * 3


def test_custom_getter_scope_adds_a_getter_and_no_scope(fresh_store):
    x = tf.constant([[1., 2., 3.]])
    with tfv1.variable_scope("s"):
        outer = tf.get_current_name_scope()
        with custom_getter_scope(lambda getter, *a, **k: getter(*a, **k) * 0.):
            assert tf.get_current_name_scope() == outer
            y = FullyConnected("fc", x, 2, bias_initializer="ones")
    np.testing.assert_array_equal(y.numpy(), np.zeros((1, 2)))
    assert sorted(fresh_store.named_variables()) == ["s/fc/W", "s/fc/b"]


def test_remap_variables_feeds_dorefa_style_fn_each_variable():
    binarized = []

    def binarize_weight(v):          # tensorpack's DoReFa-Net pattern: by the variable's op name
        name = v.op.name
        if not name.endswith("W") or "conv0" in name or "fc" in name:
            return v
        binarized.append(name)
        E = tf.stop_gradient(tf.reduce_mean(tf.abs(v)))

        @tf.custom_gradient
        def _sign(x):
            return tf.where(tf.equal(x, 0), tf.ones_like(x), tf.sign(x / E)) * E, lambda dy: dy
        return _sign(v)

    x = tf.random.normal([2, 6, 6, 2], seed=1)

    store = LayerStore()

    def net():
        with TowerContext("", is_training=True, layer_store=store), remap_variables(binarize_weight):
            h0 = Conv2D("conv0", x, 4, 3, use_bias=False)
            h1 = Conv2D("conv1", h0, 4, 3, use_bias=False)
            return h0, h1, FullyConnected("fc", h1, 2)
    net()                                   # variables made eagerly, then the traced step, as a trainer runs
    assert binarized == ["conv1/W"]
    binarized.clear()
    v = store.named_variables()

    @tf.function(autograph=False)
    def step():
        with tf.GradientTape() as tape:
            h0, h1, out = net()
            loss = tf.reduce_sum(out ** 2)
        return h0, h1, tape.gradient(loss, [v["conv0/W"], v["conv1/W"], v["fc/W"]])
    h0, h1, grads = step()
    assert binarized == ["conv1/W"]
    W1 = v["conv1/W"].numpy()
    E = np.abs(W1).mean()
    expected = tf.nn.conv2d(h0, np.where(W1 == 0, 1., np.sign(W1)) * E, 1, "SAME").numpy()
    np.testing.assert_allclose(h1.numpy(), expected, rtol=1e-5, atol=1e-5)
    assert all(g is not None and np.abs(g.numpy()).sum() > 0 for g in grads)   # straight-through to the variable


class _DoReFaLike(_Classifier):
    def logits(self, x):
        def fw(v):
            if not v.op.name.endswith("W") or "conv0" in v.op.name:
                return v
            return _quantize(v, 2.)
        with remap_variables(fw):
            h = Conv2D("conv0", x, 4, 3, activation=tf.nn.relu)
            h = Conv2D("conv1", h, 4, 3, use_bias=False)
            h = BatchNorm("bn1", h)
            return FullyConnected("fc1", tf.nn.relu(h), 3)


def test_remap_variables_in_training_keeps_batchnorm_statistics_moving():
    trainer, init = _train(_DoReFaLike(), _images())
    v = _numpy_vars(trainer)
    assert np.abs(v["bn1/mean/EMA"]).max() > 0        # BatchNorm's own updates are still made
    assert np.abs(v["bn1/variance/EMA"] - 1).max() > 0
    assert np.abs(v["conv1/W"] - init["conv1/W"]).max() > 1e-3
    assert np.abs(v["conv1/W"] - _q_np(v["conv1/W"], 2.)).max() > 0   # the kernel stays full precision


def test_a_remapped_batchnorm_weight_keeps_the_statistics_updates(fresh_store):
    x = tf.random.normal([4, 3], seed=2) + 5.

    def gamma_doubled(v):
        return v * 2. if v.op.name.endswith("gamma") else v
    with remap_variables(gamma_doubled):
        y = BatchNorm("bn", x, training=True)
    v = fresh_store.named_variables()
    mean, var = x.numpy().mean(0), x.numpy().var(0)
    np.testing.assert_allclose(y.numpy(), 2 * (x.numpy() - mean) / np.sqrt(var + 1e-5), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(v["bn/mean/EMA"].numpy(), 0.1 * mean, rtol=1e-5)   # momentum 0.9 from 0


# ----------------------------------------------------------------------------- freeze_variables
class _PartlyFrozen(_Classifier):
    input_shape = (None, 5)
    stop_gradient, skip_collection = True, False

    def logits(self, x):
        h = FullyConnected("pre", x, 6, activation=tf.nn.tanh)
        with freeze_variables(stop_gradient=self.stop_gradient, skip_collection=self.skip_collection):
            h = FullyConnected("frozen", h, 6, activation=tf.nn.tanh)
        return FullyConnected("head", h, 3)


@pytest.mark.parametrize("replicated", [False, True], ids=["simple", "replicated-2-cpus"])
@pytest.mark.parametrize("stop_gradient,skip_collection", [(True, False), (False, True), (True, True)])
def test_freeze_variables_keeps_the_frozen_layer_unchanged_while_the_rest_trains(replicated, stop_gradient,
                                                                                  skip_collection):
    model_cls = type("Frozen", (_PartlyFrozen,), {"stop_gradient": stop_gradient,
                                                  "skip_collection": skip_collection})
    trainer = SyncMultiGPUTrainerReplicated(cpus(2), steps_per_call=1) if replicated else SimpleTrainer(steps_per_call=1)
    trained, init = _train(model_cls(), _vectors(), trainer=trainer, epochs=2)
    final = _numpy_vars(trained)
    assert set(init) == set(final) == {"pre/W", "pre/b", "frozen/W", "frozen/b", "head/W", "head/b"}
    for name in ("frozen/W", "frozen/b"):
        np.testing.assert_array_equal(final[name], init[name], err_msg=name)
    for name in ("head/W", "pre/W"):     # the rest trains, the layer before the frozen one too
        assert np.abs(final[name] - init[name]).max() > 1e-4, name
    trainable = {n for n, v in trained.named_variables().items() if v.trainable}
    assert ("frozen/W" in trainable) is (not skip_collection)


def test_freeze_variables_stop_gradient_blocks_the_gradient_of_the_frozen_weights(fresh_store):
    x = tf.ones([2, 3])
    with tf.GradientTape(persistent=True) as tape:
        with freeze_variables():
            y = FullyConnected("fc", x, 2)
        loss = tf.reduce_sum(y)
    v = fresh_store.named_variables()
    assert tape.gradient(loss, v["fc/W"]) is None and tape.gradient(loss, v["fc/b"]) is None
    assert v["fc/W"].trainable                           # still trainable: only its use here is frozen


def test_skip_collection_applies_where_the_variable_is_created_only(fresh_store):
    x = tf.ones([2, 3])
    FullyConnected("fc", x, 2)                           # created trainable, outside the scope
    with freeze_variables(stop_gradient=False, skip_collection=True):
        FullyConnected("fc", x, 2)                       # reused inside: TF1 leaves it trainable
        FullyConnected("fc2", x, 2)                      # created inside: not trainable
        g = tfv1.get_variable("g", shape=[2])
    v = fresh_store.named_variables()
    assert v["fc/W"].trainable and not v["fc2/W"].trainable and not v["fc2/b"].trainable
    assert not g.trainable


# ----------------------------------------------------------------------------- what cannot apply: errors
def test_a_getter_that_renames_the_variable_is_an_error_naming_it_and_the_layer(fresh_store):
    def renaming(getter, name, *args, **kwargs):
        return getter(name + "_q", *args, **kwargs)
    with tfv1.variable_scope("r", custom_getter=renaming), pytest.raises(ValueError) as e:
        FullyConnected("fc", tf.ones([2, 3]), 2)
    assert "renaming" in str(e.value) and "'r/fc'" in str(e.value) and "r/fc/W_q" in str(e.value)


def test_a_getter_that_returns_another_shape_is_an_error(fresh_store):
    def transpose(getter, *args, **kwargs):
        return tf.transpose(getter(*args, **kwargs))
    with tfv1.variable_scope("t", custom_getter=transpose), pytest.raises(ValueError) as e:
        FullyConnected("fc", tf.ones([2, 3]), 2, use_bias=False)
    assert "transpose" in str(e.value) and "'t/fc'" in str(e.value) and "shape" in str(e.value)


class _TernaryWithOwnScales(_Classifier):
    """Trained Ternary Quantization's pattern (DoReFa-Net's dorefa.ternarize): the getter makes scale
    variables of its own with tf.get_variable, in the layer's variable scope."""
    input_shape = (None, 5)

    def logits(self, x):
        def ternarize(getter, name, *args, **kwargs):
            w = getter(name, *args, **kwargs)
            if not name.endswith("/W"):
                return w
            wp = tfv1.get_variable("Wp", initializer=1.0, dtype=tf.float32)
            thresh = tf.stop_gradient(tf.reduce_max(tf.abs(w)) * 0.05)
            mask = tf.cast(tf.abs(w) > thresh, tf.float32)

            @tf.custom_gradient
            def _sign(v):
                return tf.sign(v) * mask, lambda dy: dy
            return _sign(w) * wp
        with tfv1.variable_scope("t", custom_getter=ternarize):
            return FullyConnected("fc", x, 3)


@pytest.mark.parametrize("replicated", [False, True], ids=["simple", "replicated-2-cpus"])
def test_a_getter_that_makes_variables_of_its_own(replicated):
    trainer = SyncMultiGPUTrainerReplicated(cpus(2), steps_per_call=1) if replicated else SimpleTrainer(steps_per_call=1)
    trained, init = _train(_TernaryWithOwnScales(), _vectors(), trainer=trainer, epochs=2)
    v = _numpy_vars(trained)
    assert sorted(v) == ["t/fc/W", "t/fc/Wp", "t/fc/b"]
    assert v["t/fc/Wp"] != init["t/fc/Wp"] and np.abs(v["t/fc/W"] - init["t/fc/W"]).max() > 0   # both train
    x = np.stack([p[0] for p in _vectors()[:4]])
    logits, = trained.get_predictor(["x"], ["logits"])(x)
    W = v["t/fc/W"]
    ternary = np.sign(W) * (np.abs(W) > np.abs(W).max() * 0.05) * v["t/fc/Wp"]
    np.testing.assert_allclose(logits, x @ ternary + v["t/fc/b"], rtol=1e-5, atol=1e-5)


class _ScaleByGetVariable(_Classifier):
    input_shape = (None, 5)

    def logits(self, x):
        with tfv1.variable_scope("head"):
            s = tfv1.get_variable("scale", initializer=1.0)
        return FullyConnected("fc", x, 3) * s


def test_get_variable_in_the_second_replica_finds_the_variable():
    # MirroredStrategy traces replica 1 under variable_scope(reuse=True): its get_variable must find
    # the store's variable (it raised "Variable head/scale does not exist")
    trained, init = _train(_ScaleByGetVariable(), _vectors(), trainer=SyncMultiGPUTrainerReplicated(
        cpus(2), steps_per_call=1))
    v = _numpy_vars(trained)
    assert sorted(v) == ["fc/W", "fc/b", "head/scale"] and v["head/scale"] != init["head/scale"]


def test_a_layer_made_with_kerastrainers_get_variable_goes_through_the_getter(fresh_store):
    # PReLU makes its alpha with get_variable, as tensorpack's with tf.get_variable
    from kerastrainer import PReLU
    x = tf.constant([[-1., 2.]])
    names = []

    def doubled(getter, name, *args, **kwargs):
        names.append(name)
        return getter(name, *args, **kwargs) * 2.
    with tfv1.variable_scope("d", custom_getter=doubled):
        y = PReLU("prelu", x, init=0.25)
    assert names == ["d/prelu/alpha"]
    np.testing.assert_allclose(y.numpy(), [[-0.5, 2.]])                   # alpha 0.25 seen as 0.5
    with tf.GradientTape() as tape, freeze_variables():
        loss = tf.reduce_sum(PReLU("prelu2", x))
    assert tape.gradient(loss, fresh_store.named_variables()["prelu2/alpha"]) is None
    with freeze_variables(stop_gradient=False, skip_collection=True):
        PReLU("prelu3", x)                               # created here: made non-trainable
        PReLU("prelu2", x)                               # made before (stop_gradient only): stays trainable
    v = fresh_store.named_variables()
    assert not v["prelu3/alpha"].trainable and v["prelu2/alpha"].trainable
