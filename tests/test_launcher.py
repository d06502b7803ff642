"""kerastrainer-run: environment, output prefixes, failures, signals, multi-host plans.

Workers here are small Python processes (this file run as a script) that need no
TensorFlow, so these tests are fast; test_multiworker.py runs the launcher with real
TF workers.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from kerastrainer.run import main, parse_hosts, plan_workers

LAUNCH = [sys.executable, "-m", "kerastrainer.run"]
ME = os.path.abspath(__file__)


# --- worker modes (this file run as a script) ----------------------------------------------------
def _worker(mode, *args):
    rank = int(os.environ["KERASTRAINER_RANK"])
    print("PID", os.getpid(), flush=True)
    if mode == "env":
        keys = ["KERASTRAINER_RANK", "KERASTRAINER_SIZE", "KERASTRAINER_LOCAL_RANK", "KERASTRAINER_LOCAL_SIZE",
                "TF_CONFIG"]
        print("ENV", json.dumps({k: os.environ[k] for k in keys}), flush=True)
        sys.stdout.write("no newline at the end")
    elif mode == "family":  # a grandchild in the same process group, then wait
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
        print("CHILD", child.pid, flush=True)
        if args and int(args[0]) == rank:
            time.sleep(1)
            sys.exit(int(args[1]))
        print("READY", flush=True)
        time.sleep(300)
    elif mode == "sigint":
        def on_int(signum, frame):
            print("got SIGINT", flush=True)
            sys.exit(0)
        signal.signal(signal.SIGINT, on_int)
        print("READY", flush=True)
        time.sleep(300)
    elif mode == "stubborn":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        print("READY", flush=True)
        time.sleep(300)
    elif mode == "talk":  # rank 0 listens at its TF_CONFIG address, the others connect and say hello
        workers = json.loads(os.environ["TF_CONFIG"])["cluster"]["worker"]
        host, port = workers[0].rsplit(":", 1)
        if rank == 0:
            srv = socket.create_server((host, int(port)))
            srv.settimeout(60)
            got = []
            for _ in range(len(workers) - 1):
                conn, _ = srv.accept()
                got.append(conn.recv(100).decode())
                conn.close()
            print("HEARD", sorted(got), flush=True)
        else:
            deadline = time.monotonic() + 60
            while True:
                try:
                    with socket.create_connection((host, int(port)), timeout=5) as c:
                        c.sendall(f"hello from {rank}".encode())
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)


# --- helpers -------------------------------------------------------------------------------------
def start(*launcher_args, worker=()):
    cmd = LAUNCH + list(launcher_args) + ([sys.executable, ME, "worker", *worker] if worker else [])
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)


def finish(proc, timeout=30):
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out.decode(errors="replace")
    finally:
        kill(proc)


def kill(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait(timeout=10)


def read_until(proc, needle, count, timeout=60):
    """Lines of the launcher's output until ``needle`` appeared ``count`` times."""
    lines, seen = [], 0
    deadline = time.monotonic() + timeout
    while seen < count and time.monotonic() < deadline:
        line = proc.stdout.readline().decode(errors="replace")
        if not line:
            break
        lines.append(line)
        seen += needle in line
    assert seen == count, "".join(lines)
    return lines


def pids_in(lines, tag):
    return [int(line.split(tag, 1)[1].split()[0]) for line in lines if tag in line]


def alive(pids):
    out = []
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                out.append(pid)
        except psutil.NoSuchProcess:
            pass
    return out


def wait_gone(pids, timeout=20):
    deadline = time.monotonic() + timeout
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


# --- tests ---------------------------------------------------------------------------------------
def test_each_worker_gets_its_rank_and_a_tf_config_and_prefixed_output():
    rc, out = finish(start("-np", "3", worker=["env"]))
    assert rc == 0, out
    envs = {}
    for line in out.splitlines():
        if "ENV " in line:
            tag, payload = line.split(" ENV ", 1)
            envs[tag] = json.loads(payload)
    assert sorted(envs) == ["[0]", "[1]", "[2]"]
    clusters = set()
    for tag, env in envs.items():
        rank = int(tag.strip("[]"))
        assert (env["KERASTRAINER_RANK"], env["KERASTRAINER_SIZE"]) == (str(rank), "3")
        assert (env["KERASTRAINER_LOCAL_RANK"], env["KERASTRAINER_LOCAL_SIZE"]) == (str(rank), "3")
        cfg = json.loads(env["TF_CONFIG"])
        assert cfg["task"] == {"type": "worker", "index": rank}
        clusters.add(tuple(cfg["cluster"]["worker"]))
    assert len(clusters) == 1
    workers = clusters.pop()
    assert len({w.rsplit(":", 1)[1] for w in workers}) == 3 and all(w.startswith("127.0.0.1:") for w in workers)
    for r in range(3):  # a last line without a newline is still shown, prefixed
        assert f"[{r}] no newline at the end" in out


def test_a_taken_port_is_named_before_any_worker_starts():
    """--port P with P taken: rank 0 died in TF with 'Could not start gRPC server', naming neither."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        rc, out = finish(start("-np", "2", "--port", str(port - 1), worker=["env"]))
    finally:
        holder.close()
    assert rc == 2, out
    assert f"port {port} of rank 1 (127.0.0.1:{port}): Address already in use (pid {os.getpid()}:" in out, out
    assert "Choose another --port" in out and "ENV " not in out   # no worker was started


def test_failed_worker_stops_the_others_and_names_its_rank():
    proc = start("-np", "3", "--grace", "5", worker=["family", "1", "3"])
    rc, out = finish(proc)
    assert rc == 3, out
    assert "rank 1 failed (exit code 3)" in out
    pids = pids_in(out.splitlines(), "PID") + pids_in(out.splitlines(), "CHILD")
    assert len(pids) == 6
    assert wait_gone(pids) == []


def test_sigkilled_worker_makes_the_launcher_fail_and_leaves_no_process():
    proc = start("-np", "2", "--grace", "5", worker=["family"])
    try:
        lines = read_until(proc, "READY", 2)
        workers = {int(line[1]): pid for line, pid in
                   zip([x for x in lines if "PID" in x], pids_in(lines, "PID"))}
        everything = [proc.pid] + [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        os.kill(workers[1], signal.SIGKILL)
        rc, out = finish(proc)
        assert rc == 128 + signal.SIGKILL, out
        assert "rank 1 failed (killed by signal SIGKILL)" in out
        assert wait_gone(everything) == []
    finally:
        kill(proc)


def test_sigint_is_forwarded_to_every_worker():
    proc = start("-np", "2", worker=["sigint"])
    try:
        read_until(proc, "READY", 2)
        proc.send_signal(signal.SIGINT)
        rc, out = finish(proc)
        assert rc == 128 + signal.SIGINT, out
        assert "[0] got SIGINT" in out and "[1] got SIGINT" in out
        assert "failed" not in out
    finally:
        kill(proc)


def test_sigterm_then_kill_after_grace_when_workers_ignore_it():
    proc = start("-np", "2", "--grace", "1", worker=["stubborn"])
    try:
        lines = read_until(proc, "READY", 2)
        proc.send_signal(signal.SIGTERM)
        rc, out = finish(proc)
        assert rc == 128 + signal.SIGTERM, out
        assert "killing them" in out
        assert wait_gone(pids_in(lines, "PID")) == []
    finally:
        kill(proc)


def test_workers_die_with_a_killed_launcher():
    proc = start("-np", "2", worker=["family"])
    lines = []
    try:
        lines = read_until(proc, "READY", 2)
        workers = pids_in(lines, "PID")
        proc.kill()  # SIGKILL: the launcher cannot clean up; the parent-death signal does
        proc.wait(timeout=10)
        assert wait_gone(workers) == []
    finally:
        kill(proc)
        for line in lines:  # grandchildren were in the workers' groups: sweep them
            for pid in pids_in([line], "CHILD"):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def test_two_launchers_make_one_cluster_with_hosts_and_node_rank():
    port = _free_port_pair()
    hosts = "127.0.0.1:1,127.0.0.1:2"  # one "machine" twice: the second entry continues the ports
    first = start("--hosts", hosts, "--node-rank", "0", "--port", str(port), worker=["talk"])
    second = start("--hosts", hosts, "--node-rank", "1", "--port", str(port), worker=["talk"])
    rc1, out1 = finish(first, timeout=90)
    rc2, out2 = finish(second, timeout=90)
    assert rc1 == 0 and rc2 == 0, out1 + out2
    assert "[0] HEARD ['hello from 1', 'hello from 2']" in out1
    assert "[1] PID" in out2 and "[2] PID" in out2 and "[0]" not in out2


def test_print_tf_config_lists_every_rank(capsys):
    assert main(["--hosts", "a:2,b:1", "--port", "4000", "--print-tf-config"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 3
    cfg = json.loads(out[2].split("TF_CONFIG=", 1)[1].strip("'"))
    assert cfg == {"cluster": {"worker": ["a:4000", "a:4001", "b:4000"]}, "task": {"type": "worker", "index": 2}}


@pytest.mark.parametrize("argv, message", [
    (["-np", "0", "python"], "-np must be a positive"),
    (["--hosts", "a:2", "python"], "--hosts needs --port"),
    (["--hosts", "a:2,b", "--port", "5", "--node-rank", "2", "python"], "--node-rank 2 is out of range"),
    (["--hosts", "a:x", "--port", "5", "python"], "slot count"),
    (["-np", "3", "--hosts", "a:2", "--port", "5", "python"], "does not match the 2 slots"),
    (["-np", "2"], "no command"),
    ([], "give -np N"),
])
def test_bad_arguments_say_what_is_wrong(argv, message, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert message in capsys.readouterr().err


def test_a_command_that_does_not_exist_is_reported():
    rc, out = finish(subprocess.Popen(LAUNCH + ["-np", "2", "/nonexistent/trainer"], stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True))
    assert rc == 2 and "cannot start '/nonexistent/trainer' for rank 0" in out


def test_plans():
    assert parse_hosts("n1:4, n2") == [("n1", 4), ("n2", 1)]
    workers, mine = plan_workers(None, "n1:2,n2:2", 1, 7000)
    assert workers == ["n1:7000", "n1:7001", "n2:7000", "n2:7001"]
    assert mine == [(2, 0, 2), (3, 1, 2)]
    workers, mine = plan_workers(2, None, 0, None)
    assert len(set(workers)) == 2 and mine == [(0, 0, 2), (1, 1, 2)]


def _free_port_pair():
    """A base port whose next two ports are free too."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base > 65000:
            continue
        try:
            socks = [socket.create_server(("127.0.0.1", base + i)) for i in range(3)]
        except OSError:
            continue
        for s in socks:
            s.close()
        return base
    raise RuntimeError("no three consecutive free ports")


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    _worker(*sys.argv[2:])
