#!/usr/bin/env python
"""A stand-in for ``srun -n N`` on one machine: N tasks with the variables a SLURM step sets.

    python fake_srun.py -n 2 python program.py args...

Each task gets SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS,
SLURM_STEP_NUM_TASKS, SLURM_STEP_NODELIST=127.0.0.1, SLURM_STEP_TASKS_PER_NODE,
SLURM_JOB_ID and SLURM_STEP_ID; KERASTRAINER_PORT_BASE picks free ports. Output is
prefixed with the task number (``srun -l``). Like ``srun --kill-on-bad-exit``, a task
that fails stops the others; the exit status is the first non-zero one. Test client.
"""
import argparse
import os
import signal
import socket
import subprocess
import sys
import threading


def _free_port_base(n: int) -> int:
    for base in range(23000, 60000, 97):
        socks = []
        try:
            for i in range(n):
                s = socket.socket()
                s.bind(("127.0.0.1", base + i))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free ports")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", "--ntasks", type=int, default=2)
    parser.add_argument("--timeout", type=float, default=300)
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    n = args.ntasks
    base = _free_port_base(n)
    procs = []
    for r in range(n):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("KERASTRAINER_", "TF_CONFIG", "SLURM_"))}
        env.update(SLURM_PROCID=str(r), SLURM_LOCALID=str(r), SLURM_NODEID="0", SLURM_NTASKS=str(n),
                   SLURM_STEP_NUM_TASKS=str(n), SLURM_STEP_NODELIST="127.0.0.1",
                   SLURM_STEP_TASKS_PER_NODE=str(n), SLURM_JOB_ID="4242", SLURM_STEP_ID="0",
                   KERASTRAINER_PORT_BASE=str(base))
        procs.append(subprocess.Popen(args.cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      start_new_session=True))

    def pump(r, p):
        for line in p.stdout:
            sys.stdout.write(f"{r}: {line.decode(errors='replace')}")
            sys.stdout.flush()

    threads = [threading.Thread(target=pump, args=(r, p), daemon=True) for r, p in enumerate(procs)]
    for t in threads:
        t.start()
    status = 0
    try:
        pending = list(procs)
        import time
        deadline = time.time() + args.timeout
        while pending:
            for p in list(pending):
                rc = p.poll()
                if rc is not None:
                    pending.remove(p)
                    if rc != 0 and status == 0:
                        status = rc
                        for q in pending:  # --kill-on-bad-exit
                            os.killpg(q.pid, signal.SIGKILL)
            if time.time() > deadline:
                status = status or 124
                for q in pending:
                    os.killpg(q.pid, signal.SIGKILL)
                break
            time.sleep(0.2)
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        for t in threads:
            t.join(timeout=5)
    sys.exit(status)


if __name__ == "__main__":
    main()
