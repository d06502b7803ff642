"""TFLMS's graph form: ``LMS(...).run(graph)`` edits a tf.compat.v1 graph as TFLMS did (swap-outs on
the host device, swap-ins ahead of their readers, TFLMS's knobs in topological levels), the edited
graph trains as the original, and TFLMS's tutorial runs strictly ported."""
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from kerastrainer.lms import LMS
from kerastrainer.lms.graph_edit import backward_ops
from kerastrainer.lms.offload import compute_device, same_device
from kerastrainer.lms.topo import Levels

v1 = tf.compat.v1
HERE = os.path.dirname(os.path.abspath(__file__))
SEEDS = os.path.join(HERE, "seed_programs")


def _port():
    spec = importlib.util.spec_from_file_location("tflms_strict_port", os.path.join(SEEDS, "tflms_mnist_session_strict.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


PORT = _port()


def _tutorial_graph(lms=None, seed=0):
    """The tutorial's cell In [6] (placeholders, deepnn, loss, Adam's minimize), then ``lms.run``."""
    g = tf.Graph()
    with g.as_default():
        v1.set_random_seed(seed)
        x = v1.placeholder(tf.float32, [None, 784])
        y_ = v1.placeholder(tf.int64, [None])
        y_conv, keep_prob = PORT.deepnn(x)
        with tf.name_scope("loss"):
            loss = tf.reduce_mean(v1.losses.sparse_softmax_cross_entropy(labels=y_, logits=y_conv))
        with tf.name_scope("adam_optimizer"):
            train_step = v1.train.AdamOptimizer(1e-3).minimize(loss)
        with tf.name_scope("accuracy"):
            tf.cast(tf.equal(tf.argmax(y_conv, 1), y_), tf.float32)
        report = None
        if lms is not None:
            lms.excl_output_by_scopes = {"loss", "accuracy", "dropout"}
            report = lms.run(v1.get_default_graph())
    return g, dict(x=x, y=y_, keep=keep_prob, loss=loss, train=train_step), report


def _train(g, h, steps=3):
    data = PORT.SyntheticMnist().train
    with g.as_default(), v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        losses = []
        for _ in range(steps):
            bx, by = data.next_batch(16)
            feed = {h["x"]: bx, h["y"]: by, h["keep"]: 1.0}
            losses.append(sess.run([h["loss"], h["train"]], feed)[0])
        weights = sess.run(v1.trainable_variables())
    return np.array(losses), weights


def test_tflms_values_select_what_tflms_logged_on_the_tutorial_model(kt_log):
    lms = LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2)
    g, h, rep = _tutorial_graph(lms)
    # the tutorial's own log: "Added 13 operations to the model (6 swap-out operations ... and
    # 7 swap-in operations)"
    assert (len(rep.swap_out_ops), len(rep.swap_in_ops)) == (6, 7), rep.tensors
    assert "added 13 operations" in kt_log.text() and "6 tensor(s) swapped" in kt_log.text()
    assert not any(t.startswith(("loss/", "dropout/", "adam_optimizer/")) for t in rep.tensors), rep.tensors
    levels, bwd = Levels(g), backward_ops(g)
    for s in rep.swapped:
        assert same_device(s.swap_out.device, "/cpu:0"), s.swap_out.device       # out to the host
        assert s.swap_out.op.inputs[0] is s.tensor
        for back, readers, trigger in s.swap_ins:
            assert same_device(back.device, compute_device())                   # back to the device
            assert back.op.inputs[0] is s.swap_out
            for r in readers:   # the far backward readers read the swap-in, not the tensor
                assert r in bwd and back in list(r.inputs) and s.tensor not in list(r.inputs), r.name
                assert levels[r] - levels[s.tensor.op] > 50
            # groupby 2: readers of one swap-in at most 2 levels apart
            lv = sorted(levels[r] for r in readers)
            assert all(b - a <= 2 for a, b in zip(lv, lv[1:])), lv
            # the swap-in waits for an ancestor of its first reader, 3 levels before it (or up to 10 below)
            first = min(readers, key=lambda r: levels[r])
            assert list(back.op.control_inputs) == [trigger] and trigger is not None
            assert levels[first] - 3 - 10 <= levels[trigger] <= levels[first] - 3, (levels[first], levels[trigger])
            assert levels[trigger] > levels[s.tensor.op]
            assert _is_ancestor(trigger, first)
        # near readers (the forward pass, or backward within 50 levels) keep the tensor itself
        far = {r for _, rs, _ in s.swap_ins for r in rs}
        assert all(levels[c] - levels[s.tensor.op] <= 50 or c.name.startswith("lms/")
                   for c in s.tensor.consumers() if c not in far)


def _is_ancestor(a, b) -> bool:
    seen, stack = set(), [b]
    while stack:
        op = stack.pop()
        for p in [t.op for t in op.inputs] + list(op.control_inputs):
            if p is a:
                return True
            if p not in seen:
                seen.add(p)
                stack.append(p)
    return False


@pytest.mark.parametrize("knobs", [dict(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2),
                                   dict(swapout_threshold=5, swapin_ahead=1, swapin_groupby=0),
                                   dict(swapout_threshold=5, swapin_ahead=3, swapin_groupby=2, sync_mode=2)],
                         ids=["tutorial", "many", "sync_mode2"])
def test_edited_graph_trains_as_the_original(knobs):
    ref_losses, ref_w = _train(*_tutorial_graph()[:2])
    g, h, rep = _tutorial_graph(LMS(**knobs))
    assert rep.swapped
    if knobs["swapout_threshold"] == 5:
        assert len(rep.swapped) > 6   # a lower threshold swaps more
    if knobs.get("sync_mode") == 2:   # the swap-in waits for the other inputs of its reader
        for s in rep.swapped:
            for back, readers, trigger in s.swap_ins:
                first = min(readers, key=lambda r: Levels(g)[r])
                assert trigger is None or trigger in [t.op for t in first.inputs]
    losses, w = _train(g, h)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-6)
    for a, b in zip(ref_w, w):
        np.testing.assert_allclose(b, a, rtol=1e-6, atol=1e-7)
    # the swap ops run: they are kept by grappler and in the executed graph
    run_meta = v1.RunMetadata()
    data = PORT.SyntheticMnist().train
    with g.as_default(), v1.Session(graph=g) as sess:
        sess.run(v1.global_variables_initializer())
        bx, by = data.next_batch(8)
        sess.run(h["train"], {h["x"]: bx, h["y"]: by, h["keep"]: 1.0},
                 options=v1.RunOptions(output_partition_graphs=True), run_metadata=run_meta)
    executed = {n.name for pg in run_meta.partition_graphs for n in pg.node}
    assert {op.name for op in rep.swap_out_ops + rep.swap_in_ops} <= executed


def test_threshold_too_big_warns_with_the_largest_distance(kt_log):
    g, _, rep = _tutorial_graph(LMS(swapout_threshold=1000, swapin_ahead=3, swapin_groupby=2))
    assert rep.swapped == [] and 50 < rep.max_distance < 1000
    w = kt_log.warnings()
    assert "selects nothing" in w and f"largest such distance in this graph is {rep.max_distance}" in w, w
    assert not [op for op in g.get_operations() if op.name.startswith("lms/")]


def test_bad_input_is_a_clear_error():
    lms = LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2)
    with pytest.raises(TypeError, match="needs a tf.Graph.*got int"):
        lms.run(3)
    with pytest.raises(RuntimeError, match="keras=True"):
        lms.run(tf.Graph(), keras=True)
    g = tf.Graph()
    with g.as_default():   # a forward pass only: no training op
        x = v1.placeholder(tf.float32, [None, 784])
        PORT.deepnn(x)
    with pytest.raises(ValueError, match="no backward pass.*minimize"):
        lms.run(g)
    # eager: the default graph is empty; the message says where to build the model
    with pytest.raises(ValueError, match=r"tf.Graph\(\).as_default\(\)"):
        lms.run(v1.get_default_graph())
    with pytest.raises(RuntimeError, match=r"tf.Graph\(\).as_default\(\)"):
        lms.run()
    bad = LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2)
    bad.excl_output_by_scopes = {"convolution1"}   # a scope the graph does not have
    g, _, _ = _tutorial_graph()
    with pytest.raises(ValueError, match="'convolution1'.*no op"):
        bad.run(g)
    with pytest.raises(ValueError, match="policy 'recompute' has no graph form"):
        LMS("recompute").run(g)


def test_graph_given_to_the_constructor_run_once_and_optimizer_scopes(kt_log):
    g, h, _ = _tutorial_graph()
    lms = LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2, graph=g, optimizer_scopes={"adam_optimizer"})
    rep = lms.run()   # TFLMS 2018: LMS(graph=g).run()
    assert len(rep.swapped) >= 6
    again = lms.run(g)
    assert again.swapped == [] and "not edited again" in kt_log.text()


def test_auto_knobs_leave_a_graph_that_fits_as_is(kt_log):
    g, _, _ = _tutorial_graph()
    n = len(g.get_operations())
    with pytest.raises(ValueError, match="batch_size"):
        LMS().run(g)   # placeholders of unknown batch: TFLMS's auto-tuning needed the batch size
    lms = LMS(batch_size=50)
    assert lms.run(g).swapped == [] and len(g.get_operations()) == n
    assert "LMS is not necessary" in kt_log.text()
    with pytest.raises(ValueError, match="auto-tuning.*not ported.*swapout_threshold"):
        LMS(batch_size=50, memory_budget=1 << 20).run(g)


def test_strict_tutorial_port_runs():
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2",
               PYTHONPATH=os.path.dirname(HERE) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, os.path.join(SEEDS, "tflms_mnist_session_strict.py"), "--steps", "201"],
                         capture_output=True, text=True, timeout=300, env=env, cwd=SEEDS)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-3000:]
    assert "added 13 operations to the graph (6 swap-out operations" in text, text[-3000:]
    assert "step 200, training accuracy" in text and "test accuracy" in text, text[-3000:]
