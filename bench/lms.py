"""Large model support: peak memory and step time of a deep convnet, with and without LMS.

Each (policy, repeat) runs in its own process (a fresh allocator, so the peak is
that run's): the systems are interleaved, repeated 3 times, and the medians are
printed as ratios to no LMS. On CPU the peak comes from TF's BFC allocator
(``TF_CPU_ALLOCATOR_USE_BFC=true``); on a GPU from the GPU allocator, and with
``--max-batch`` the largest batch that trains is searched with and without LMS.

    python bench/lms.py                      # CPU: batch 16, 64x64 images
    python bench/lms.py --max-batch          # GPU: also the largest trainable batch
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ["none", "recompute", "offload", "offload+recompute"]


def worker(policy, batch, size, blocks, steps):
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import time
    import tensorflow as tf
    from kerastrainer.lms import LMS, lms_block
    from kerastrainer.models import BatchNorm, Conv2D, FullyConnected, GlobalAvgPooling
    from kerastrainer.tfutils import LayerStore
    from kerastrainer.tfutils.tower import TowerContext
    gpu = bool(tf.config.list_logical_devices("GPU"))
    dev = "GPU:0" if gpu else "CPU:0"

    def res(x):
        y = Conv2D("c1", x, 64, 3, activation=tf.nn.relu)
        y = BatchNorm("bn", Conv2D("c2", y, 64, 3))
        return tf.nn.relu(x + y)

    def step(store, image, label):
        with TowerContext("tower0", is_training=True, layer_store=store):
            with tf.GradientTape() as tape:
                x = Conv2D("conv0", image, 64, 3, activation=tf.nn.relu)
                for i in range(blocks):
                    x = lms_block(f"res{i}", res)(x)
                logits = FullyConnected("fc", GlobalAvgPooling("gap", x), 10)
                cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits))
            variables = store.trainable_variables_list
            grads = tape.gradient(cost, variables)
            for g, v in zip(grads, variables):
                v.assign_sub(1e-3 * g)
            return cost

    store = LayerStore()
    image = tf.random.normal([batch, size, size, 3])
    label = tf.zeros([batch], tf.int32)
    step(store, image[:1], label[:1])
    store.allow_create = False
    if policy != "none":
        LMS(policy, host_device="/cpu:0", swapout_threshold=1).apply(store)
    f = tf.function(step, autograph=False)
    try:
        f(store, image, label).numpy()
        tf.config.experimental.reset_memory_stats(dev)
        t0 = time.perf_counter()
        for _ in range(steps):
            c = f(store, image, label)
        c.numpy()
        dt = (time.perf_counter() - t0) / steps
        peak = tf.config.experimental.get_memory_info(dev)["peak"]
        print("RESULT", json.dumps({"ok": True, "peak": peak, "step": dt}))
    except tf.errors.ResourceExhaustedError:
        print("RESULT", json.dumps({"ok": False}))


def run(policy, args, batch=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", policy, "--batch", str(batch or args.batch),
           "--size", str(args.size), "--blocks", str(args.blocks), "--steps", str(args.steps)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT))
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")]
    if not lines:
        return {"ok": False, "error": out.stderr[-500:]}
    return json.loads(lines[-1].split(None, 1)[1])


def max_batch(policy, args, start=8, limit=1 << 14):
    ok, b = 0, start
    while b <= limit and run(policy, args, b).get("ok"):
        ok, b = b, b * 2
    return ok


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--worker")
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--policies", default=",".join(POLICIES))
    p.add_argument("--max-batch", action="store_true")
    args = p.parse_args()
    if args.worker:
        return worker(args.worker, args.batch, args.size, args.blocks, args.steps)
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    policies = args.policies.split(",")
    res = {k: [] for k in policies}
    for r in range(args.repeats):  # interleaved
        for pol in policies:
            res[pol].append(run(pol, args))
    med = {}
    for pol, rs in res.items():
        good = [r for r in rs if r.get("ok")]
        med[pol] = (statistics.median(r["peak"] for r in good), statistics.median(r["step"] for r in good)) \
            if good else None
    base = med.get("none")
    print(f"deep convnet: {args.blocks} residual blocks, batch {args.batch}, {args.size}x{args.size}, "
          f"{args.repeats} repeats, medians")
    print(f"{'policy':20s} {'peak MiB':>10s} {'peak ratio':>11s} {'step s':>9s} {'step ratio':>11s}")
    for pol, m in med.items():
        if m is None:
            print(f"{pol:20s} failed")
            continue
        pr = m[0] / base[0] if base else float("nan")
        sr = m[1] / base[1] if base else float("nan")
        print(f"{pol:20s} {m[0] / 2**20:10.1f} {pr:11.2f} {m[1]:9.3f} {sr:11.2f}")
    if args.max_batch:
        for pol in ("none", "recompute"):
            print(f"largest batch that trains, {pol}: {max_batch(pol, args)}")


if __name__ == "__main__":
    main()
