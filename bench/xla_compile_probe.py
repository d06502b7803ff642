"""Where does a slow first XLA call spend its time? Runs several training children at once and samples them.

Each variant is one ``bench/resnet50.py`` training child (KerasModel or ModelDesc, XLA on) with its own
``XLA_FLAGS`` additions. Every ``--every`` seconds the probe prints, per variant: the GPU's utilisation,
the child's busiest threads (CPU seconds in the interval, by thread name, from ``/proc``), and the XLA
dump's newest file (which pass the compiler reached). A child that ends prints its result line. Optionally
``cuda-gdb`` takes every thread's backtrace of the first variant at ``--gdb-at`` seconds.

The variants run concurrently, so their speeds are not comparable: this tells *where* time goes (host
compile, GPU autotuning, steps), not how fast a configuration trains; ``bench/resnet50.py`` does that.

Run on a GPU machine::

    python bench/xla_compile_probe.py --out /tmp/probe --duration 300 --gdb-at 100 \\
        km-xla= km-xla-noautotune=--xla_gpu_autotune_level=0 kmnb-xla=

(The children import kerastrainer first, so its default XLA flags apply; run the probe with
``KERASTRAINER_XLA_DEFAULTS=0`` to see XLA's own defaults: the Keras ResNet-50 then stalls.)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from typing import Dict, List

HERE = os.path.dirname(os.path.abspath(__file__))
RESNET = os.path.join(HERE, "resnet50.py")
INPUTS = {"km": ("train-kerasmodel", "queue"), "kmnb": ("train-kerasmodel", "nobias"),
          "md": ("train-modeldesc", "dummy")}


def _threads(pid: int) -> Dict[str, float]:
    """CPU seconds per thread name (summed over threads of one name) of pid and its children."""
    tick = os.sysconf("SC_CLK_TCK")
    out: Dict[str, float] = {}
    pids = [pid]
    try:
        kids = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout.split()
        pids += [int(k) for k in kids]
    except OSError:
        pass
    for p in pids:
        try:
            tids = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tids:
            try:
                with open(f"/proc/{p}/task/{t}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            name = stat[stat.index("(") + 1:stat.rindex(")")]
            fields = stat[stat.rindex(")") + 2:].split()
            out[name] = out.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return out


def _gpu_util() -> str:
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "?"


def _newest(folder: str) -> str:
    try:
        files = [(os.path.getmtime(os.path.join(folder, f)), f) for f in os.listdir(folder)]
    except OSError:
        return "-"
    if not files:
        return "-"
    t, f = max(files)
    return f"{len(files)} files, newest {f[:90]} ({time.time() - t:.0f} s ago)"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("variants", nargs="+", help="NAME=XLA_FLAGS additions; NAME starts with km (Keras ResNet50), "
                   "kmnb (the same without conv biases) or md (ModelDesc zoo)")
    p.add_argument("--out", required=True)
    p.add_argument("--duration", type=float, default=300)
    p.add_argument("--every", type=float, default=20)
    p.add_argument("--gdb-at", type=float, default=0, help="seconds; 0: no backtraces")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    procs = {}
    t0 = time.time()
    for spec in args.variants:
        name, _, flags = spec.partition("=")
        child, inp = next(v for k, v in sorted(INPUTS.items(), key=lambda kv: -len(kv[0])) if name.startswith(k))
        dump = os.path.join(args.out, "dump", name)
        shutil.rmtree(dump, ignore_errors=True)
        env = dict(os.environ, PYTHONUNBUFFERED="1", TF_FORCE_GPU_ALLOW_GROWTH="true")
        env["XLA_FLAGS"] = " ".join([env.get("XLA_FLAGS", ""), flags, f"--xla_dump_to={dump}"]).strip()
        cmd = [sys.executable, RESNET, "--child", child, "--device", "gpu", "--batch", str(args.batch),
               "--image-size", "224", "--precision", "bf16", "--steps", str(args.steps), "--input", inp,
               "--xla", "on"]
        log = open(os.path.join(args.out, f"{name}.log"), "w")
        procs[name] = (subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True),
                       dump, log)
        print(f"[{name}] pid {procs[name][0].pid}: XLA_FLAGS={env['XLA_FLAGS']}", flush=True)
    last = {n: {} for n in procs}
    done: Dict[str, float] = {}
    gdb_done = not args.gdb_at
    try:
        while time.time() - t0 < args.duration and len(done) < len(procs):
            time.sleep(args.every)
            now = time.time() - t0
            print(f"--- t={now:.0f} s; GPU {_gpu_util()}", flush=True)
            for name, (proc, dump, _) in procs.items():
                if name in done:
                    continue
                if proc.poll() is not None:
                    done[name] = now
                    print(f"[{name}] exited {proc.returncode} at ~{now:.0f} s", flush=True)
                    continue
                cur = _threads(proc.pid)
                delta = sorted(((cur[k] - last[name].get(k, 0.0), k) for k in cur), reverse=True)[:4]
                last[name] = cur
                busy = ", ".join(f"{k} {d:.1f}s" for d, k in delta if d > 0.05) or "idle"
                print(f"[{name}] threads: {busy} | dump: {_newest(dump)}", flush=True)
            if not gdb_done and now >= args.gdb_at:
                gdb_done = True
                name, (proc, _, _) = next(iter(procs.items()))
                if proc.poll() is None:
                    path = os.path.join(args.out, f"gdb-{name}.txt")
                    with open(path, "w") as f:
                        try:
                            subprocess.run(["cuda-gdb", "-p", str(proc.pid), "-batch", "-ex", "info threads",
                                            "-ex", "thread apply all bt 14"], stdout=f, stderr=subprocess.STDOUT,
                                           timeout=150)
                        except (OSError, subprocess.SubprocessError) as e:
                            f.write(f"cuda-gdb failed: {e}\n")
                    print(f"[{name}] backtraces in {path}", flush=True)
    finally:
        for name, (proc, dump, log) in procs.items():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            log.close()
    print("\n=== summary")
    for name, (proc, dump, _) in procs.items():
        result = None
        with open(os.path.join(args.out, f"{name}.log")) as f:
            text = f.read()
        for line in text.splitlines():
            if line.startswith("@@BENCH_RESULT "):
                result = line
        modules = sorted(f for f in os.listdir(dump) if f.endswith(".before_optimizations.txt")) \
            if os.path.isdir(dump) else []
        slow = [ln for ln in text.splitlines() if "slow_operation_alarm" in ln or "Very slow compile" in ln]
        print(json.dumps({"variant": name, "exit": proc.returncode, "ended_s": done.get(name), "modules": len(modules),
                          "result": result, "slow_alarms": len(slow)}))
        for ln in slow[:6]:
            print(f"   {ln[:400]}")


if __name__ == "__main__":
    main()
