"""Shared helpers of the benchmarks in bench/: subprocess runners, timing, tables.

Not a benchmark itself. Each benchmark script is both a *driver* (plain
``python bench/NAME.py``) and a *child* (``python bench/NAME.py --child SYSTEM``):
the driver starts one fresh child process per (system, repeat), interleaving the
systems, and each child prints one result line (``emit_result``) that the driver
reads. References (tensorpack, PyTorch) run with the benchmark venv's interpreter
(``.bench-venv/bin/python``, made by ``bench/setup_env.sh``); kerastrainer runs with
the interpreter that runs the driver.

Every child is started in its own session (process group) and the whole group is
killed when the child ends, so worker processes that outlive their parent
(tensorpack's without python-prctl) never stay behind.
"""
from __future__ import annotations

import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from typing import Callable, Dict, List, Optional, Sequence

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(BENCH_DIR)
BENCH_VENV_PYTHON = os.path.join(REPO_ROOT, ".bench-venv", "bin", "python")
RESULT_PREFIX = "@@BENCH_RESULT "

# Quiet TensorFlow's start-up chatter in children; their stderr is only shown on failure.
CHILD_ENV = {"TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}


# ----------------------------------------------------------------------------
# child side
# ----------------------------------------------------------------------------

def emit_result(**values) -> None:
    """Print the child's result line (the driver reads the last one)."""
    print(RESULT_PREFIX + json.dumps(values), flush=True)


def kill_pids(pids: Sequence[int]) -> None:
    """SIGKILL the given processes (workers we started), ignoring those already gone."""
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, PermissionError, TypeError, ValueError):
            pass


def proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` (all its threads), from /proc."""
    try:
        with open(f"/proc/{int(pid)}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, ValueError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class CpuMeter:
    """CPU seconds of this process plus the given worker processes, between start() and stop().

    On a shared, busy machine wall-clock rates swing with other people's load; the
    CPU time a pipeline spends per item does not, so it tells overhead from starvation.
    """

    def __init__(self, worker_pids=()):
        self.pids = list(worker_pids)

    def start(self):
        self._t0 = time.process_time()
        self._w0 = {p: proc_cpu_seconds(p) for p in self.pids}
        return self

    def stop(self) -> float:
        own = time.process_time() - self._t0
        return own + sum(proc_cpu_seconds(p) - c for p, c in self._w0.items())


def touch_pages(arr) -> int:
    """Read one byte per 4 KiB page of ``arr``: forces lazily mapped memory (shared
    memory from another process) to be really there, at negligible cost otherwise."""
    flat = arr.reshape(-1).view("uint8") if arr.dtype.itemsize == 1 else arr.reshape(-1)
    return int(flat[::4096].sum())


# ----------------------------------------------------------------------------
# driver side
# ----------------------------------------------------------------------------

def bench_venv_python() -> Optional[str]:
    """The benchmark venv's interpreter, or None when bench/setup_env.sh was not run.

    ``KT_BENCH_PYTHON`` names another interpreter that has the references (a GPU machine's own
    Python with PyTorch, say).
    """
    if os.environ.get("KT_BENCH_PYTHON"):
        return os.environ["KT_BENCH_PYTHON"]
    return BENCH_VENV_PYTHON if os.path.exists(BENCH_VENV_PYTHON) else None


def print_header(title: str) -> None:
    """Title, date, machine and load: a shared machine's numbers mean little without them."""
    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        uptime = "(uptime unavailable)"
    print(f"== {title}")
    print(f"uptime: {uptime}")
    print(f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; host: {platform.node()}; "
          f"{os.cpu_count()} CPUs; {platform.processor() or platform.machine()}; "
          f"python {platform.python_version()}", flush=True)


class ChildFailed(RuntimeError):
    pass


def run_child(cmd: List[str], timeout: float, env: Optional[Dict[str, str]] = None, verbose: bool = False) -> dict:
    """Run one measurement process and return its result dict.

    The child runs in its own process group; the group is SIGKILLed afterwards
    (whatever happened) so no worker of it survives.
    """
    full_env = dict(os.environ)
    full_env.update(CHILD_ENV)
    if env:
        full_env.update(env)
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env,
                            cwd=REPO_ROOT, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        out, err = proc.communicate()
        raise ChildFailed(f"timed out after {timeout:.0f} s; stderr tail:\n{_tail(err)}")
    finally:
        _kill_group(proc.pid)
    if verbose:
        sys.stderr.write(err)
    lines = [ln for ln in out.splitlines() if ln.startswith(RESULT_PREFIX)]
    if proc.returncode != 0 or not lines:
        raise ChildFailed(f"exit code {proc.returncode}; stderr tail:\n{_tail(err)}\nstdout tail:\n{_tail(out)}")
    return json.loads(lines[-1][len(RESULT_PREFIX):])


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tail(text: str, n: int = 25) -> str:
    return "\n".join((text or "").rstrip().splitlines()[-n:])


class System:
    """One row of a benchmark table: how to start its child, and its result key.

    ``cmd`` is None when the system cannot run here (``why`` says why).
    """

    def __init__(self, name: str, cmd: Optional[List[str]], env: Optional[Dict[str, str]] = None,
                 why: str = "", timeout: float = 300.0):
        self.name, self.cmd, self.env, self.why, self.timeout = name, cmd, env, why, timeout
        self.results: List[dict] = []
        self.errors: List[str] = []


def run_interleaved(systems: Sequence[System], repeats: int, verbose: bool = False) -> None:
    """Run every system ``repeats`` times, round-robin (A B C, A B C, ...), so that
    the noise of a shared machine spreads over all of them alike."""
    for r in range(repeats):
        for s in systems:
            if s.cmd is None:
                continue
            t0 = time.perf_counter()
            try:
                res = s.run_once(verbose) if hasattr(s, "run_once") else \
                    run_child(s.cmd, s.timeout, s.env, verbose)
                s.results.append(res)
                print(f"  [{r + 1}/{repeats}] {s.name}: {res.get('summary', res)} "
                      f"({time.perf_counter() - t0:.0f} s)", flush=True)
            except ChildFailed as e:
                s.errors.append(str(e))
                print(f"  [{r + 1}/{repeats}] {s.name}: FAILED: {e}", flush=True)


def median_of(system: System, key: str) -> Optional[float]:
    vals = [r[key] for r in system.results if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def format_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A GitHub-markdown table (readable in a terminal, pasteable into README.md)."""
    cols = [list(map(str, c)) for c in zip(*([headers] + [list(r) for r in rows]))]
    widths = [max(len(v) for v in c) for c in cols]
    def line(vals):
        return "| " + " | ".join(str(v).ljust(w) for v, w in zip(vals, widths)) + " |"
    out = [line(headers), "| " + " | ".join("-" * w for w in widths) + " |"]
    out += [line(r) for r in rows]
    return "\n".join(out)


def fmt(v: Optional[float], digits: int = 2) -> str:
    if v is None:
        return "n/a"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    return f"{v:.{digits}f}"


def results_table(systems: Sequence[System], key: str, unit: str, ours: str,
                  notes: Optional[Dict[str, str]] = None, extra: Sequence[tuple] = ()) -> str:
    """Rows: system, median, the individual runs, ours / this system, then ``extra``
    columns given as ``(header, result key)`` (their medians).

    ``ours`` names the kerastrainer row the ratios are taken against (higher is better).
    """
    ours_sys = next(s for s in systems if s.name == ours)
    ours_med = median_of(ours_sys, key)
    rows = []
    for s in systems:
        med = median_of(s, key)
        runs = ", ".join(fmt(r[key]) for r in s.results if r.get(key) is not None)
        if s.cmd is None:
            runs = f"not run: {s.why}"
        elif not s.results:
            runs = "failed (see above)"
        ratio = "1.00" if s is ours_sys else (fmt(ours_med / med) + "x" if ours_med and med else "n/a")
        note = (notes or {}).get(s.name, "")
        rows.append([s.name, fmt(med), runs, ratio] + [fmt(median_of(s, k)) for _, k in extra] + [note])
    headers = ["system", f"median {unit}", "runs", "ours / system"] + [h for h, _ in extra] + ["notes"]
    return format_table(headers, rows)


def goal_line(text: str, ok: Optional[bool]) -> str:
    status = "n/a (a figure is missing)" if ok is None else ("MET" if ok else "NOT MET")
    return f"goal: {text}: {status}"


def child_arg(argv: Sequence[str]) -> Optional[str]:
    """The SYSTEM of ``--child SYSTEM`` in ``argv``, or None for the driver."""
    if "--child" in argv:
        i = list(argv).index("--child")
        return argv[i + 1]
    return None


def dispatch_child(children: Dict[str, Callable[[], None]], name: str) -> None:
    if name not in children:
        raise SystemExit(f"unknown child system {name!r}; known: {sorted(children)}")
    children[name]()


def reference_random_resized_crop(path: str, r, out_hw, area=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """The references' per-image work (what a torch DataLoader user writes with OpenCV):
    full decode, random-resized crop (torchvision's rule: 10 tries, then the whole image),
    resize to ``out_hw``, random horizontal flip. ``r`` is a numpy RandomState."""
    import math

    import cv2
    import numpy as np
    th, tw = out_hw
    log_lo, log_hi = math.log(ratio[0]), math.log(ratio[1])
    img = cv2.imdecode(np.fromfile(path, np.uint8), cv2.IMREAD_COLOR)
    h, w = img.shape[:2]
    for _ in range(10):
        a = r.uniform(*area) * h * w
        aspect = math.exp(r.uniform(log_lo, log_hi))
        cw, ch = int(round(math.sqrt(a * aspect))), int(round(math.sqrt(a / aspect)))
        if r.uniform() < 0.5:
            cw, ch = ch, cw
        if 0 < ch <= h and 0 < cw <= w:
            y0, x0 = r.randint(0, h - ch + 1), r.randint(0, w - cw + 1)
            img = cv2.resize(img[y0:y0 + ch, x0:x0 + cw], (tw, th), interpolation=cv2.INTER_LINEAR)
            break
    else:
        img = cv2.resize(img, (tw, th), interpolation=cv2.INTER_LINEAR)
    if r.uniform() < 0.5:
        img = cv2.flip(img, 1)
    return img


# ----------------------------------------------------------------------------
# drivers whose children print one 'RESULT {json}' line (keras_overhead.py, gan_step.py)
# ----------------------------------------------------------------------------

def rate_bench_args(doc: str, default_spe: str):
    """The command line of a driver/child rate benchmark: ``--steps``, ``--repeats``, ``--spe`` (the
    ``steps_per_execution`` values of keras.Model.fit) and the hidden ``--child SYSTEM``."""
    import argparse
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps in the timed epoch")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--spe", default=default_spe, help="steps_per_execution values of keras.Model.fit")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    return parser.parse_args()


def run_result_children(script: str, systems: Sequence[str], repeats: int, child_args: Sequence[str],
                        describe: Callable[[dict], str], timeout: float = 1200) -> Dict[str, List[dict]]:
    """Run ``python script --child SYSTEM *child_args`` for each system, ``repeats`` times,
    interleaved; returns each system's parsed ``RESULT`` lines. A failing child is reported and
    left out; ``describe(result)`` is the progress line of one run."""
    results: Dict[str, List[dict]] = {s: [] for s in systems}
    for r in range(repeats):
        for s in systems:   # interleaved: each repeat runs every system once
            out = subprocess.run([sys.executable, script, "--child", s, *child_args],
                                 capture_output=True, text=True, timeout=timeout)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
            if out.returncode != 0 or not line:
                print(f"{s}: failed\n{out.stderr[-2000:]}", file=sys.stderr)
                continue
            res = json.loads(line[0][len("RESULT "):])
            results[s].append(res)
            print(f"  repeat {r + 1}: {s:14s} {describe(res)}", flush=True)
    return results


def bfc_variant(system: str) -> str:
    """A child named ``<name>_bfc`` runs ``<name>`` with TF's BFC CPU allocator, the one ``import
    kerastrainer`` asks for (kerastrainer/utils/cpu_allocator.py): a reference given the same
    allocator. Call before TensorFlow starts; returns ``<name>``."""
    if system.endswith("_bfc"):
        os.environ["TF_CPU_ALLOCATOR_USE_BFC"] = "true"
        return system[:-len("_bfc")]
    return system


def print_rate_table(results: Dict[str, List[dict]], reference_prefix: str, loss_label: str, header: str) -> None:
    """Medians of ``steps_per_s`` and ``loss`` per system, each rate as a ratio to the best system
    whose name starts with ``reference_prefix``."""
    med = {s: statistics.median(x["steps_per_s"] for x in v) for s, v in results.items() if v}
    loss = {s: statistics.median(x["loss"] for x in v) for s, v in results.items() if v}
    refs = [(v, s) for s, v in med.items() if s.startswith(reference_prefix)]
    if not refs:
        print("no reference run finished: no ratios")
        return
    best = max(refs)
    print(f"\n{header}; reference: the best of {reference_prefix}* ({best[1]}, {best[0]:.1f} steps/s)")
    print(f"{'system':16s} {'steps/s':>9s} {'vs reference':>13s} {loss_label:>13s}")
    for s in results:
        if s in med:
            print(f"{s:16s} {med[s]:9.1f} {med[s] / best[0]:12.2f}x {loss[s]:13.5f}")
