"""The ResNet zoo: parameter counts equal the standard models', tensorpack's variable
names and block structure, and the network trains under a tower context."""
import re

import numpy as np
import pytest
import tensorflow as tf

from kerastrainer.models import Conv2D, argscope, resnet
from kerastrainer.models.resnet import resnet_bottleneck, resnet_group
from kerastrainer.tfutils.layer_store import LayerStore
from kerastrainer.tfutils.tower import TowerContext

# Standard ImageNet models (torchvision / Keras without conv biases), trainable parameters.
STANDARD_PARAMS = {18: 11_689_512, 34: 21_797_672, 50: 25_557_032, 101: 44_549_160,
                   152: 60_192_808}


def build(depth, mode="resnet", num_classes=1000, image=None):
    store = LayerStore()
    image = tf.zeros([1, 64, 64, 3]) if image is None else image
    with TowerContext("tower0", is_training=True, layer_store=store):
        logits = resnet(image, depth, num_classes=num_classes, mode=mode)
    return store, logits


def trainable_count(store):
    return sum(int(np.prod(v.shape)) for v in store.named_variables().values() if v.trainable)


@pytest.mark.parametrize("depth", [18, 34])
def test_param_count_small(depth):
    store, logits = build(depth)
    assert logits.shape == (1, 1000)
    assert trainable_count(store) == STANDARD_PARAMS[depth]


@pytest.mark.slow
@pytest.mark.parametrize("depth", [50, 101, 152])
def test_param_count_large(depth):
    store, logits = build(depth)
    assert logits.shape == (1, 1000)
    assert trainable_count(store) == STANDARD_PARAMS[depth]


def test_resnet50_names_and_zero_init_gamma():
    store, _ = build(50)
    v = store.named_variables()
    assert trainable_count(store) == STANDARD_PARAMS[50]
    for name in ("conv0/W", "conv0/bn/gamma", "group0/block0/convshortcut/W",
                 "group0/block0/convshortcut/bn/mean/EMA", "group3/block2/conv3/W", "linear/W",
                 "linear/b"):
        assert name in v, name
    assert "conv0/b" not in v  # convs have no bias
    assert "group0/block1/convshortcut/W" not in v  # identity shortcut inside a group
    assert tuple(v["group1/block0/conv2/W"].shape) == (3, 3, 128, 128)
    np.testing.assert_array_equal(v["group2/block3/conv3/bn/gamma"].numpy(), 0.0)
    np.testing.assert_array_equal(v["group2/block3/conv2/bn/gamma"].numpy(), 1.0)
    np.testing.assert_array_equal(v["group2/block0/convshortcut/bn/gamma"].numpy(), 1.0)


def test_stride_is_on_the_3x3_conv():
    store = LayerStore()

    def group(x):
        with TowerContext("tower0", is_training=True, layer_store=store), \
                argscope(Conv2D, use_bias=False):
            return resnet_group("group1", x, resnet_bottleneck, 8, 2, 2)

    group(tf.zeros([1, 8, 8, 16]))  # eager build pass
    store.allow_create = False
    graph = tf.function(group).get_concrete_function(tf.TensorSpec([2, 8, 8, 16])).graph
    strides = {}
    for op in graph.get_operations():
        if op.type == "Conv2D":
            layer = re.search(r"group1/(block\d/conv\w+)/", op.name).group(1)
            strides[layer] = list(op.get_attr("strides"))[1]
    assert strides == {"block0/conv1": 1, "block0/conv2": 2, "block0/conv3": 1,
                       "block0/convshortcut": 2, "block1/conv1": 1, "block1/conv2": 1,
                       "block1/conv3": 1}


def test_preact_resnet18_structure():
    store, logits = build(18, mode="preact", num_classes=10)
    v = store.named_variables()
    assert logits.shape == (1, 10)
    assert "group0/block1/preact/bn/gamma" in v
    assert "group0/block0/preact/bn/gamma" not in v  # the first block gets an activated input
    assert "group3/bnlast/bn/gamma" in v
    # ResNet-18 minus the BNs after the three projection shortcuts (2 * (128 + 256 + 512));
    # the per-block BN count is unchanged ('preact' + 'bnlast' replace the BNs after conv2).
    # The 10-class head has 512 * 10 + 10 parameters instead of 513,000.
    assert trainable_count(store) == STANDARD_PARAMS[18] - 1792 - 513_000 + 5_130


def test_bad_depth_and_mode():
    with pytest.raises(ValueError, match="depth"):
        build(20)
    with pytest.raises(ValueError, match="mode"):
        build(18, mode="se")


def test_resnet18_train_step_reduces_loss():
    rng = np.random.RandomState(0)
    images = tf.constant(rng.rand(4, 32, 32, 3).astype("float32"))
    labels = tf.constant([0, 1, 2, 3])
    store = LayerStore()

    def tower_loss():
        with TowerContext("tower0", is_training=True, layer_store=store):
            logits = resnet(images, 18, num_classes=4)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

    first = float(tower_loss())
    store.allow_create = False
    opt = tf.keras.optimizers.SGD(0.05, momentum=0.9)
    params = [v for v in store.named_variables().values() if v.trainable]

    def step():  # eager: the test checks the gradients and the BN updates, not tracing
        with tf.GradientTape() as tape:
            loss = tower_loss()
        opt.apply_gradients(zip(tape.gradient(loss, params), params))
        return loss

    for _ in range(4):
        last = float(step())
    assert last < first
    assert len(store.named_variables()) == len(params) + 2 * 20  # + BN moving stats, no new vars


@pytest.mark.parametrize("mode", ["resnet", "preact"])
def test_blocks_are_lms_blocks_with_unchanged_gradients(mode):
    # each residual block is an LMS block: LMS recomputes them by name, the gradients stay the same
    from kerastrainer.lms import LMS
    image = tf.random.stateless_normal([2, 32, 32, 3], seed=[3, 4])
    label = tf.constant([1, 7])
    store, _ = build(18, mode, num_classes=10, image=image)
    store.allow_create = False

    def grads():
        with TowerContext("tower0", is_training=True, layer_store=store):
            with tf.GradientTape() as tape:
                logits = resnet(image, 18, num_classes=10, mode=mode)
                cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits))
            return tape.gradient(cost, store.trainable_variables_list)

    moving = {k: v.numpy() for k, v in store.named_variables().items() if not v.trainable}
    ref = tf.function(grads, autograph=False)()
    for k, v in moving.items():  # the same BatchNorm statistics for the second run
        store.named_variables()[k].assign(v)
    residual = [f"group{g}/block{b}" for g in range(4) for b in range(2)]
    # the stem is a block too, without a scope of its own: its layers keep their names
    assert {"conv0/W", "conv0/bn/gamma"} <= set(store.named_variables())
    for blocks, seen in ((["group*"], residual), (None, residual + ["stem"])):
        lms = LMS("recompute", blocks=blocks)
        lms.apply(store)
        try:
            got = tf.function(grads, autograph=False)()
        finally:
            lms.remove()
        assert sorted(lms.seen_blocks) == sorted(seen)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-4, atol=1e-5)
