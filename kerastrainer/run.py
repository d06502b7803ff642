"""kerastrainer-run: start N training workers, each with its TF_CONFIG, and watch them.

Usage::

    kerastrainer-run -np 2 python train.py --epochs 10          # 2 workers on this machine
    python -m kerastrainer.run -np 2 python train.py             # the same

    # two machines, 4 workers each: run this on each, with its own --node-rank
    kerastrainer-run --hosts node1:4,node2:4 --node-rank 0 --port 29500 python train.py
    kerastrainer-run --hosts node1:4,node2:4 --node-rank 1 --port 29500 python train.py

    kerastrainer-run --hosts node1:4,node2:4 --port 29500 --print-tf-config   # print, start nothing

What it does:

- picks free ports on 127.0.0.1 (one machine) or uses ``--port`` + local index on each
  host (``--hosts``), and gives each worker ``TF_CONFIG`` and ``KERASTRAINER_RANK``,
  ``KERASTRAINER_SIZE``, ``KERASTRAINER_LOCAL_RANK``, ``KERASTRAINER_LOCAL_SIZE``;
- prefixes every output line of a worker with its rank: ``[0] ...``;
- gives the workers' ``MultiWorkerTrainer`` a time limit to wait for all ranks to start
  (``--join-timeout``), after which they fail naming the ranks that never came;
- runs each worker in its own process group and forwards SIGINT and SIGTERM to them
  (a second Ctrl-C kills them);
- when a worker fails, prints its rank and exit code or signal, stops the others
  (SIGTERM, then SIGKILL after ``--grace`` seconds) and exits non-zero; its exit code is
  the failed worker's (128 + signal number for a signal);
- leaves no process behind: at the end every worker's process group is killed, and
  workers die with the launcher if it is killed itself (Linux parent-death signal).

This launcher does not log in to other machines; with ``--hosts`` it starts only this
machine's share (``--node-rank``). Start it on every machine (ssh, pdsh, a job script),
or under SLURM use ``srun`` with no launcher at all (see docs/multi-node.md).
"""
from __future__ import annotations

import argparse
import ctypes
import os
import re
import signal
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence, Tuple

from .utils.cluster import (ENV_LOCAL_RANK, ENV_LOCAL_SIZE, ENV_RANK, ENV_SIZE, find_free_ports,
                            make_tf_config)
from .utils.worker_join import DEFAULT_JOIN_TIMEOUT, ENV_JOIN_TIMEOUT, resolve_join_timeout

__all__ = ["main", "parse_hosts", "plan_workers", "Launcher"]

_PR_SET_PDEATHSIG = 1
_LINE_END = re.compile(rb"(?<=[\r\n])")


def parse_hosts(spec: str) -> List[Tuple[str, int]]:
    """``'node1:4,node2:4'`` -> ``[('node1', 4), ('node2', 4)]`` (slots default to 1)."""
    out = []
    for item in spec.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"--hosts {spec!r} has an empty entry")
        host, _, slots = item.partition(":")
        if not host:
            raise ValueError(f"--hosts entry {item!r} has no host name")
        try:
            n = int(slots) if slots else 1
        except ValueError:
            raise ValueError(f"--hosts entry {item!r}: the slot count after ':' must be an integer") from None
        if n < 1:
            raise ValueError(f"--hosts entry {item!r}: the slot count must be >= 1")
        out.append((host, n))
    return out


def _addresses(hosts: Sequence[Tuple[str, int]], port: int) -> List[List[str]]:
    """``host:port`` of each slot of each host entry; a host listed twice continues its ports."""
    used: Dict[str, int] = {}
    out = []
    for host, slots in hosts:
        first = used.get(host, 0)
        out.append([f"{host}:{port + first + j}" for j in range(slots)])
        used[host] = first + slots
    return out


def plan_workers(num_proc: Optional[int], hosts: Optional[str], node_rank: int,
                 port: Optional[int]) -> Tuple[List[str], List[Tuple[int, int, int]]]:
    """All worker addresses, and ``(rank, local_rank, local_size)`` of the workers to start here."""
    if hosts is None:
        if num_proc is None or num_proc < 1:
            raise ValueError("-np must be a positive number of workers")
        ports = list(range(port, port + num_proc)) if port else find_free_ports(num_proc)
        workers = [f"127.0.0.1:{p}" for p in ports]
        return workers, [(r, r, num_proc) for r in range(num_proc)]
    entries = parse_hosts(hosts)
    if port is None:
        raise ValueError("--hosts needs --port: every machine must compute the same addresses, so the "
                         "ports cannot be picked at random.")
    slots = [n for _, n in entries]
    if num_proc is not None and num_proc != sum(slots):
        raise ValueError(f"-np {num_proc} does not match the {sum(slots)} slots of --hosts {hosts}")
    if not 0 <= node_rank < len(entries):
        raise ValueError(f"--node-rank {node_rank} is out of range for the {len(entries)} hosts of --hosts")
    by_entry = _addresses(entries, port)
    workers = [a for entry in by_entry for a in entry]
    first = sum(slots[:node_rank])
    mine = [(first + j, j, slots[node_rank]) for j in range(slots[node_rank])]
    return workers, mine


def _holder_of_port(port: int) -> str:
    """' (pid N: command)' of the process listening on ``port`` here, when psutil can tell."""
    try:
        import psutil
        for c in psutil.net_connections(kind="tcp"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN and c.pid:
                return f" (pid {c.pid}: {' '.join(psutil.Process(c.pid).cmdline())[:200]})"
    except Exception:  # noqa: BLE001 - only a nicer message
        pass
    return ""


def check_ports_free(workers: Sequence[str], mine: Sequence[Tuple[int, int, int]]) -> None:
    """Raise RuntimeError naming every port of a worker started here that is already taken.

    TensorFlow's own error for it ("Could not start gRPC server") names neither."""
    import socket
    taken = []
    for rank, _, _ in mine:
        host, port = workers[rank].rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # as the gRPC server binds
            try:
                s.bind(("", int(port)))
            except OSError as e:
                taken.append(f"port {port} of rank {rank} ({workers[rank]}): {e.strerror}{_holder_of_port(int(port))}")
    if taken:
        raise RuntimeError("cannot start the workers: " + "; ".join(taken) + ". Choose another --port (worker j "
                           "of a host listens on PORT+j), stop what holds it, or leave --port out on one machine "
                           "to get free ports.")


def _standard_output():
    """The binary stream of our stdout; a clear error when the launcher was started without one
    (``>&-``: Python then has no ``sys.stdout``, and the workers' output would go nowhere)."""
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:
        raise RuntimeError("standard output is closed (started with >&- ?): the workers' output would be lost. "
                           "Redirect it to a file or to /dev/null instead of closing it.")
    return stream


def _die_with_parent(parent_pid: int):
    """preexec_fn: the worker gets SIGKILL when the launcher dies (Linux)."""
    def fn():
        try:
            ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        except (OSError, AttributeError):  # not Linux: rely on the launcher's own clean-up
            pass
        if os.getppid() != parent_pid:  # the launcher died before prctl took effect
            os._exit(1)
    return fn


def _describe(rc: int) -> str:
    if rc < 0:
        try:
            return f"killed by signal {signal.Signals(-rc).name}"
        except ValueError:
            return f"killed by signal {-rc}"
    return f"exit code {rc}"


class Launcher:
    """Start, watch and stop a set of worker processes (the engine of ``kerastrainer-run``).

    Example::

        workers, mine = plan_workers(2, None, 0, None)
        code = Launcher(['python', 'train.py'], workers, mine).run()
    """

    def __init__(self, command: Sequence[str], workers: Sequence[str], mine: Sequence[Tuple[int, int, int]],
                 grace: float = 10.0, prefix: bool = True, out=None, join_timeout: Optional[float] = None):
        if not command:
            raise ValueError("no command to run: kerastrainer-run -np N python train.py ...")
        self.command = list(command)
        self.workers = list(workers)
        self.mine = list(mine)
        self.grace = float(grace)
        self.prefix = prefix
        self.join_timeout = join_timeout
        if out is None:
            out = _standard_output()
        self.out = out
        self.procs: Dict[int, subprocess.Popen] = {}
        self._lock = threading.Lock()
        self._threads: List[threading.Thread] = []
        self._signal: Optional[int] = None
        self._signal_count = 0

    # --- output --------------------------------------------------------------------------
    def _emit(self, data: bytes) -> None:
        with self._lock:
            try:
                self.out.write(data)
                self.out.flush()
            except (OSError, ValueError):  # our own stdout closed: keep draining the pipes
                pass

    def say(self, msg: str) -> None:
        self._emit(f"kerastrainer-run: {msg}\n".encode())

    def _pump(self, rank: int, pipe) -> None:
        tag = f"[{rank}] ".encode() if self.prefix else b""
        # the unfinished line as a list of chunks, each searched once: a long line without a
        # newline costs its length, not its length squared
        pending: List[bytes] = []
        while True:
            chunk = pipe.read1(65536) if hasattr(pipe, "read1") else pipe.read(65536)
            if not chunk:
                break
            # a line ends at \n, or at \r (progress bars redraw the line)
            cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
            if cut < 0:
                pending.append(chunk)
                continue
            body = b"".join(pending + [chunk[:cut + 1]])
            pending = [chunk[cut + 1:]] if cut + 1 < len(chunk) else []
            # a bare separator (tqdm starts its redraws with \r) gets no tag of its own
            self._emit(b"".join(line if line in (b"\r", b"\n") else tag + line
                                for line in _LINE_END.split(body) if line))
        if pending:
            self._emit(b"".join([tag] + pending + [b"\n"]))
        pipe.close()

    # --- processes -------------------------------------------------------------------------
    def _env(self, rank: int, local_rank: int, local_size: int) -> Dict[str, str]:
        env = dict(os.environ)
        env.update({"TF_CONFIG": make_tf_config(self.workers, rank), ENV_RANK: str(rank),
                    ENV_SIZE: str(len(self.workers)), ENV_LOCAL_RANK: str(local_rank),
                    ENV_LOCAL_SIZE: str(local_size), "PYTHONUNBUFFERED": "1"})
        if self.join_timeout is not None:
            env[ENV_JOIN_TIMEOUT] = repr(float(self.join_timeout))
        return env

    def start(self) -> None:
        # All processes first, then the reader threads: preexec_fn must not run while threads exist.
        for rank, local_rank, local_size in self.mine:
            try:
                p = subprocess.Popen(self.command, env=self._env(rank, local_rank, local_size),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
            except OSError as e:
                self.kill_all(signal.SIGKILL)
                raise RuntimeError(f"cannot start {self.command[0]!r} for rank {rank}: {e}") from None
            self.procs[rank] = p
        for rank, p in self.procs.items():
            t = threading.Thread(target=self._pump, args=(rank, p.stdout), name=f"output-{rank}", daemon=True)
            t.start()
            self._threads.append(t)

    def kill_all(self, sig: int, only_running: bool = True) -> None:
        for p in self.procs.values():
            if only_running and p.poll() is not None:
                continue
            try:
                os.killpg(p.pid, sig)  # the worker's group: its DataFlow processes too
            except (ProcessLookupError, PermissionError):
                pass

    def _on_signal(self, signum, frame) -> None:
        self._signal = signum
        self._signal_count += 1
        # forward; a second Ctrl-C means "now"
        self.kill_all(signal.SIGKILL if self._signal_count > 1 else signum)

    def run(self) -> int:
        """Start the workers, wait for them; the exit code for the launcher."""
        old = {s: signal.signal(s, self._on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            self.start()
            return self._watch()
        finally:
            for s, h in old.items():
                signal.signal(s, h)
            self.kill_all(signal.SIGKILL, only_running=False)  # sweep every group: no orphan survives
            for p in self.procs.values():
                try:
                    p.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
            for t in self._threads:
                t.join(timeout=5)

    def _watch(self) -> int:
        failed: Optional[Tuple[int, int]] = None
        kill_at: Optional[float] = None
        reported = set()
        signalled_at: Optional[float] = None
        while True:
            running = 0
            for rank, p in self.procs.items():
                rc = p.poll()
                if rc is None:
                    running += 1
                    continue
                if rank in reported:
                    continue
                reported.add(rank)
                if rc != 0 and failed is None and self._signal is None:
                    failed = (rank, rc)
                    self.say(f"rank {rank} failed ({_describe(rc)}); stopping the other workers.")
                    self.kill_all(signal.SIGTERM)
                    kill_at = time.monotonic() + self.grace
            if running == 0:
                break
            if self._signal is not None and signalled_at is None:
                signalled_at = time.monotonic()
                kill_at = signalled_at + self.grace
            if kill_at is not None and time.monotonic() > kill_at:
                self.say(f"workers still running {self.grace:g} s after being asked to stop; killing them.")
                self.kill_all(signal.SIGKILL)
                kill_at = None
            time.sleep(0.05)
        if failed is not None:
            rank, rc = failed
            self.say(f"rank {rank} failed with {_describe(rc)}.")
            return rc if rc > 0 else 128 - rc
        if self._signal is not None:
            self.say(f"stopped by {signal.Signals(self._signal).name}.")
            return 128 + self._signal
        bad = {r: p.returncode for r, p in self.procs.items() if p.returncode != 0}
        if bad:  # cannot happen without a failure being recorded; kept as a safety net
            rank, rc = sorted(bad.items())[0]
            return rc if rc > 0 else 128 - rc
        return 0


def _join_timeout_arg(text: str) -> float:
    try:
        return resolve_join_timeout(float(text), "--join-timeout")
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e) if "--join-timeout" in str(e) else
                                         f"--join-timeout {text!r} is not a number of seconds") from None


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="kerastrainer-run", description="Start N training workers with TF_CONFIG and watch them.",
        epilog="Example: kerastrainer-run -np 2 python train.py --epochs 10")
    p.add_argument("-np", "--num-proc", type=int, dest="num_proc",
                   help="number of workers (on this machine; with --hosts, the total, checked)")
    p.add_argument("--hosts", help="HOST[:SLOTS],... of all machines, the same on each; start the launcher "
                                   "on each machine with its --node-rank")
    p.add_argument("--node-rank", type=int, default=0, help="this machine's index in --hosts (default 0)")
    p.add_argument("--port", type=int, help="base port: worker j of a host listens on PORT+j (required "
                                            "with --hosts; default: free ports on 127.0.0.1)")
    p.add_argument("--grace", type=float, default=10.0,
                   help="seconds between SIGTERM and SIGKILL when stopping workers (default 10)")
    p.add_argument("--join-timeout", type=_join_timeout_arg, metavar="SECONDS",
                   help=f"seconds each worker's MultiWorkerTrainer waits for all the others to start, then fails "
                        f"naming the missing ranks (sets {ENV_JOIN_TIMEOUT}; default {DEFAULT_JOIN_TIMEOUT:g}; "
                        "inf: no limit)")
    p.add_argument("--no-prefix", action="store_true", help="do not prefix output lines with [rank]")
    p.add_argument("--print-tf-config", action="store_true",
                   help="print each rank's TF_CONFIG and exit without starting anything")
    p.add_argument("command", nargs=argparse.REMAINDER, help="the training command, e.g. python train.py ARGS")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of ``kerastrainer-run`` and ``python -m kerastrainer.run``."""
    parser = _parser()
    args = parser.parse_args(argv)
    if args.num_proc is None and args.hosts is None:
        parser.error("give -np N (workers on this machine) or --hosts")
    try:
        workers, mine = plan_workers(args.num_proc, args.hosts, args.node_rank, args.port)
    except ValueError as e:
        parser.error(str(e))
    if args.print_tf_config:
        for rank in range(len(workers)):
            print(f"rank {rank}: TF_CONFIG='{make_tf_config(workers, rank)}'")
        return 0
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: kerastrainer-run -np N python train.py ARGS")
    try:
        check_ports_free(workers, mine)
        launcher = Launcher(command, workers, mine, grace=args.grace, prefix=not args.no_prefix,
                            join_timeout=args.join_timeout)
        return launcher.run()
    except RuntimeError as e:
        if sys.stderr is not None:   # (closed too: the exit code alone says it)
            print(f"kerastrainer-run: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
