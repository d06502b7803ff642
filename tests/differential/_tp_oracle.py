"""The oracle's program: tensorpack 0.11 on TF 2.21 in TF1 graph mode, run in a subprocess.

    TF_USE_LEGACY_KERAS=1 python _tp_oracle.py TASK IN.npz OUT.npz

It never imports kerastrainer. TASK is ``layers`` (every case of ``layer_cases.CASES`` named in
the input) or ``trainer`` (``trainer_cases``: a few steps of a small ModelDesc). The input .npz
holds the inputs the test wrote; the output .npz the oracle's values, keyed ``<case>/<what>``.
A case that fails in tensorpack writes ``<case>/error`` (its traceback) and the others go on.
"""
import json
import os
import sys
import traceback
import types

import numpy as np

assert os.environ.get("TF_USE_LEGACY_KERAS") == "1", "the oracle runs with TF_USE_LEGACY_KERAS=1"
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorflow.compat.v1 as tf  # noqa: E402

tf.disable_eager_execution()

import tensorpack.models as tpm  # noqa: E402
from tensorpack.tfutils.argscope import argscope  # noqa: E402
from tensorpack.tfutils.tower import TowerContext  # noqa: E402

import layer_cases  # noqa: E402

M = types.SimpleNamespace(**{k: getattr(tpm, k) for k in dir(tpm) if not k.startswith("_")},
                          argscope=argscope)


def perturbed(name: str, value: np.ndarray, rs: np.random.RandomState) -> np.ndarray:
    """Initial values moved away from 0 / 1, so that every variable matters in the comparison;
    a variance or a standard deviation stays positive."""
    value = np.asarray(value)
    new = value + 0.3 * np.asarray(rs.randn(*value.shape), dtype=value.dtype)
    if any(k in name for k in ("variance", "stddev")):
        new = np.abs(new) + 0.1
    return new.astype(value.dtype)


def session_config(xla: bool):
    """XLA (whole graph) where TF's CPU kernels refuse the op: NCHW convolution gradients, grouped and
    dilated convolutions have no CPU kernel outside XLA (tensorpack ran them on GPUs)."""
    config = tf.ConfigProto()
    if xla:
        config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
        # grappler's remapper would fuse a grouped Conv2D with its BiasAdd before XLA clusters it
        config.graph_options.rewrite_options.remapping = config.graph_options.rewrite_options.OFF
    return config


def run_layer_case(case, x_value, out: dict, xla: bool = False):
    key = case.name
    with tf.Graph().as_default():
        tf.set_random_seed(0)
        x = tf.constant(x_value)
        with TowerContext("", is_training=case.training):
            y = case.build(M, tf, x)
        loss = tf.reduce_sum(y * layer_cases.upstream(tf, y))
        tvars = tf.trainable_variables()
        gvars = tf.global_variables()
        grads = tf.gradients(loss, [x] + tvars)
        updates = tf.get_collection(tf.GraphKeys.UPDATE_OPS)
        with tf.Session(config=session_config(xla)) as sess:
            sess.run(tf.global_variables_initializer())
            rs = np.random.RandomState(1)
            for v in gvars:
                v.load(perturbed(v.op.name, sess.run(v), rs), sess)
            init = sess.run(gvars)
            y_v, g_v, _ = sess.run([y, [g for g in grads if g is not None], updates])
            after = sess.run(gvars)
    out[f"{key}/y"] = y_v
    it = iter(g_v)
    for t, g in zip([None] + tvars, grads):
        if g is not None:
            out[f"{key}/grad/" + ("x" if t is None else t.op.name)] = next(it)
    for v, a, b in zip(gvars, init, after):
        out[f"{key}/init/{v.op.name}"] = a
        out[f"{key}/after/{v.op.name}"] = b
        out[f"{key}/trainable/{v.op.name}"] = np.array(v in tvars)
    out[f"{key}/xla"] = np.array(xla)


NO_CPU_KERNEL = ("only supports NHWC", "not supported on CPU", "do not yet support dilation",
                 "does not support grouped convolutions",
                 "only supports NHWC on device type CPU")


def task_layers(inp: dict, out: dict):
    for name in json.loads(str(inp["cases"])):
        case = layer_cases.CASES_BY_NAME[name]
        try:
            try:
                run_layer_case(case, inp[f"{name}/x"], out)
            except (tf.errors.InvalidArgumentError, tf.errors.UnimplementedError) as e:
                if not any(m in str(e) for m in NO_CPU_KERNEL):
                    raise
                run_layer_case(case, inp[f"{name}/x"], out, xla=True)
        except Exception:
            out[f"{name}/error"] = np.array(traceback.format_exc())


def task_trainer(inp: dict, out: dict):
    import trainer_cases
    trainer_cases.run_tensorpack(inp, out)


def main():
    task, in_path, out_path = sys.argv[1:4]
    inp = dict(np.load(in_path, allow_pickle=False))
    out = {}
    {"layers": task_layers, "trainer": task_trainer}[task](inp, out)
    np.savez(out_path, **out)


if __name__ == "__main__":
    main()
