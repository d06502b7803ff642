"""Every layer of tensorpack.models against tensorpack 0.11 itself: forward values, gradients with
respect to the input and every weight, and the moving statistics after one training call, to 1e-5.

One oracle process runs every case of ``layer_cases.CASES`` (tensorpack, graph mode, its own
initial weights moved off their defaults); each test copies the oracle's variables by name into
kerastrainer's layer store, runs the same case in a ``tf.function`` (as the trainers do) under a
tower of the same ``is_training``, and compares.
"""
import json
import types

import numpy as np
import pytest
import tensorflow as tf

import kerastrainer.models as ktm
from kerastrainer.tfutils.layer_store import LayerStore
from kerastrainer.tfutils.tower import TowerContext

from layer_cases import CASES, case_input, upstream
from oracle import require_oracle, run_oracle

TOL = dict(rtol=1e-5, atol=1e-5)
M = types.SimpleNamespace(**{k: getattr(ktm, k) for k in ktm.__all__})


# the fast part (every layer in the forms ShuffleNet, ResNet and the GAN examples use); the rest is slow
FAST = {"conv_nhwc", "conv_nchw_stride2_bias_relu", "conv_nchw_width_eq_channels", "conv_split4_nchw_1x1_nobias",
        "conv_split2_nchw_3x3_stride2", "conv_dilation2_nhwc", "conv_bnrelu_activation_nchw", "deconv_nhwc_stride2",
        "deconv_nchw_stride2", "fc_4d_input", "bn_train_nhwc", "bn_train_nchw", "bn_train_2d", "bn_infer_nchw",
        "bn_batch_stats_in_inference", "bn_train_ema_skip", "brenorm_train_nhwc", "ln_nchw_noscale",
        "in_nchw_center_only", "maxpool_3_2_same_nchw", "avgpool_3_2_same_nchw", "gap_nchw", "unpool_mat_nchw",
        "dropout_inference", "prelu", "argscope_defaults_nchw", "linearwrap_chain"}
_ORACLE = {}


def oracle_for(case, tmp_path_factory):
    """The oracle's outputs for the group (fast or slow) of ``case``: one oracle process per group."""
    require_oracle()
    group = case.name in FAST
    if group not in _ORACLE:
        cases = [c for c in CASES if (c.name in FAST) == group]
        inputs = {"cases": np.array(json.dumps([c.name for c in cases]))}
        for c in cases:
            inputs[f"{c.name}/x"] = case_input(c)
        _ORACLE[group] = run_oracle("layers", inputs, tmp_path_factory.mktemp("oracle_layers"))
    return _ORACLE[group]


def oracle_case(out: dict, name: str):
    """The oracle's values of one case: {'y', 'grad', 'init', 'after', 'trainable'}."""
    if f"{name}/error" in out:
        pytest.fail(f"tensorpack 0.11 failed on case {name}:\n{out[f'{name}/error']}")
    res = {"y": out[f"{name}/y"], "grad": {}, "init": {}, "after": {}, "trainable": {}, "xla": {}}
    for k, v in out.items():
        parts = k.split("/", 2)
        if parts[0] == name and len(parts) == 3:
            res[parts[1]][parts[2]] = v
    return res


def run_kerastrainer(case, x_value, init):
    """The case in kerastrainer: built once eagerly (variables made), the oracle's initial values
    assigned by name, then one traced call computing y and the gradients of sum(y * upstream)."""
    store = LayerStore()
    x0 = tf.constant(x_value)
    with TowerContext("", is_training=case.training, layer_store=store):
        case.build(M, tf, x0)
    named = store.named_variables()
    assert set(named) == set(init), (
        f"variable names differ from tensorpack's: kerastrainer {sorted(named)}, tensorpack {sorted(init)}")
    for k, v in named.items():
        assert tuple(v.shape) == init[k].shape, f"{k}: shape {tuple(v.shape)} != tensorpack's {init[k].shape}"
        v.assign(init[k])
    names = sorted(named)
    trainable = [n for n in names if named[n].trainable]

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            with TowerContext("", is_training=case.training, layer_store=store):
                y = case.build(M, tf, x)
            loss = tf.reduce_sum(y * upstream(tf, y))
        grads = tape.gradient(loss, [x] + [named[n] for n in trainable])
        return y, grads

    y, grads = step(x0)
    g = {("x" if i == 0 else trainable[i - 1]): gv.numpy() for i, gv in enumerate(grads) if gv is not None}
    after = {n: named[n].numpy() for n in names}
    return y.numpy(), g, after, {n: named[n].trainable for n in names}


@pytest.mark.parametrize("case", [pytest.param(c, marks=() if c.name in FAST else pytest.mark.slow) for c in CASES],
                         ids=[c.name for c in CASES])
def test_layer_matches_tensorpack(case, tmp_path_factory):
    ref = oracle_case(oracle_for(case, tmp_path_factory), case.name)
    y, grads, after, trainable = run_kerastrainer(case, case_input(case), ref["init"])
    assert y.shape == ref["y"].shape, f"output shape {y.shape} != tensorpack's {ref['y'].shape}"
    np.testing.assert_allclose(y, ref["y"], **TOL, err_msg=f"{case.name}: forward values")
    assert {k: bool(v) for k, v in ref["trainable"].items()} == trainable, "trainable flags differ"
    assert set(grads) == set(ref["grad"]), (
        f"gradients exist for {sorted(grads)} here, for {sorted(ref['grad'])} in tensorpack")
    for k in sorted(ref["grad"]):
        np.testing.assert_allclose(grads[k], ref["grad"][k], **TOL, err_msg=f"{case.name}: gradient of {k}")
    for k in sorted(ref["after"]):
        np.testing.assert_allclose(after[k], ref["after"][k], **TOL,
                                   err_msg=f"{case.name}: {k} after one call (moving statistics)")
