#!/usr/bin/env python
"""Multi-worker training on loopback: 2 workers vs 1 process, and all-reduce bandwidth.

    python bench/multiworker.py                  # 3 interleaved repeats, medians
    python bench/multiworker.py --repeats 1 --steps 60 --mb 25

Measures, in fresh processes, interleaved, each repeat in this order:

1. ``single``: one process, ``SimpleTrainer``, a convnet on batches of ``2B``;
2. ``multi``: ``kerastrainer-run -np 2``, ``MultiWorkerTrainer`` (ring all-reduce),
   batches of ``B`` per worker: the same total work per step;
3. ``allreduce``: ``kerastrainer-run -np 2``; the two workers all-reduce a float32
   tensor of ``--mb`` MB (default 102.4 MB = 25.6M floats, a ResNet-50 gradient) with
   MWMS's ring collective; in the same run they send the same bytes over a plain TCP
   socket on 127.0.0.1, and rank 0 copies them with ``np.copyto``.

Images per second are timed after a warm-up epoch (tracing excluded) from the
chief's epoch timer. On a shared machine two processes get a larger share of the
cores than one, so images per CPU-second (user + system time of every worker, same
epochs) are printed too: the cost of the work, whatever the machine's load.
Bandwidths are bytes / median seconds (all-reduce "algorithm bandwidth"; the ring
moves 2(n-1)/n times that over the wire per worker).
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

RESULT = "@@RESULT "
HERE = os.path.abspath(__file__)


# --- children ------------------------------------------------------------------------------------
def child_train(args) -> None:
    multi = args.child == "multi"
    if multi:
        from kerastrainer.train.multiworker import MultiWorkerTrainer
        trainer = MultiWorkerTrainer(communication="ring")
    import keras
    import tensorflow as tf
    from kerastrainer.callbacks import Callback
    from kerastrainer.input_source import DummyConstantInput
    from kerastrainer.models import Conv2D, FullyConnected, MaxPooling
    from kerastrainer.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

    if not multi:
        trainer = SimpleTrainer()
    batch = args.batch if multi else 2 * args.batch

    class ConvNet(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((None, 28, 28, 1), tf.float32, "image"), tf.TensorSpec((None,), tf.int32, "label")]

        def build_graph(self, image, label):
            x = Conv2D("conv0", image, 32, 3, activation=tf.nn.relu)
            x = MaxPooling("pool0", x, 2)
            x = Conv2D("conv1", x, 64, 3, activation=tf.nn.relu)
            x = MaxPooling("pool1", x, 2)
            x = FullyConnected("fc0", x, 256, activation=tf.nn.relu)
            logits = FullyConnected("fc1", x, 10)
            return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits))

        def optimizer(self):
            return keras.optimizers.SGD(0.01)

    times, cpu = [], []

    class EpochTimer(Callback):
        _chief_only = False

        def _before_epoch(self):
            self._t0 = time.perf_counter()
            if self.trainer.epoch_num == 2:  # CPU time of all this process's threads, after warm-up
                cpu.append(time.process_time())

        def _after_epoch(self):
            times.append(time.perf_counter() - self._t0)
            if self.trainer.epoch_num == 3:
                cpu.append(time.process_time())

    config = TrainConfig(model=ConvNet(), data=DummyConstantInput([[batch, 28, 28, 1], [batch]]),
                         callbacks=[EpochTimer()], extra_callbacks=[], monitors=[],
                         steps_per_epoch=args.steps, max_epoch=3)
    launch_train_with_config(config, trainer)
    params = sum(int(v.shape.num_elements()) for v in trainer.trainable_variables)
    timed = sum(times[1:])  # epoch 1 includes tracing
    # every worker reports its CPU seconds; the driver adds them up
    print(RESULT + json.dumps({"images_per_s": 2 * args.batch * args.steps * (len(times) - 1) / timed,
                               "images": 2 * args.batch * args.steps * (len(times) - 1),
                               "cpu_s": cpu[1] - cpu[0], "chief": trainer.is_chief, "params": params}), flush=True)


def child_allreduce(args) -> None:
    from kerastrainer.utils.cluster import get_cluster_info
    info = get_cluster_info()
    import tensorflow as tf
    opts = tf.distribute.experimental.CommunicationOptions(
        implementation=tf.distribute.experimental.CommunicationImplementation.RING)
    strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=opts)
    import numpy as np

    n = int(args.mb * 1e6 / 4)
    with strategy.scope():
        var = tf.Variable(tf.ones([n], tf.float32))

    @tf.function
    def allreduce():
        def fn():
            return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(var))
        out = strategy.experimental_local_results(strategy.run(fn))[0]
        return out[0]  # fetch one element: the time is the collective's, not a copy to numpy

    allreduce()  # warm-up: tracing, connections
    ar = []
    for _ in range(args.iters):
        t0 = time.perf_counter()
        float(allreduce())
        ar.append(time.perf_counter() - t0)

    # the same bytes over a plain TCP socket between the two workers
    nbytes = n * 4
    rendezvous = os.path.join(args.rendezvous, "port")
    tcp = []
    if info.rank == 0:
        src = np.ones(n, np.float32)
        with socket.create_server(("127.0.0.1", 0)) as srv:
            with open(rendezvous + ".tmp", "w") as f:
                f.write(str(srv.getsockname()[1]))
            os.replace(rendezvous + ".tmp", rendezvous)
            conn, _ = srv.accept()
            with conn:
                view = memoryview(src).cast("B")
                for _ in range(args.iters + 1):
                    conn.recv(1)
                    conn.sendall(view)
        dst = np.empty_like(src)
        copies = []
        for _ in range(args.iters + 1):
            t0 = time.perf_counter()
            np.copyto(dst, src)
            copies.append(time.perf_counter() - t0)
        # the receiver's timings come back through a file in the rendezvous directory
        deadline = time.monotonic() + 120
        while not os.path.exists(rendezvous + ".tcp") and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(rendezvous + ".tcp") as f:
            tcp = json.load(f)
        mb = nbytes / 1e6
        print(RESULT + json.dumps({"mb": mb, "allreduce_mb_s": mb / statistics.median(ar),
                                   "tcp_mb_s": mb / statistics.median(tcp[1:]),
                                   "copyto_mb_s": mb / statistics.median(copies[1:])}), flush=True)
    else:
        deadline = time.monotonic() + 120
        while not os.path.exists(rendezvous) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(rendezvous) as f:
            port = int(f.read())
        buf = bytearray(nbytes)
        view = memoryview(buf)
        with socket.create_connection(("127.0.0.1", port)) as c:
            for _ in range(args.iters + 1):
                t0 = time.perf_counter()
                c.sendall(b"g")
                got = 0
                while got < nbytes:
                    k = c.recv_into(view[got:], nbytes - got)
                    if not k:
                        raise RuntimeError("the sender closed the connection early")
                    got += k
                tcp.append(time.perf_counter() - t0)
        with open(rendezvous + ".tcp.tmp", "w") as f:
            json.dump(tcp, f)
        os.replace(rendezvous + ".tcp.tmp", rendezvous + ".tcp")


# --- driver --------------------------------------------------------------------------------------
def run_child(cmd, timeout):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        out = proc.communicate(timeout=timeout)[0].decode(errors="replace")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=10)
    results = [json.loads(line.split(RESULT, 1)[1]) for line in out.splitlines() if RESULT in line]
    if proc.returncode != 0 or not results:
        raise RuntimeError(f"{' '.join(cmd)} failed (exit {proc.returncode}):\n{out[-4000:]}")
    if "cpu_s" in results[0]:  # training: the chief's rate, everyone's CPU seconds
        chief = [r for r in results if r["chief"]][0]
        return dict(chief, img_per_cpu_s=chief["images"] / sum(r["cpu_s"] for r in results))
    return results[-1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--batch", type=int, default=64, help="per-worker batch (the single process takes 2x)")
    p.add_argument("--steps", type=int, default=40, help="steps per epoch (2 timed epochs)")
    p.add_argument("--mb", type=float, default=102.4, help="all-reduce size in MB (102.4 = 25.6M float32)")
    p.add_argument("--iters", type=int, default=5, help="timed all-reduces / socket sends")
    p.add_argument("--child", choices=["single", "multi", "allreduce"])
    p.add_argument("--rendezvous")
    args = p.parse_args()
    if args.child == "allreduce":
        return child_allreduce(args)
    if args.child:
        return child_train(args)

    print("uptime:", subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs; per-worker batch {args.batch}, "
          f"{args.steps} steps x 2 timed epochs; all-reduce of {args.mb:g} MB", flush=True)
    launch = [sys.executable, "-m", "kerastrainer.run", "-np", "2", "--no-prefix"]
    common = ["--batch", str(args.batch), "--steps", str(args.steps)]
    rows = {"single": [], "multi": [], "allreduce": []}
    for rep in range(args.repeats):
        rows["single"].append(run_child([sys.executable, HERE, "--child", "single"] + common, 900))
        rows["multi"].append(run_child(launch + [sys.executable, HERE, "--child", "multi"] + common, 900))
        with tempfile.TemporaryDirectory() as rdv:
            rows["allreduce"].append(run_child(
                launch + [sys.executable, HERE, "--child", "allreduce", "--mb", str(args.mb), "--iters",
                          str(args.iters), "--rendezvous", rdv], 900))
        print(f"repeat {rep + 1}: single {rows['single'][-1]['images_per_s']:.0f} img/s "
              f"({rows['single'][-1]['img_per_cpu_s']:.0f} per CPU-s), "
              f"2 workers {rows['multi'][-1]['images_per_s']:.0f} img/s "
              f"({rows['multi'][-1]['img_per_cpu_s']:.0f} per CPU-s), "
              f"all-reduce {rows['allreduce'][-1]['allreduce_mb_s']:.0f} MB/s, "
              f"tcp {rows['allreduce'][-1]['tcp_mb_s']:.0f} MB/s, "
              f"copyto {rows['allreduce'][-1]['copyto_mb_s']:.0f} MB/s", flush=True)

    def med(kind, key):
        return statistics.median(r[key] for r in rows[kind])

    single, multi = med("single", "images_per_s"), med("multi", "images_per_s")
    single_cpu, multi_cpu = med("single", "img_per_cpu_s"), med("multi", "img_per_cpu_s")
    ar, tcp, cp = (med("allreduce", k) for k in ("allreduce_mb_s", "tcp_mb_s", "copyto_mb_s"))
    params = rows["single"][0]["params"]
    print(f"\nmedians of {args.repeats} (convnet with {params:,} parameters; gradient {params * 4 / 1e6:.1f} MB)")
    table = [
        ("1 process, batch 2B (SimpleTrainer)", f"{single:,.0f} img/s", "1.00"),
        ("2 workers, batch B each (MultiWorkerTrainer, ring)", f"{multi:,.0f} img/s", f"{multi / single:.2f}"),
        ("1 process, per CPU-second", f"{single_cpu:,.0f} img/cpu-s", "1.00"),
        ("2 workers, per CPU-second (both workers' CPU)", f"{multi_cpu:,.0f} img/cpu-s",
         f"{multi_cpu / single_cpu:.2f}"),
        (f"MWMS ring all-reduce, {args.mb:g} MB, 2 workers", f"{ar:,.0f} MB/s", f"{ar / tcp:.2f} of TCP"),
        ("TCP send on 127.0.0.1, same bytes", f"{tcp:,.0f} MB/s", "1.00 of TCP"),
        ("np.copyto in one process, same bytes", f"{cp:,.0f} MB/s", f"{cp / tcp:.2f} of TCP"),
    ]
    w = max(len(r[0]) for r in table)
    print(f"{'measure':<{w}}  {'value':>14}  relative")
    for name, value, rel in table:
        print(f"{name:<{w}}  {value:>14}  {rel}")


if __name__ == "__main__":
    main()
