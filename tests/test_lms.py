"""Large model support: gradients unchanged by every policy, the offload round trip
survives grappler, recompute lowers peak memory, training through the trainers."""
import json
import os
import re
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


def _executed_swaps(fn, *args):
    """{(kind, device): count} of LMS swap ops in the partitioned graphs that ran."""
    from tensorflow.python.eager import context
    context.enable_run_metadata()
    try:
        fn(*args)
        md = context.export_run_metadata()
    finally:
        context.disable_run_metadata()
    found = {}
    for fg in md.function_graphs:
        for pg in fg.partition_graphs:
            for n in pg.node:
                last = n.name.split("/")[-1]
                if n.op == "Identity" and last.startswith(("lms_swapout", "lms_swapin")):
                    key = ("out" if "swapout" in last else "in", n.device.split("/")[-1])
                    found[key] = found.get(key, 0) + 1
    return found


@pytest.mark.parametrize("policy", ["offload", "offload+recompute"])
def test_offload_round_trip_in_executed_graph(built_store, policy):
    image, label = _data()
    lms = LMS(policy, host_device="/cpu:1", swapout_threshold=0)
    lms.apply(built_store)
    try:
        found = _executed_swaps(tf.function(_grads, autograph=False), built_store, image, label)
    finally:
        lms.remove()
    # the inputs of the 3 blocks at least: out to the host (CPU:1), back to the device (CPU:0)
    assert found.get(("out", "device:CPU:1"), 0) >= 3, found
    assert found.get(("in", "device:CPU:0"), 0) >= 3, found
    assert found[("out", "device:CPU:1")] == found[("in", "device:CPU:0")], found
    assert set(found) == {("out", "device:CPU:1"), ("in", "device:CPU:0")}, found


def test_swapout_threshold_keeps_last_blocks(built_store):
    image, label = _data()
    lms = LMS("offload+recompute", host_device="/cpu:1", swapout_threshold=2)
    lms.apply(built_store)
    try:
        found = _executed_swaps(tf.function(_grads, autograph=False), built_store, image, label)
    finally:
        lms.remove()
    assert found == {("out", "device:CPU:1"): 1, ("in", "device:CPU:0"): 1}  # res0 only


_PEAK_SCRIPT = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import tensorflow as tf
    from kerastrainer.lms import LMS
    from kerastrainer.tfutils import LayerStore, get_variable

    def block(x):
        # elementwise layers: every activation is kept for the backward pass, no conv workspace
        for j in range(4):
            w = get_variable("w%d" % j, [x.shape[-1]], initializer=tf.ones_initializer())
            x = tf.tanh(x * w + 0.1)
        return x

    sys.path.insert(0, os.path.join(os.getcwd(), "tests"))
    from test_lms import _chain_grads

    def step(store, x):
        return _chain_grads(store, block, x, blocks=8)

    store = LayerStore()
    x = tf.random.normal([256, 4096])
    step(store, x[:1]); store.allow_create = False
    if sys.argv[1] != "none":
        LMS(sys.argv[1], host_device="/cpu:0").apply(store)
    f = tf.function(step, autograph=False)
    f(store, x)
    tf.config.experimental.reset_memory_stats("CPU:0")
    f(store, x)
    print("PEAK", json.dumps(tf.config.experimental.get_memory_info("CPU:0")["peak"]))
""")


def _peak(mode):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _PEAK_SCRIPT, mode], capture_output=True, text=True,
                         timeout=240, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("PEAK")][-1]
    return json.loads(line.split(None, 1)[1])


def test_recompute_lowers_peak_memory():
    # 8 blocks of 4 layers: ~64 activations of 4 MiB kept without LMS; 8 inputs + 1 block with it
    base, rec = _peak("none"), _peak("recompute")
    assert base > 64 << 20, base
    assert rec < 0.6 * base, (rec, base)


def _thin(x):   # one elementwise layer: makes 2 elements per output element besides its output
    from kerastrainer.tfutils import get_variable
    w = get_variable("w", [x.shape[-1]], initializer=tf.ones_initializer())
    return tf.tanh(x * w + 0.1)


def _wide(x):   # a bottleneck the other way round: widens 8x inside (~17 elements per output one)
    from kerastrainer.tfutils import get_variable
    w1 = get_variable("w1", [x.shape[-1], 8 * x.shape[-1]])
    w2 = get_variable("w2", [8 * x.shape[-1], x.shape[-1]], initializer=tf.keras.initializers.Constant(0.01))
    return x + tf.tanh(x @ w1) @ w2


def _chain_grads(store, body, x, blocks=9):
    """The gradients of mean(square(body applied ``blocks`` times, each an LMS block))."""
    with TowerContext("tower0", is_training=True, layer_store=store):
        with tf.GradientTape() as tape:
            for i in range(blocks):
                x = lms_block("b%d" % i, body)(x)
            cost = tf.reduce_mean(tf.square(x))
        return tape.gradient(cost, store.trainable_variables_list)


@pytest.mark.parametrize("body", [_thin, _wide], ids=["thin", "wide"])
def test_chained_blocks_wait_for_their_own_gradient_when_wide(body):
    # 9 chained blocks: segments of 3. A wide block recomputes only once its own gradient exists
    # (else a whole segment's internals are alive at once: ResNet-50 kept 58 MB per image instead
    # of 36-45); a thin one is left ungated, so grappler merges its recompute with the segment's
    # remade forward. The gradients are those without LMS either way.
    x = tf.random.stateless_normal([4, 16], seed=[1, 2])
    store = LayerStore()
    ref = _chain_grads(store, body, x)
    store.allow_create = False
    f = tf.function(_chain_grads, autograph=False)
    lms = LMS("recompute")
    lms.apply(store)
    try:
        got = f(store, body, x)
        graph = f.get_concrete_function(store, body, x).graph
    finally:
        lms.remove()
    for a, b in zip(got, ref):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    gates = [op for op in graph.get_operations() if op.name.split("/")[-1].startswith("lms_recompute_gate")]
    assert all(op.control_inputs for op in gates)
    # thin and wide: each segment's first block gates its own recompute and the segment's remade
    # forward (2 x 3); wide also gates the 6 chained blocks' own recomputes and, in each remade
    # forward, the step through its middle (chained) block (3)
    assert len(gates) == (6 + 6 + 3 if body is _wide else 6), [op.name for op in gates]


def test_keyword_tensor_is_a_clear_error(built_store):
    lms = LMS("recompute")
    lms.apply(built_store)
    try:
        blk = lms_block("kw", lambda x, y=None: x + y)
        x = tf.ones([2, 3])
        with TowerContext("tower0", is_training=True, layer_store=built_store):
            with pytest.raises(LMSBlockError, match="keyword"):
                blk(x, y=x)
            with pytest.raises(LMSBlockError, match="no tensor argument"):
                lms_block("none", lambda n: tf.ones([n]))(3)
            with pytest.raises(LMSBlockError, match="must return a tensor"):
                lms_block("bad", lambda x: "not a tensor")(x)
    finally:
        lms.remove()


def test_random_ops_refused_in_recompute(built_store):
    lms = LMS("recompute")
    lms.apply(built_store)
    try:
        blk = lms_block("drop", lambda x: tf.nn.dropout(x * 2.0, rate=0.5))
        x = tf.ones([4, 8])

        @tf.function(autograph=False)
        def f(x):
            with TowerContext("tower0", is_training=True, layer_store=built_store):
                with tf.GradientTape() as tape:
                    tape.watch(x)
                    y = tf.reduce_sum(blk(x))
                return tape.gradient(y, x)
        with pytest.raises(ValueError, match="random"):
            f(x)
    finally:
        lms.remove()


def test_bad_arguments():
    with pytest.raises(ValueError, match="policy"):
        LMS("swap")
    with pytest.raises(ValueError, match="swapin_ahead"):
        LMS("offload", swapin_ahead=-2)
    with pytest.raises(ValueError, match="memory size"):
        LMS("auto", memory_budget="lots")
    with pytest.raises(TypeError, match="ModelDesc"):
        LMS("recompute").apply(object())


class BlockNet:
    """A ModelDesc with three LMS blocks (conv, BatchNorm) and a dense head."""

    @staticmethod
    def make():
        from kerastrainer.train import ModelDesc

        class Net(ModelDesc):
            def inputs(self):
                return [tf.TensorSpec((None, 8, 8, 3), tf.float32, "image"),
                        tf.TensorSpec((None,), tf.int32, "label")]

            def build_graph(self, image, label):
                return tower(image, label)

            def optimizer(self):
                return keras.optimizers.SGD(0.1)
        return Net()


class _ImageData:
    def __init__(self, n=8, batch=8):
        rng = np.random.RandomState(1)
        self.x = rng.randn(n * batch, 8, 8, 3).astype("float32")
        self.y = (self.x.mean(axis=(1, 2, 3)) > 0).astype("int32") * 3
        self.n, self.batch = n, batch

    def reset_state(self):
        pass

    def __len__(self):
        return self.n

    def __iter__(self):
        for i in range(self.n):
            s = slice(i * self.batch, (i + 1) * self.batch)
            yield [self.x[s], self.y[s]]


def _train(towers, lms):
    from kerastrainer.train import (SimpleTrainer, SyncMultiGPUTrainerReplicated, TrainConfig,
                                    launch_train_with_config)
    costs = []
    from kerastrainer.callbacks.base import CallbackFactory
    keras.utils.set_random_seed(0)  # the same initial weights in both runs
    rec = CallbackFactory(trigger_step=lambda cb: costs.append(cb.trainer.last_step_outputs["cost"]))
    cfg = TrainConfig(model=BlockNet.make(), dataflow=_ImageData(batch=8 // towers),
                      callbacks=[rec] + ([lms] if lms else []), extra_callbacks=[], monitors=[],
                      max_epoch=3, steps_per_epoch=8)
    trainer = SimpleTrainer(steps_per_call=1) if towers == 1 else \
        SyncMultiGPUTrainerReplicated([f"/cpu:{i}" for i in range(towers)], steps_per_call=1)  # logical CPUs
    launch_train_with_config(cfg, trainer)
    return costs, {k: v.numpy() for k, v in trainer.named_variables().items()}


@pytest.mark.slow   # 1 tower ~150 s on 2 cores (LMS on a ModelDesc trains fast in test_auto_on_model_desc_logs_and_trains)
@pytest.mark.parametrize("towers", [1, 2])
def test_training_with_lms_callback(towers):
    costs0, w0 = _train(towers, None)
    lms = LMS("offload+recompute" if towers == 1 else "recompute", host_device="/cpu:3",
              swapout_threshold=0)
    costs1, w1 = _train(towers, lms)
    assert set(lms.seen_blocks) == {"res0", "res1", "res2"}
    assert np.mean(costs1[-4:]) < 0.8 * np.mean(costs1[:4])
    np.testing.assert_allclose(costs1, costs0, rtol=1e-4, atol=1e-5)
    for k in w0:  # weights and BatchNorm moving statistics
        np.testing.assert_allclose(w1[k], w0[k], rtol=1e-4, atol=1e-5, err_msg=k)


def test_auto_plans_from_budget():
    from kerastrainer.lms.planner import BlockProfile, plan
    blocks = [BlockProfile(f"b{i}", i, 100, 10) for i in range(4)]
    assert plan(blocks, 0, 0, 1000, False).modes == {}
    p = plan(blocks, 0, 0, 300, False)
    assert p.fits and set(p.modes.values()) == {"recompute"} and p.estimate_after <= 300
    p = plan(blocks, 0, 0, 120, True)   # needs the inputs on the host too
    assert "offload+recompute" in p.modes.values() and "b3" not in \
        [k for k, m in p.modes.items() if m == "offload+recompute"]


def test_auto_on_model_desc_logs_and_trains():
    lms = LMS("auto", memory_budget=20 << 10, batch_size=8, host_device="/cpu:3")
    costs, _ = _train(1, lms)
    assert lms.plan is not None and lms.plan.modes, lms.plan
    assert set(lms.seen_blocks) <= {"res0", "res1", "res2"} and lms.seen_blocks
    assert np.isfinite(costs).all()


def test_keras_model_blocks():
    keras.utils.set_random_seed(0)
    def blk(name):
        return keras.Sequential([keras.layers.Dense(16, activation="tanh"),
                                 keras.layers.BatchNormalization(), keras.layers.Dense(16)], name=name)
    inp = keras.Input((16,))
    out = keras.layers.Dense(1)(blk("b1")(blk("b0")(inp)))
    model = keras.Model(inp, out)
    x = tf.random.normal([8, 16])

    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(model(x, training=True) ** 2)
        return [g.numpy() for g in tape.gradient(loss, model.trainable_weights)]
    ref = grads()
    lms = LMS("recompute", blocks=["b*"])
    lms.apply(model)
    try:
        got = grads()
        assert set(lms.seen_blocks) == {"b0", "b1"}
    finally:
        lms.remove()
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


# --- TFLMS parity --------------------------------------------------------------------------------
import importlib.util

from kerastrainer.lms import LMSKerasCallback

SEEDS = os.path.join(HERE, "seed_programs")


def _load_seed(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(SEEDS, name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _flat_model(n=6, width=32, seed=0):
    keras.utils.set_random_seed(seed)
    layers = [keras.Input((width,))] + [keras.layers.Dense(width, activation="tanh") for _ in range(n)]
    model = keras.Sequential(layers + [keras.layers.Dense(3)])
    model.compile(keras.optimizers.SGD(0.1), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model


def _flat_data(n=64, width=32):
    rng = np.random.RandomState(0)
    x = rng.randn(n, width).astype("float32")
    return x, (x[:, 0] > 0).astype("int32") + (x[:, 1] > 0).astype("int32")


def test_tflms_knobs_map_to_policy_and_blocks(kt_log):
    lms = LMS(swapout_threshold=2, swapin_ahead=1, swapin_groupby=0, cpu_device="/cpu:1",
              excl_scopes={"head"}, incl_types={"Conv2D"}, sync_mode=2, lb=3)
    assert lms.policy == "offload"                  # TFLMS's manual mode: all three knobs given
    assert lms.host_device == "/cpu:1"              # cpu_device is host_device
    # TFLMS's knobs given TFLMS's way: distances in levels of the step's ops, groupby 0 is no grouping
    assert lms.config.op_levels and lms.config.swapin_groupby == 0 and lms.config.swapout_threshold == 2
    assert lms.config.swapin_ahead == 1 and lms.config.sync_swapin
    with_policy = LMS("offload", swapout_threshold=2, swapin_ahead=1, swapin_groupby=0)
    assert not with_policy.config.op_levels and with_policy.config.swapin_groupby == 1  # blocks
    assert not lms.selects("head") and lms.selects("res0")
    lms.excl_output_by_scopes = {"res1"}             # TFLMS's properties, set after construction
    lms.incl_input_by_scopes = {"res*"}
    assert lms.excl_output_by_scopes == {"res1"}
    assert not lms.selects("res1") and lms.selects("res0") and not lms.selects("other")
    assert LMS().policy == "auto" and LMS(swapout_threshold=3).policy == "auto"  # -1: auto-tune
    assert LMS(lb=2).config.swapin_ahead == 2
    assert LMS({"adam_optimizer"}).policy == "offload"  # TFLMS 2018: LMS(optimizer_scopes)
    assert LMSKerasCallback is LMS


def test_tflms_knobs_without_tf2_meaning_are_warned_by_name(kt_log):
    LMS(serialization=["1:3"], serialization_by_size=1.5, gpu_device="/gpu:1", ub=50, fuse_swapins=True,
        ctrld_strategy="direct_order", swap_branches=True, branch_threshold=4, sync_mode=1,
        graph=object(), optimizer_scopes_override={"sgd"})
    text = kt_log.warnings()
    for name in ("serialization=", "serialization_by_size=", "gpu_device=", "ub=", "fuse_swapins=",
                 "ctrld_strategy=", "swap_branches=", "branch_threshold=", "sync_mode=1"):
        assert name in text, name
    LMS(serialization=[], fuse_swapins=False)  # TFLMS's defaults: nothing to say
    assert kt_log.warnings().count("serialization") == 2
    with pytest.raises(TypeError, match="swapout_treshold"):
        LMS(swapout_treshold=3)
    with pytest.raises(ValueError, match="sync_mode"):
        LMS(sync_mode=4)
    with pytest.raises(ValueError, match="keywords"):
        LMS(50)


def test_run_without_a_graph_in_eager_mode_and_begin_raise_with_the_tf2_call():
    lms = LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2)
    with pytest.raises(RuntimeError) as e:
        lms.run()
    for call in ("tf.Graph().as_default()", "callbacks=[lms]", "TrainConfig(", "lms.apply(", "lms_block("):
        assert call in str(e.value), call
    with pytest.raises(RuntimeError, match="callbacks=\\[lms\\]"):
        lms.begin()


def test_lms_is_a_keras_fit_callback_with_identical_training(kt_log):
    x, y = _flat_data()
    model = _flat_model()
    ref = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0).history["loss"]
    w_ref = [w.numpy() for w in model.weights]
    model = _flat_model()
    lms = LMSKerasCallback(swapout_threshold=1, swapin_ahead=1, swapin_groupby=1)
    got = model.fit(x, y, batch_size=16, epochs=2, shuffle=False, verbose=0, callbacks=[lms]).history["loss"]
    # TFLMS's knobs: distances in levels of the step's ops; every block's tensors are read more
    # than 1 level after they are made
    assert lms.last_report["blocks"] == 6 and len(lms.last_report["applied"]) == 6, lms.last_report
    assert "one block per layer" in kt_log.text()   # flat Sequential: per-layer blocks
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    for a, b in zip(w_ref, model.weights):
        np.testing.assert_allclose(b.numpy(), a, rtol=1e-6, atol=1e-7)
    # after fit the layers are plain again and fit traces anew
    assert all(getattr(l, "_lms_original_call", None) is None for l in model.layers)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0)
    # with validation (evaluate inside fit) and evaluate alone
    model.fit(x, y, batch_size=16, epochs=2, verbose=0, validation_data=(x, y), callbacks=[lms])
    model.evaluate(x, y, verbose=0, callbacks=[lms])
    assert all(getattr(l, "_lms_original_call", None) is None for l in model.layers)


def test_keras_offload_to_another_device_and_type_filters():
    # tensors of 32 x 64 floats: above the 4 KiB below which nothing is swapped
    x, y = _flat_data(width=64)
    ref = _flat_model(width=64).fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0).history["loss"]
    model = _flat_model(width=64)
    lms = LMS(swapout_threshold=1, swapin_ahead=1, swapin_groupby=1, cpu_device="/cpu:1")
    got = model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=[lms]).history["loss"]
    assert set(lms.last_report["modes"].values()) == {"offload"}, lms.last_report
    swapped = lms.last_report["swapped_tensors"]
    assert swapped >= 5, lms.last_report
    np.testing.assert_allclose(got, ref, rtol=1e-6)
    model = _flat_model(width=64)
    lms = LMS(swapout_threshold=1, swapin_ahead=1, swapin_groupby=1, cpu_device="/cpu:1", excl_types={"Tanh"})
    model.fit(x, y, batch_size=32, epochs=1, shuffle=False, verbose=0, callbacks=[lms])
    assert 0 < lms.last_report["swapped_tensors"] < swapped, (lms.last_report, swapped)


def test_tflms_verbatim_values_count_levels_of_the_step_s_ops(kt_log):
    x, y = _flat_data()
    model = _flat_model()
    lms = LMS(swapout_threshold=50, swapin_ahead=3, swapin_groupby=2)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[lms])
    # 6 small layers: the longest producer -> backward reader distance is under 50 levels
    assert lms.last_report["applied"] == []
    w = kt_log.warnings()
    assert "selects nothing" in w and "topological levels" in w and "the largest distance is" in w, w
    far = int(re.search(r"the largest distance is (\d+)", w).group(1))
    assert 10 < far < 50, w
    model = _flat_model()
    lms = LMS(swapout_threshold=far - 8, swapin_ahead=3, swapin_groupby=2)
    model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[lms])
    # a threshold below the largest distance: the first blocks (read last by the backward pass)
    applied = lms.last_report["applied"]
    assert 0 < len(applied) < 6 and applied == list(lms.found_blocks)[:len(applied)], lms.last_report
    model = _flat_model()
    lms = LMS("recompute", blocks=["nothing*"], excl_blocks=["x"])
    with pytest.raises(ValueError, match="matches"):
        model.fit(x, y, batch_size=16, epochs=1, verbose=0, callbacks=[lms])


def test_auto_estimates_at_the_real_batch_size(kt_log):
    x, y = _flat_data(n=512, width=64)
    model = _flat_model(width=64)
    lms = LMS(memory_budget=200 << 10)  # 'auto': 200 KiB, far below the activations of batch 256
    model.fit(x, y, batch_size=256, epochs=1, verbose=0, callbacks=[lms])
    assert "profiled at batch size 256" in kt_log.text(), kt_log.text()
    assert lms.plan is not None and lms.plan.modes, lms.plan.summary()
    assert "batch 1" not in kt_log.warnings()


def test_flat_sequential_gets_per_layer_blocks():
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(8), keras.layers.Dropout(0.5),
                              keras.layers.Dense(8), keras.layers.Dense(2)])
    lms = LMS("recompute")
    lms.apply(model)
    try:
        names = [l.name for l in lms._wrapped_layers]
    finally:
        lms.remove()
    # every layer but the random one and the output layer
    assert names == [model.layers[0].name, model.layers[2].name], names
    lms = LMS("recompute", blocks=[model.layers[2]])   # a layer object as the block
    lms.apply(model)
    try:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(tf.ones([2, 8]), training=True))
        assert all(g is not None for g in tape.gradient(loss, model.trainable_weights))
        assert set(lms.seen_blocks) == {model.layers[2].name}
    finally:
        lms.remove()


_FIT_PEAK = textwrap.dedent("""
    import json, os, sys
    os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
    import numpy as np, keras, tensorflow as tf
    # one thread each: the allocation order, hence the peak, is the same from run to run
    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    from kerastrainer.lms import LMSKerasCallback
    keras.utils.set_random_seed(0)
    # deep and narrow: the activations kept for the backward pass dominate the weights
    model = keras.Sequential([keras.Input((128,))] + [keras.layers.Dense(128, activation="tanh")
                                                     for _ in range(24)] + [keras.layers.Dense(10)])
    model.compile(keras.optimizers.SGD(0.01), keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    x = np.random.RandomState(0).rand(16384, 128).astype("float32"); y = np.arange(16384) % 10

    class Peak(keras.callbacks.Callback):
        def on_train_batch_begin(self, b, logs=None):
            if b == 1:
                tf.config.experimental.reset_memory_stats("CPU:0")
        def on_train_end(self, logs=None):
            self.peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    p = Peak()
    cbs = [p] + ([LMSKerasCallback(swapout_threshold=1, swapin_ahead=1, swapin_groupby=1)]
                 if sys.argv[1] == "lms" else [])
    h = model.fit(x, y, batch_size=8192, epochs=1, verbose=0, shuffle=False, callbacks=cbs)
    print("RESULT", json.dumps({"peak": p.peak, "loss": h.history["loss"][0]}))
""")


def _fit_peak(mode):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", _FIT_PEAK, mode], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-3000:]
    line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")][-1]
    return json.loads(line.split(None, 1)[1])


@pytest.mark.slow
def test_keras_callback_lowers_peak_memory_with_identical_loss():
    # 25 kept activations of 4 MiB without LMS (187-195 MiB peak measured); with it, the first
    # inputs of the segments and one segment's outputs (82 MiB measured)
    base, lms = _fit_peak("none"), _fit_peak("lms")
    assert lms["loss"] == base["loss"]
    assert lms["peak"] < 0.7 * base["peak"], (lms, base)


# --- the ported TFLMS programs (tests/seed_programs/tflms_*) ---------------------------------------
@pytest.mark.slow
def test_tflms_keras_port_verbatim_knobs_warn_and_train(kt_log):
    port = _load_seed("tflms_mnist_cnn_keras")
    keras.utils.set_random_seed(0)
    model, hist, lms = port.main(["--epochs", "1", "--samples", "256", "--batch_size", "64"])
    w = kt_log.warnings()
    # the program's swapout_threshold=40, in levels of the traced step's ops (TFLMS's unit): its
    # small model's step has no tensor read that far from its producer; the warning says how far
    assert "selects nothing" in w and "topological levels" in w and "the largest distance is" in w, w
    assert np.isfinite(hist.history["loss"]).all()


@pytest.mark.slow
def test_tflms_keras_port_block_knobs_train_exactly_as_without_lms():
    port = _load_seed("tflms_mnist_cnn_keras")
    args = ["--epochs", "2", "--samples", "256", "--batch_size", "64"]
    keras.utils.set_random_seed(0)
    m0, h0, _ = port.main(args + ["--no-lms"])
    keras.utils.set_random_seed(0)
    m1, h1, lms = port.main(args + ["--swapout_threshold", "1", "--swapin_ahead", "1", "--swapin_groupby", "1"])
    assert len(lms.last_report["applied"]) == 4, lms.last_report
    np.testing.assert_allclose(h1.history["loss"], h0.history["loss"], rtol=1e-6)
    np.testing.assert_allclose(h1.history["val_loss"], h0.history["val_loss"], rtol=1e-6)
    for a, b in zip(m0.weights, m1.weights):
        np.testing.assert_allclose(b.numpy(), a.numpy(), rtol=1e-6, atol=1e-7)


def _session_port_grads(port, lms, batch=64):
    store = LayerStore()
    model = port.Model()
    x, y = port.synthetic_mnist(batch, seed=3)
    x, y, keep = tf.constant(x), tf.constant(y), tf.constant(1.0)  # keep_prob 1: no random mask

    def step(x, y, keep):
        with TowerContext("tower0", is_training=True, layer_store=store):
            with tf.GradientTape() as tape:
                cost = model.build_graph(x, y, keep)
            names = sorted(store.named_variables())
            return cost, dict(zip(names, tape.gradient(cost, [store.named_variables()[n] for n in names])))
    keras.utils.set_random_seed(0)
    step(x[:1], y[:1], keep)
    store.allow_create = False
    if lms is not None:
        lms.apply(store)
    try:
        cost, grads = tf.function(step, autograph=False)(x, y, keep)
    finally:
        if lms is not None:
            lms.remove()
    return cost.numpy(), {k: v.numpy() for k, v in grads.items()}


def test_tflms_session_port_gradients_identical_with_block_knobs():
    port = _load_seed("tflms_mnist_session")
    cost0, ref = _session_port_grads(port, None)
    lms = port.make_lms(swapout_threshold=1, swapin_ahead=1, swapin_groupby=1)  # the tutorial's code
    cost1, got = _session_port_grads(port, lms)
    # dropout excluded by the tutorial's excl_output_by_scopes; threshold 1 level: every other block
    assert lms.last_report["applied"] == ["conv1", "conv2", "fc1", "fc2"], lms.last_report
    assert cost1 == cost0
    assert set(got) == set(ref) and len(ref) == 8
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-6, atol=1e-9, err_msg=k)


@pytest.mark.slow
def test_tflms_session_port_trains_and_warns_on_verbatim_knobs(kt_log):
    port = _load_seed("tflms_mnist_session")
    keras.utils.set_random_seed(0)
    trainer, lms = port.main(["--steps", "30", "--batch", "32"])   # the tutorial's 50 / 3 / 2
    w = kt_log.warnings()
    # 50 levels of the TF2 trace: its tape gradient is shallower than TF1's tf.gradients (no
    # tuple/control_dependency ops per gradient op), so nothing here is that far; the strict port
    # (test_lms_graph_mode.py) edits the TF1 graph and selects what TFLMS selected
    assert "selects nothing" in w and "topological levels" in w and "4 block(s) found" in w, w
    assert lms.last_report["applied"] == []
    assert np.isfinite(trainer.last_step_outputs["cost"])


def test_auto_on_model_desc_estimates_at_the_trainers_batch(kt_log):
    # no batch_size: the input signature's batch is None; the trainer's first batch (8) is used
    lms = LMS(memory_budget=20 << 10, host_device="/cpu:3")
    costs, _ = _train(1, lms)
    assert "profiled at batch size 8" in kt_log.text(), kt_log.text()
    assert lms.plan is not None and lms.plan.modes and np.isfinite(costs).all()


def test_auto_budget_is_the_cpu_allocator_s_cap(monkeypatch):
    from kerastrainer.lms.planner import device_memory_budget
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "true")
    monkeypatch.setenv("TF_CPU_BFC_MEM_LIMIT_IN_MB", "700")
    assert device_memory_budget() == 700 << 20
    monkeypatch.setenv("TF_CPU_ALLOCATOR_USE_BFC", "false")   # the cap is read only with the BFC allocator
    assert device_memory_budget() != 700 << 20


def test_auto_budget_is_a_capped_gpu_s_limit(monkeypatch):
    """What a GPU capped by set_logical_device_configuration(memory_limit=...) gives LMS('auto'):
    the cap, not the card's total (the devices are faked here)."""
    from kerastrainer.lms import planner
    gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
    monkeypatch.setattr(tf.config, "list_logical_devices", lambda kind=None: ["gpu"] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind=None: [gpu] if kind == "GPU" else [])
    monkeypatch.setattr(tf.config, "get_logical_device_configuration", lambda device: [
        tf.config.LogicalDeviceConfiguration(memory_limit=4096), tf.config.LogicalDeviceConfiguration(memory_limit=4096)])
    assert planner.device_memory_budget() == 4096 << 20


@pytest.mark.slow
def test_tflms_keras_manymodel_port_trains_with_lms_where_it_runs_out_of_memory_without():
    """TFLMS's Keras_ManyModel.py (ported in tests/seed_programs with its forced edits) on
    keras.applications.ResNet50 at 512 px, the CPU allocator capped at 600 MiB: without LMS the
    step runs out of memory; with the program's --lms (TFLMS's auto-tuning, LMS('auto') here)
    it trains. Its verbatim --serialization knob is warned about by name."""
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
               TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPU_BFC_MEM_LIMIT_IN_MB="600", TF_CPP_MIN_LOG_LEVEL="2")
    # the run without LMS with oneDNN off: where oneDNN is on by default (Intel CPUs with AVX-512),
    # its kernels die with SIGSEGV when the capped allocator refuses them, instead of raising TF's
    # OOM error (f933055 too); the run with LMS keeps the machine's default
    envs = {"none": dict(env, TF_ENABLE_ONEDNN_OPTS="0"), "lms": env}
    args = [sys.executable, os.path.join(SEEDS, "tflms_keras_manymodel.py"), "--model", "resnet50",
            "--image_size", "512", "--steps", "2", "--channels_last"]
    runs = {flag: subprocess.run(args + flags, capture_output=True, text=True, timeout=600, env=envs[flag],
                                 cwd=SEEDS)
            for flag, flags in (("none", ["--no-lms"]), ("lms", ["--lms", "--serialization", "3"]))}
    none, lms = runs["none"], runs["lms"]
    assert none.returncode != 0 and "OOM when allocating" in none.stderr, none.stderr[-3000:]
    out = lms.stdout + lms.stderr
    assert lms.returncode == 0, out[-3000:]
    assert "LMS auto: budget 600.0 MiB" in out and "recompute: " in out, out[-3000:]
    assert "serialization=['3:'] has no TF2 equivalent" in out, out[-3000:]
    losses = [float(x) for x in re.findall(r"loss: ([-+0-9.eE]+|nan|inf)", out)]
    assert losses and np.isfinite(losses).all()
