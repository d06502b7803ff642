"""Large model support: peak memory, step time and the largest trainable batch, with and without LMS.

Every measurement runs in its own process (a fresh allocator, so the peak is that run's,
and an out-of-memory error cannot poison the next probe).

Default (compare): the systems are interleaved, repeated ``--repeats`` times, and the
medians are printed as ratios to no LMS. On CPU the peak comes from TF's BFC allocator
(``TF_CPU_ALLOCATOR_USE_BFC=true``); on a GPU from the GPU allocator.

``--search``: the largest batch that trains under a memory cap, for each policy, found by
doubling then bisecting; then the step time of LMS at no-LMS's largest batch (its cost) and
the images/s at each policy's own largest batch. The cap is, with ``--gpu``,
``tf.config.set_logical_device_configuration(gpu, [LogicalDeviceConfiguration(memory_limit=MB)])``
on GPU 0, and on CPU ``TF_CPU_BFC_MEM_LIMIT_IN_MB``.

Models: ``convnet`` (residual conv blocks, ``--blocks``, ``--size``) or ``resnet50`` (the model
zoo's ResNet-50 v1.5, one LMS block per bottleneck block: 16 blocks).

    python bench/lms.py                                        # CPU: convnet, batch 16, 64x64
    python bench/lms.py --gpu --search --model resnet50 --size 224 --memory-limit-mb 8192 \\
        --policies none,offload,recompute,offload+recompute
    python bench/lms.py --search --memory-limit-mb 300 --steps 2   # the same search on CPU
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
POLICIES = ["none", "recompute", "offload", "offload+recompute"]


def worker(args):
    os.environ.setdefault("TF_CPU_ALLOCATOR_USE_BFC", "true")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import time
    import tensorflow as tf
    if args.gpu:
        gpus = tf.config.list_physical_devices("GPU")
        if not gpus:
            print("RESULT", json.dumps({"ok": False, "error": "--gpu: no GPU visible"}))
            return
        if args.memory_limit_mb:
            tf.config.set_logical_device_configuration(
                gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=args.memory_limit_mb)])
    from kerastrainer.lms import LMS, lms_block
    if args.gate_chained_above is not None:
        from kerastrainer.lms import recompute
        recompute.GATE_CHAINED_ABOVE = args.gate_chained_above
    from kerastrainer.models import BatchNorm, Conv2D, FullyConnected, GlobalAvgPooling
    from kerastrainer.tfutils import LayerStore
    from kerastrainer.tfutils.tower import TowerContext
    dev = "GPU:0" if args.gpu else "CPU:0"
    policy, batch = args.worker, args.batch

    def res(x):
        y = Conv2D("c1", x, 64, 3, activation=tf.nn.relu)
        y = BatchNorm("bn", Conv2D("c2", y, 64, 3))
        return tf.nn.relu(x + y)

    def convnet(image):
        x = Conv2D("conv0", image, 64, 3, activation=tf.nn.relu)
        for i in range(args.blocks):
            x = lms_block(f"res{i}", res)(x)
        return FullyConnected("fc", GlobalAvgPooling("gap", x), 10)

    def resnet50(image):
        # the zoo's groups make each bottleneck block an LMS block ('group0/block0', ...)
        from kerastrainer.models.resnet import resnet_backbone, resnet_bottleneck, resnet_group, resnet_stem
        # the zoo's stem is an LMS block too ('stem'); --no-lms-stem leaves it out (as before 2026-11-25)
        return resnet_backbone(image, [3, 4, 6, 3], resnet_group, resnet_bottleneck, num_classes=1000,
                               stem_func=resnet_stem)

    net = resnet50 if args.model == "resnet50" else convnet

    def step(store, image, label):
        with TowerContext("tower0", is_training=True, layer_store=store):
            with tf.GradientTape() as tape:
                logits = net(image)
                cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits))
            variables = store.trainable_variables_list
            grads = tape.gradient(cost, variables)
            for g, v in zip(grads, variables):
                v.assign_sub(1e-3 * g)
            return cost

    try:
        with tf.device(dev):
            store = LayerStore()
            image = tf.random.normal([batch, args.size, args.size, 3])
            label = tf.zeros([batch], tf.int32)
            step(store, image[:1], label[:1])
            store.allow_create = False
            if policy != "none":
                LMS(policy, host_device="/cpu:0", swapout_threshold=1,
                    blocks=["group*"] if args.no_lms_stem else None).apply(store)
            f = tf.function(step, autograph=False)
            f(store, image, label).numpy()
            tf.config.experimental.reset_memory_stats(dev)
            t0 = time.perf_counter()
            for _ in range(args.steps):
                c = f(store, image, label)
            c.numpy()
            dt = (time.perf_counter() - t0) / args.steps
        peak = tf.config.experimental.get_memory_info(dev)["peak"]
        print("RESULT", json.dumps({"ok": True, "peak": peak, "step": dt}))
    except (tf.errors.ResourceExhaustedError, tf.errors.InternalError) as e:
        # an allocation over the cap: ResourceExhausted (or, from some GPU kernels, Internal)
        print("RESULT", json.dumps({"ok": False, "error": type(e).__name__}))


def run(policy, args, batch=None):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", policy, "--batch", str(batch or args.batch),
           "--size", str(args.size), "--blocks", str(args.blocks), "--steps", str(args.steps),
           "--model", args.model, "--memory-limit-mb", str(args.memory_limit_mb or 0)] + \
        (["--gpu"] if args.gpu else []) + (["--no-lms-stem"] if args.no_lms_stem else []) + \
        ([] if args.gate_chained_above is None else ["--gate-chained-above", str(args.gate_chained_above)])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(x for x in (ROOT, os.environ.get("PYTHONPATH")) if x))
    if not args.gpu and args.memory_limit_mb:
        env.update(TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPU_BFC_MEM_LIMIT_IN_MB=str(args.memory_limit_mb))
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timeout {args.timeout}s"}
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT")]
    if not lines:
        text = out.stderr + out.stdout
        oom = "ResourceExhausted" in text or "OOM" in text or "out of memory" in text.lower()
        return {"ok": False, "error": "out of memory" if oom else f"exit code {out.returncode}: {text[-500:]}"}
    return json.loads(lines[-1].split(None, 1)[1])


def largest_batch(policy, args):
    """Double from ``--batch`` while it trains, then bisect to 1/16 of the last good batch."""
    probes = {}

    def ok(b):
        if b not in probes:
            probes[b] = run(policy, args, b)
            print(f"  {policy:18s} batch {b:6d}: {'ok' if probes[b].get('ok') else probes[b].get('error')}",
                  flush=True)
        return probes[b].get("ok", False)

    lo, hi = 0, args.batch
    while hi <= args.max_search_batch and ok(hi):
        lo, hi = hi, hi * 2
    if lo == 0 or hi > args.max_search_batch:
        return lo  # nothing trains, or the search limit (not the memory) stopped it
    while hi - lo > max(1, lo // 16):
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def search(args, policies):
    cap = f"{args.memory_limit_mb} MiB" if args.memory_limit_mb else "no cap"
    where = "GPU 0 (logical device memory_limit)" if args.gpu else "CPU (TF_CPU_BFC_MEM_LIMIT_IN_MB)"
    print(f"largest trainable batch: {args.model}, {args.size}x{args.size}, {where}, {cap}")
    if args.parallel_search:  # each probe is its own capped process: the searches can share the GPU
        from concurrent.futures import ThreadPoolExecutor
        with ThreadPoolExecutor(len(policies)) as pool:
            best = dict(zip(policies, pool.map(lambda pol: largest_batch(pol, args), policies)))
    else:
        best = {pol: largest_batch(pol, args) for pol in policies}
    base = best.get("none", 0)
    print(f"\n{'policy':20s} {'max batch':>10s} {'x none':>8s} {'step s @none max':>17s} {'cost':>6s} "
          f"{'img/s @own max':>15s}")
    ref = run("none", args, base) if base else {}
    for pol in policies:
        same = ref if pol == "none" else (run(pol, args, base) if base else {})
        own = ref if pol == "none" else (run(pol, args, best[pol]) if best[pol] else {})
        ratio = best[pol] / base if base else float("nan")
        cost = same["step"] / ref["step"] if same.get("ok") and ref.get("ok") else float("nan")
        step = f"{same['step']:.3f}" if same.get("ok") else "-"
        ips = f"{best[pol] / own['step']:.1f}" if own.get("ok") else "-"
        print(f"{pol:20s} {best[pol]:10d} {ratio:8.2f} {step:>17s} {cost:6.2f} {ips:>15s}")
    print("\n'cost': step time with the policy / without LMS, both at no-LMS's largest batch.")


def compare(args, policies):
    res = {k: [] for k in policies}
    for _ in range(args.repeats):  # interleaved
        for pol in policies:
            res[pol].append(run(pol, args))
    med = {}
    for pol, rs in res.items():
        good = [r for r in rs if r.get("ok")]
        med[pol] = (statistics.median(r["peak"] for r in good), statistics.median(r["step"] for r in good)) \
            if good else None
    base = med.get("none")
    print(f"{args.model}: batch {args.batch}, {args.size}x{args.size}"
          f"{f', {args.blocks} residual blocks' if args.model == 'convnet' else ''}, "
          f"{'GPU' if args.gpu else 'CPU'}, {args.repeats} repeats, medians")
    print(f"{'policy':20s} {'peak MiB':>10s} {'peak ratio':>11s} {'step s':>9s} {'step ratio':>11s}")
    for pol, m in med.items():
        if m is None:
            print(f"{pol:20s} failed: {res[pol][-1].get('error')}")
            continue
        pr = m[0] / base[0] if base else float("nan")
        sr = m[1] / base[1] if base else float("nan")
        print(f"{pol:20s} {m[0] / 2**20:10.1f} {pr:11.2f} {m[1]:9.3f} {sr:11.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--model", choices=["convnet", "resnet50"], default="convnet")
    p.add_argument("--gpu", action="store_true", help="run on GPU 0 (capped with --memory-limit-mb)")
    p.add_argument("--memory-limit-mb", type=int, default=0, help="memory cap for --search (0: none)")
    p.add_argument("--search", "--max-batch", dest="search", action="store_true",
                   help="find the largest batch that trains, per policy")
    p.add_argument("--max-search-batch", type=int, default=4096)
    p.add_argument("--batch", type=int, default=16, help="the batch (compare) or the first probe (search)")
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--blocks", type=int, default=8)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--timeout", type=int, default=900, help="seconds per probe process")
    p.add_argument("--parallel-search", action="store_true",
                   help="search the policies' largest batches at the same time (GPU: the probes share it, each "
                        "under its own cap; the step times are then measured one at a time)")
    p.add_argument("--no-lms-stem", action="store_true",
                   help="resnet50: LMS takes only the residual blocks, not the stem (as before 2026-11-25)")
    p.add_argument("--gate-chained-above", type=float, default=None,
                   help="set kerastrainer.lms.recompute.GATE_CHAINED_ABOVE (1e9: every chained block "
                        "recomputes ungated, as before 2026-11-23)")
    p.add_argument("--policies", default=None, help=f"comma-separated, of {POLICIES}")
    args = p.parse_args()
    if args.worker:
        return worker(args)
    policies = (args.policies or (",".join(POLICIES) if args.gpu else "none,recompute")).split(",")
    bad = [x for x in policies if x not in POLICIES]
    if bad:
        p.error(f"unknown policies {bad}; use {POLICIES}")
    if not args.gpu and any("offload" in x for x in policies):
        print("note: on CPU the host is the compute device: offload moves nothing (LMS warns).")
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    if args.search:
        search(args, policies)
    else:
        compare(args, policies)


if __name__ == "__main__":
    main()
