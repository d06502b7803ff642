"""Large model support: gradients unchanged by every policy, the offload round trip
survives grappler, recompute lowers peak memory, training through the trainers."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import keras
import tensorflow as tf

from kerastrainer.lms import LMS, LMSBlockError, lms_block
from kerastrainer.models import BatchNorm, Conv2D, FullyConnected, GlobalAvgPooling
from kerastrainer.tfutils import LayerStore
from kerastrainer.tfutils.tower import TowerContext

POLICIES = ["recompute", "offload", "offload+recompute"]
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _res(x, ch):
    y = Conv2D("conv1", x, ch, 3, activation=tf.nn.relu)
    y = Conv2D("conv2", y, ch, 3)
    y = BatchNorm("bn", y)
    return tf.nn.relu(x + y)


def tower(image, label):
    x = Conv2D("conv0", image, 8, 3, activation=tf.nn.relu)
    for i in range(3):
        x = lms_block(f"res{i}", _res)(x, 8)
    logits = FullyConnected("fc", GlobalAvgPooling("gap", x), 5)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits))


def _data(batch=4):
    rng = np.random.RandomState(0)
    return (tf.constant(rng.randn(batch, 16, 16, 3).astype("float32")),
            tf.constant(rng.randint(0, 5, size=batch).astype("int32")))


def _grads(store, image, label, device="/cpu:0"):
    with tf.device(device), TowerContext("tower0", is_training=True, layer_store=store):
        with tf.GradientTape() as tape:
            cost = tower(image, label)
        names = sorted(v for v in store.named_variables() if store.named_variables()[v].trainable)
        variables = [store.named_variables()[n] for n in names]
        grads = tape.gradient(cost, variables)
    return cost, dict(zip(names, grads))


def _moving(store):
    return {k: v.numpy().copy() for k, v in store.named_variables().items() if "EMA" in k}


@pytest.fixture(scope="module")
def built_store():
    store = LayerStore()
    image, label = _data()
    _grads(store, image, label)  # creates the layers
    store.allow_create = False   # built, as after the trainer's build pass
    return store


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "tf.function"])
def test_gradients_equal_without_lms(built_store, policy, graph):
    image, label = _data()
    store = built_store
    run = tf.function(_grads, autograph=False) if graph else _grads
    before = _moving(store)
    cost0, ref = run(store, image, label)
    after_ref = _moving(store)
    for k, v in after_ref.items():  # restore the moving statistics
        store.named_variables()[k].assign(before[k])
    lms = LMS(policy, host_device="/cpu:1", swapout_threshold=0)
    lms.apply(store)
    try:
        run = tf.function(_grads, autograph=False) if graph else _grads
        cost1, got = run(store, image, label)
    finally:
        lms.remove()
    assert set(lms.seen_blocks) == {"res0", "res1", "res2"}
    np.testing.assert_allclose(cost1.numpy(), cost0.numpy(), rtol=1e-6)
    assert set(got) == set(ref) and len(ref) > 10
    for k in ref:
        assert got[k] is not None, k
        np.testing.assert_allclose(got[k].numpy(), ref[k].numpy(), rtol=1e-5, atol=1e-6, err_msg=k)
    # BatchNorm's moving statistics were updated once, exactly as without LMS
    for k, v in _moving(store).items():
        np.testing.assert_allclose(v, after_ref[k], rtol=1e-6, atol=1e-7, err_msg=k)
