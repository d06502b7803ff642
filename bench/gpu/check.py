"""The one prepared GPU measurement: ResNet-50 training images/s of the rows that
matter, in one table, within one device call (``bash bench/gpu/check.sh``; bench/gpu/README.md).

Rows (``bench/resnet50.py``'s, in this order, which is also their priority):

====================  ======================================================================
md-dummy-xla          ModelDesc, DummyConstantInput: the ceiling (and row 1 of the ratios)
md-queue-xla          ModelDesc, QueueInput with the default staging (StagingInput, a thread)
md-queue-step-xla     ModelDesc, QueueInput, the old in-loop staging (StagingInput mode='step')
md-jpeg-xla           ModelDesc, the real JPEG pipeline (CPUs - 1 worker processes)
km-xla                KerasModel(keras.applications.ResNet50), defaults
fit-xla-kt            keras.Model.fit, jit_compile=True, kerastrainer's XLA flags, steps_per_execution=10
fit                   keras.Model.fit, jit_compile=False
====================  ======================================================================

All kerastrainer rows use the trainers' defaults (``jit_compile='auto'``: XLA on a GPU;
``steps_per_call='auto'``). Rows that can share a process do (``resnet50.py --child
train-rows``): the ModelDesc rows in one, the Keras rows in another. That saves a TensorFlow
start per row, and on a GPU the later rows of a process reuse what XLA keeps per process
(autotuning of the same convolutions, compiled kernels), so only the first row of each process
shows a fresh compile. A row that cannot share (other XLA flags) gets a process of its own.

Time: ``--deadline`` (a Unix time) bounds the whole run. Each row gets at most its own limit,
and no more than leaves the later rows what they need at least (``GPU_TIMES``; once a row of a
kind has run, its time), except the ``--optional`` rows (the JPEG row and fit without XLA), for
which nothing is kept: they run with what the others leave. A row that would not get what it
needs is not started (its process is stopped), and a row that runs past its limit is stopped
with its process. The table is rewritten to ``OUT/check.txt`` after every row, so a run cut
short still leaves one.

    python bench/gpu/check.py --device gpu --out $OUT             # what check.sh runs on a GPU
    python bench/gpu/check.py --quick --out /tmp/checkout         # CPU dry run, tiny sizes
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, BENCH)
import _common as C  # noqa: E402
import resnet50 as R  # noqa: E402

DEFAULT_ROWS = "md-dummy-xla,md-queue-xla,md-queue-step-xla,md-jpeg-xla,km-xla,fit-xla-kt,fit"
# Rows that must have a process of their own: their XLA flags differ from kerastrainer's defaults
# (XLA reads XLA_FLAGS once per process; `import kerastrainer` adds its defaults).
SOLO = {"fit-xla", "km-xla-fused", "km-xla-noautotune"}
# Seconds on an H100 (bf16, 224 px, batch 128; bench/README.md's figures): (need, limit) of an XLA row
# that compiles fresh (the first of its process: TF start + 60-66 s compile + steps), of one
# that follows another in its process (XLA's per-process caches; ~70 s if they do not help), and
# of a row without XLA (TF's kernels: ~25 s first call). `need` is what a row is expected to take
# at least; once a row of the same kind has run, the larger of `need` and its time is used.
GPU_TIMES = {"fresh": (85, 150), "shared": (40, 120), "noxla": (45, 90)}
# CPU dry run (--quick: 32 px, batch 2, 2 steps; XLA's CPU compile ~35 s a row on 2 idle cores)
QUICK_TIMES = {"fresh": (60, 300), "shared": (40, 240), "noxla": (25, 200)}
# Rows for which no time is kept: they run only with what the others leave. The JPEG row is the
# least new figure after the staging rows; fit without XLA was 632 images/s on an H100
# and is only the fallback of "the best fit that finishes".
OPTIONAL = "md-jpeg-xla,fit"
FIRST_ROW = "md-dummy-xla"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="CPU dry run: 32 px, batch 2, 2 steps, 2 JPEG workers")
    p.add_argument("--device", choices=["cpu", "gpu"], default="gpu")
    p.add_argument("--rows", default=DEFAULT_ROWS, help="KEY[:STEPS],... in priority order (default: %(default)s)")
    p.add_argument("--batch", type=int)
    p.add_argument("--image-size", type=int)
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"])
    p.add_argument("--steps", type=int, help="timed steps per row, after a warm-up epoch of as many")
    p.add_argument("--jpeg-steps", type=int, help="steps of md-jpeg-xla (default: 2.5x --steps), so that the "
                   "batches its workers made during the compile do not decide the timed epoch")
    p.add_argument("--df-workers", type=int, help="worker processes of the real JPEG pipeline (default: CPUs - 1)")
    p.add_argument("--optional", default=OPTIONAL, help="rows for which no time is kept: they run only with the time "
                   "the others leave (default: %(default)s)")
    p.add_argument("--separate", action="store_true", help="every row in a fresh process of its own")
    p.add_argument("--cpu-xla-off", action="store_true", help="on CPU, kerastrainer's rows keep jit_compile='auto' "
                   "(off there) instead of True: a faster dry run that skips their XLA compiles")
    p.add_argument("--deadline", type=float, help="Unix time by which all rows must be done (default: now + --budget)")
    p.add_argument("--budget", type=float, default=445, help="seconds for all rows when --deadline is not given")
    p.add_argument("--out", default=os.environ.get("OUT") or "/tmp/checkout", help="folder for check.txt, "
                   "check.json and check-children.log (default: $OUT)")
    p.add_argument("--command", help="the command line to print (check.sh passes its own)")
    args = p.parse_args(argv)
    d = dict(batch=2, image_size=32, precision="fp32", steps=2, df_workers=2) if args.quick else \
        dict(batch=128, image_size=224, precision="bf16", steps=60, df_workers=max(1, (os.cpu_count() or 2) - 1))
    if args.quick:
        args.device = "cpu"
    for k, v in d.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    if args.jpeg_steps is None:
        args.jpeg_steps = args.steps if args.quick else int(2.5 * args.steps)
    if args.deadline is None:
        args.deadline = time.time() + args.budget
    args.optional = set(filter(None, args.optional.split(",")))
    return args


# ----------------------------------------------------------------------------
# rows and processes
# ----------------------------------------------------------------------------

class Row:
    def __init__(self, key: str, steps: int, index: int):
        self.key, self.steps, self.index = key, steps, index
        self.label, self.child, self.input, self.xla = R.ROWS[key]
        self.group = None        # the process it runs in (index)
        self.position = 0        # its place in that process (0: the process's first row)
        self.result = None       # the child's result dict
        self.status = "not run"  # 'ok', or why there is no figure
        self.wall_s = None       # from the process's start (first row) or the previous row's end
        self.threads = None      # threads alive in the child when the row started

    @property
    def kind(self) -> str:
        if self.xla == "off":
            return "noxla"
        return "fresh" if self.position == 0 else "shared"

    def times(self, args, observed=None):
        """(need, limit) in seconds; ``observed``: kind -> the last time a row of that kind took here."""
        need, limit = (QUICK_TIMES if args.quick else GPU_TIMES)[self.kind]
        return max(need, (observed or {}).get(self.kind, 0)), limit


def make_rows(args):
    rows = []
    for i, item in enumerate(args.rows.split(",")):
        key, _, steps = item.strip().partition(":")
        if key not in R.ROWS:
            raise SystemExit(f"--rows: unknown row {key!r}; known: {', '.join(R.ROWS)}")
        default = args.jpeg_steps if R.ROWS[key][2] == "jpeg" else args.steps
        rows.append(Row(key, int(steps) if steps else default, i))
    return rows


def group_rows(rows, separate: bool):
    """Processes: the ModelDesc rows share one, the Keras rows (KerasModel, fit) another, in order of
    first appearance; a SOLO row (or every row with --separate) gets its own."""
    groups, by_family = [], {}
    for r in rows:
        family = None if separate or r.key in SOLO else ("modeldesc" if r.child == "train-modeldesc" else "keras")
        if family is None or family not in by_family:
            groups.append([])
            if family is not None:
                by_family[family] = len(groups) - 1
        g = len(groups) - 1 if family is None else by_family[family]
        r.group, r.position = g, len(groups[g])
        groups[g].append(r)
    return groups


def child_cmd(args, group, images_dir):
    cmd = [sys.executable, os.path.join(BENCH, "resnet50.py"), "--child", "train-rows",
           "--row-list", ",".join(f"{r.key}:{r.steps}" for r in group),
           "--device", args.device, "--batch", str(args.batch), "--image-size", str(args.image_size),
           "--precision", args.precision, "--steps", str(args.steps), "--df-workers", str(args.df_workers)]
    if images_dir:
        cmd += ["--images-dir", images_dir]
    if args.device == "cpu":  # staging is a no-op on CPU unless forced: forced, so that a dry run runs it
        cmd += ["--force-staging"] + (["--jit-auto"] if args.cpu_xla_off else [])
    return cmd


def child_env(group):
    # every row's own flags: a SOLO row is alone; fit-xla-kt's are kerastrainer's defaults, which the
    # other rows of its process add anyway (import kerastrainer), and which fit does not add itself
    flags = [os.environ.get("XLA_FLAGS", "")]
    for r in group:
        if R.ROW_XLA_FLAGS.get(r.key) and R.ROW_XLA_FLAGS[r.key] not in flags:
            flags.append(R.ROW_XLA_FLAGS[r.key])
    env = dict(C.CHILD_ENV, XLA_FLAGS=" ".join(f for f in flags if f))
    for r in group:
        env.update(R.ROW_ENV.get(r.key, {}))
    return env


def _reader(stream, q, log):
    for line in stream:
        line = line.rstrip("\n")
        if not line.startswith(C.RESULT_PREFIX):  # the child's own output (kerastrainer's log) goes to the log
            log.write("[stdout] " + line + "\n")
            log.flush()
        q.put(line)
    q.put(None)


def _kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        pass


def reserve_after(order, row, args, observed) -> float:
    """Seconds kept for the rows that run after ``row`` (``order``: all rows in running order), but
    for the optional ones."""
    later = order[order.index(row) + 1:]
    return sum(r.times(args, observed)[0] for r in later if r.key not in args.optional)


def run_group(args, order, group, images_dir, log_path, on_row_done, observed):
    """Run one process's rows; stop it when a row would eat the later rows' time or runs too long."""
    first = group[0]
    left = args.deadline - time.time()
    kept = reserve_after(order, first, args, observed)
    if min(first.times(args, observed)[1], left - kept) < first.times(args, observed)[0]:
        for r in group:
            r.status = f"not run: out of time ({max(0, left):.0f} s left, {kept:.0f} s kept for the rows after it)"
        return
    # one file for all processes (they run one after the other): $OUT brings back 8 files at most.
    # O_APPEND: the child's stderr and its stdout (copied by _reader) interleave safely
    log = open(log_path, "a")
    log.write(f"\n===== process p{first.group + 1}: {', '.join(r.key for r in group)} "
              f"({time.strftime('%H:%M:%S')})\n")
    log.flush()
    env = dict(os.environ, **child_env(group))
    proc = subprocess.Popen(child_cmd(args, group, images_dir), stdout=subprocess.PIPE, stderr=log, text=True,
                            env=env, cwd=C.REPO_ROOT, start_new_session=True)
    q = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, q, log), daemon=True).start()
    stopped = None
    try:
        for r in group:
            if stopped:
                r.status = stopped
                continue
            t0 = time.time()  # the first row's time includes its process's start
            left = args.deadline - t0
            need, limit = r.times(args, observed)
            kept = reserve_after(order, r, args, observed)
            timeout = min(limit, left - kept)
            if timeout < need:
                r.status = f"not run: out of time ({max(0, left):.0f} s left, {kept:.0f} s kept for the rows after it)"
                stopped = "not run: its process was stopped before it"
                continue
            end = t0 + timeout
            while True:
                try:
                    line = q.get(timeout=max(0.1, end - time.time()))
                except queue.Empty:
                    r.status = f"not finished in {timeout:.0f} s (stopped)"
                    stopped = "not run: its process was stopped before it"
                    break
                if line is None:
                    proc.wait()
                    r.status = f"failed: its process ended (exit code {proc.returncode}); see " \
                               f"{os.path.basename(log_path)}, p{first.group + 1}"
                    stopped = "not run: its process ended before it"
                    break
                if line.startswith(R.ROW_START_PREFIX):
                    r.threads = json.loads(line[len(R.ROW_START_PREFIX):]).get("threads")
                elif line.startswith(C.RESULT_PREFIX):
                    res = json.loads(line[len(C.RESULT_PREFIX):])
                    if res.get("row") != r.key:
                        continue
                    r.result = res
                    r.status = "ok" if "value" in res else f"failed: {res.get('error', '?')}"
                    break
            r.wall_s = time.time() - t0
            if r.status == "ok":
                observed[r.kind] = r.wall_s
            on_row_done(r)
    finally:
        if proc.poll() is None and not stopped:
            # the rows are done: give it a moment to exit by itself (its workers, its threads)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        _kill(proc)
        log.close()
    if any(r.status.startswith(("failed", "not finished")) for r in group):
        print(f"-- {os.path.basename(log_path)}, p{first.group + 1}'s last lines:", flush=True)
        print(_tail(log_path, 15), flush=True)


def _tail(path, n):
    try:
        with open(path, errors="replace") as f:
            lines = [ln for ln in f.read().splitlines() if not ln.startswith(("I0000", "W0000"))]
    except OSError:
        return ""
    return "\n".join("   " + ln[:300] for ln in lines[-n:])


# ----------------------------------------------------------------------------
# the table
# ----------------------------------------------------------------------------

def device_line(args) -> str:
    if args.device == "cpu":
        model = ""
        try:
            with open("/proc/cpuinfo") as f:
                model = next((ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name")), "")
        except OSError:
            pass
        return f"CPU only ({os.cpu_count()} cores{', ' + model if model else ''}){': --quick dry run' if args.quick else ''}"
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        out = ""
    gpus = [ln.strip() for ln in out.splitlines() if ln.strip()]
    return (f"{len(gpus)} GPU(s): " + "; ".join(gpus) if gpus else "GPU (nvidia-smi gave nothing)") + \
        f"; {os.cpu_count()} CPU cores"


def _med(rows, key):
    r = next((r for r in rows if r.key == key and r.result and "value" in r.result), None)
    return r.result["value"] if r else None


def _ratio(a, b):
    return None if a is None or not b else a / b


def _x(r):
    return "n/a" if r is None else C.fmt(r) + "x"


def render(args, rows, header, started, final):
    first = next((r for r in rows if r.key == FIRST_ROW), rows[0])
    base = _med(rows, first.key)
    table = []
    for r in rows:
        res = r.result if r.result and "value" in r.result else None
        v = res["value"] if res else None
        where = f"p{r.group + 1}" + (" fresh" if r.position == 0 else f" row {r.position + 1}")
        notes = []
        if res and res.get("threads_before") is not None and r.position > 0:
            notes.append(f"{res['threads_before']} threads before")
        if r.status != "ok":
            notes.append(r.status)
        table.append([str(r.index + 1), r.key, r.label, C.fmt(v), (C.fmt(_ratio(v, base)) + "x") if v and base else "n/a",
                      C.fmt(res.get("compile_s"), 1) if res else "n/a",
                      C.fmt(res.get("warmup_s"), 1) if res else "n/a",
                      C.fmt(r.wall_s, 0) if r.wall_s is not None else "n/a",
                      ("on" if res.get("xla") else "off") if res else "n/a", where, str(r.steps), "; ".join(notes)])
    lines = list(header)
    lines.append(C.format_table(["#", "row", "system", "images/s", f"/ {first.key}", "first call s", "warm-up epoch s",
                                 "row wall s", "XLA", "process", "steps", "notes"], table))
    lines.append("first call s: kerastrainer's tracing + first call (XLA compile + one step); fit: its warm-up epoch "
                 "beyond its steps at the timed rate. process: pN fresh = the first row of process N (a fresh XLA "
                 "compile); 'row k' = the k-th row of that process, after the others (XLA's per-process autotuning and "
                 "kernel caches may shorten its compile; its images/s is measured the same way). row wall s: from "
                 "the process's start (its first row) or the previous row's end.")
    lines += goal_lines(args, rows)
    lines.append(f"total: {time.time() - started:.0f} s for the rows" + ("" if final else " (still running)"))
    return "\n".join(lines)


def goal_lines(args, rows):
    m = {r.key: _med(rows, r.key) for r in rows}
    dummy, queue_, step, jpeg = (m.get(k) for k in ("md-dummy-xla", "md-queue-xla", "md-queue-step-xla",
                                                      "md-jpeg-xla"))
    km = m.get("km-xla")
    fits = {k: v for k, v in m.items() if k.startswith("fit") and v}
    best_fit_key = max(fits, key=fits.get) if fits else None
    best_fit = fits.get(best_fit_key)
    out = [""]
    if args.device != "gpu":
        out.append("(CPU dry run: the lines below only show that every figure is there; the goals are GPU goals)")
    r = _ratio(queue_, step)
    verdict = "n/a" if r is None else ("thread staging is faster: keep mode='thread'" if r > 1.02 else
                                       "in-loop staging is faster: set StagingInput's default back to 'step'"
                                       if r < 0.98 else "within 2%: a tie")
    out.append(f"staging: QueueInput default (thread) / in-loop (mode='step') = {C.fmt(r)}: {verdict}")
    for key, name in (("md-queue-xla", "ModelDesc (QueueInput, defaults)"), ("km-xla", "KerasModel (defaults)")):
        v = m.get(key)
        out.append(C.goal_line(f"{name} >= 4,000 images/s (is {C.fmt(v)})", None if v is None else v >= 4000))
    for key, name in (("md-queue-xla", "QueueInput"), ("md-jpeg-xla", "the real JPEG pipeline")):
        rr = _ratio(m.get(key), dummy)
        out.append(C.goal_line(f"{name} >= 95% of DummyConstantInput (is {C.fmt(rr)})",
                               None if rr is None else rr >= 0.95))
    best_kt_key = max((k for k in ("md-queue-xla", "km-xla") if m.get(k)), key=lambda k: m[k], default=None)
    rr = _ratio(m.get(best_kt_key), best_fit)
    out.append(C.goal_line(f">= 1.3x the best fit that finishes (is {_x(rr)}: {best_kt_key} / {best_fit_key})",
                           None if rr is None else rr >= 1.3))
    rr = _ratio(km, m.get("fit-xla-kt"))
    out.append(f"like for like: KerasModel / fit, both XLA with kerastrainer's flags, same model = {_x(rr)}")
    for key in ("md-dummy-xla", "km-xla"):
        row = next((r for r in rows if r.key == key), None)
        if row is None or row.position != 0:
            continue
        w = row.result.get("warmup_s") if row.result else None
        out.append(C.goal_line(f"{key}: compile + first epoch < 90 s, a fresh process (is {C.fmt(w, 1)} s)",
                               None if w is None else w < 90))
    return out


def main(argv=None):
    args = parse_args(argv)
    started = time.time()
    os.makedirs(args.out, exist_ok=True)
    rows = make_rows(args)
    groups = group_rows(rows, args.separate)
    command = args.command or " ".join(["python", os.path.relpath(__file__, C.REPO_ROOT)] + sys.argv[1:])
    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        uptime = "n/a"
    steps = f"{args.steps} timed steps after a warm-up epoch of as many"
    if any(r.input == "jpeg" for r in rows):
        steps += f" (md-jpeg-xla: {args.jpeg_steps})"
    header = [
        "== bench/gpu/check.sh: ResNet-50 training images/s, one prepared device check",
        f"command: {command}",
        f"date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}; host: {platform.node()}; uptime: {uptime}",
        f"device: {device_line(args)}",
        "software: (filled in from the first result)",
        f"settings: {args.precision}, {args.image_size} px, batch {args.batch}; {steps}; kerastrainer rows: "
        f"SimpleTrainer defaults (jit_compile='auto', steps_per_call='auto')"
        + (f"; real JPEG pipeline: {args.df_workers} worker processes over {R.NUM_JPEGS} generated "
           f"{R.JPEG_HW[1]}x{R.JPEG_HW[0]} JPEGs" if any(r.input == "jpeg" for r in rows) else "")
        + ("; on CPU: StagingInput forced on, " + ("XLA off ('auto') but for fit-xla-kt" if args.cpu_xla_off else
                                                    "XLA rows jit_compile=True ('auto' is off on CPU)")
           if args.device == "cpu" else ""),
        "processes: " + "; ".join(f"p{i + 1}: {', '.join(r.key for r in g)}" for i, g in enumerate(groups))
        + (f"; no time kept for {', '.join(r.key for r in rows if r.key in args.optional)}"
           if any(r.key in args.optional for r in rows) else ""),
        "",
    ]
    txt, js = os.path.join(args.out, "check.txt"), os.path.join(args.out, "check.json")
    log_path = os.path.join(args.out, "check-children.log")
    open(log_path, "w").close()

    def on_row_done(r):
        if r.result and r.result.get("versions") and header[4].startswith("software: (filled"):
            header[4] = f"software: {r.result['versions']}"
        status = r.result.get("summary") if r.status == "ok" else r.status
        print(f"  [{r.index + 1}] {r.key}: {status} (row {r.wall_s:.0f} s; "
              f"{max(0, args.deadline - time.time()):.0f} s left)", flush=True)
        write(final=False)

    def write(final):
        text = render(args, rows, header, started, final)
        with open(txt, "w") as f:
            f.write(text + "\n")
        with open(js, "w") as f:
            json.dump([dict(row=r.key, label=r.label, status=r.status, wall_s=r.wall_s, steps=r.steps,
                            process=r.group + 1, position=r.position, result=r.result) for r in rows], f, indent=1)
        return text

    print("\n".join(header[:4] + header[5:]), flush=True)
    images_dir = None
    try:
        if any(r.input == "jpeg" for r in rows):
            images_dir = tempfile.mkdtemp(prefix="kt-check-ilsvrc-")
            t = time.time()
            R.write_ilsvrc(images_dir)
            print(f"  wrote {R.NUM_JPEGS} JPEGs in {time.time() - t:.1f} s", flush=True)
        order, observed = [r for g in groups for r in g], {}
        for g in groups:
            run_group(args, order, g, images_dir, log_path, on_row_done, observed)
    finally:
        if images_dir:
            shutil.rmtree(images_dir, ignore_errors=True)
    if header[4].startswith("software: (filled"):
        header[4] = "software: n/a (no row finished)"
    print()
    print(write(final=True), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
