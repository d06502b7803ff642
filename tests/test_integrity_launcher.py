"""Faults injected at the launcher's edges: a rank that never joins, one huge
line without a newline, a closed stdout, malformed TF_CONFIG values.

Real processes and sockets on 127.0.0.1; every wait has a limit, so a regression fails instead
of hanging.
"""
import json
import os
import resource
import subprocess
import sys
import threading

import pytest

from kerastrainer.utils.cluster import find_free_ports, get_cluster_info
from kerastrainer.utils.worker_join import WorkerJoinError, join_workers, resolve_join_timeout

from _procs import run_group

LAUNCH = [sys.executable, "-m", "kerastrainer.run"]


_run = run_group


def _join_all(workers, ranks, timeout):
    """join_workers on ``ranks`` in threads (real sockets); ``{rank: exception or None}``."""
    result = {}

    def one(r):
        try:
            join_workers(workers, r, timeout)
            result[r] = None
        except Exception as e:   # noqa: BLE001
            result[r] = e
    threads = [threading.Thread(target=one, args=(r,), daemon=True) for r in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout + 60)
    assert set(result) == set(ranks), "a join did not return"
    return result


# --- a rank that never joins -------------------------------------------------------------------------
def test_all_ranks_join():
    workers = [f"127.0.0.1:{p}" for p in find_free_ports(3)]
    assert _join_all(workers, [0, 1, 2], timeout=60) == {0: None, 1: None, 2: None}


def test_a_missing_rank_is_named_on_the_chief_and_on_the_ranks_that_came():
    workers = [f"127.0.0.1:{p}" for p in find_free_ports(3)]
    res = _join_all(workers, [0, 1], timeout=2)     # rank 2 never starts
    assert isinstance(res[0], WorkerJoinError) and isinstance(res[1], WorkerJoinError)
    assert f"rank(s) 2 ({workers[2]}) never did" in str(res[0])
    assert "join_timeout=" in str(res[0]) and "KERASTRAINER_JOIN_TIMEOUT" in str(res[0])
    assert "rank 1 cannot start: rank 0 says:" in str(res[1]) and f"2 ({workers[2]}) never did" in str(res[1])


def test_a_missing_chief_is_named():
    workers = [f"127.0.0.1:{p}" for p in find_free_ports(2)]
    res = _join_all(workers, [1], timeout=1)
    assert f"rank 1 waited 1 s for rank 0 (the chief, at {workers[0]}) and could not reach it" in str(res[1])


def test_ranks_with_different_clusters_are_refused():
    ports = find_free_ports(3)
    mine = [f"127.0.0.1:{p}" for p in ports]
    res = {}
    t = threading.Thread(target=lambda: res.setdefault(0, pytest.raises(WorkerJoinError, join_workers, mine, 0, 30)))
    t.start()
    with pytest.raises(WorkerJoinError, match="rank 0 says: a worker joined as rank 1 of 2, but rank 0's cluster "
                                              "has 3 workers"):
        join_workers(mine[:2], 1, 30)
    t.join(60)
    assert "different cluster definitions" in str(res[0].value)


@pytest.mark.parametrize("value", [0, -1, float("nan"), "10", True])
def test_join_timeout_is_validated(value):
    with pytest.raises((TypeError, ValueError), match="join_timeout"):
        resolve_join_timeout(value)


def test_join_timeout_from_the_environment(monkeypatch):
    monkeypatch.setenv("KERASTRAINER_JOIN_TIMEOUT", "inf")
    assert resolve_join_timeout(None) == float("inf")
    monkeypatch.setenv("KERASTRAINER_JOIN_TIMEOUT", "soon")
    with pytest.raises(ValueError, match="KERASTRAINER_JOIN_TIMEOUT='soon'"):
        resolve_join_timeout(None)


@pytest.mark.slow
def test_launched_trainer_fails_naming_a_rank_that_never_joins(tmp_path):
    # rank 1 is alive but never creates its trainer; before: rank 0 waited in MultiWorkerTrainer() forever
    script = tmp_path / "w.py"
    script.write_text("import os, time\n"
                      "if os.environ['KERASTRAINER_RANK'] == '1':\n    time.sleep(600)\n"
                      "from kerastrainer.train.multiworker import MultiWorkerTrainer\nMultiWorkerTrainer()\n")
    rc, out, _ = _run(LAUNCH + ["-np", "2", "--grace", "2", sys.executable, str(script)],
                      timeout=180, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERASTRAINER_JOIN_TIMEOUT="3"))
    out = out.decode(errors="replace")
    assert rc == 1, out
    assert "WorkerJoinError: MultiWorkerTrainer: rank 0 waited 3 s for the other workers to join; rank(s) 1 " \
           "(127.0.0.1:" in out
    assert "kerastrainer-run: rank 0 failed (exit code 1)" in out


def test_launcher_join_timeout_is_checked_and_passed_on(tmp_path):
    rc, out, err = _run(LAUNCH + ["-np", "1", "--join-timeout", "0", sys.executable, "-c", "pass"], timeout=60,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert rc == 2 and b"--join-timeout must be a positive number of seconds" in err
    rc, out, _ = _run(LAUNCH + ["-np", "1", "--join-timeout", "42", sys.executable, "-c",
                                "import os; print(os.environ['KERASTRAINER_JOIN_TIMEOUT'])"], timeout=60,
                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert rc == 0 and b"[0] 42.0\n" in out


# --- one huge line without a newline -------------------------------------------------------------
def test_a_huge_line_without_newline_is_relayed_whole_in_linear_work(tmp_path):
    # 64 MiB in one line: relayed whole, with its tag. The launcher runs under a CPU-time limit of
    # 15 s, about 20 times what a linear relay needs here; the quadratic one (each 64 KiB read
    # searched and copied the whole unfinished line again) needs minutes and is killed by SIGXCPU.
    size = 64 << 20
    out_file = tmp_path / "out"

    def limit():
        resource.setrlimit(resource.RLIMIT_CPU, (15, 15))
    with open(out_file, "wb") as f:
        rc, _, err = _run(LAUNCH + ["-np", "1", sys.executable, "-c",
                                    f"import sys; sys.stdout.buffer.write(b'x' * {size}); print('', end='')"],
                          timeout=300, stdout=f, stderr=subprocess.PIPE, preexec_fn=limit)
    assert rc == 0, (rc, err[-2000:])
    assert out_file.stat().st_size == len(b"[0] ") + size + 1
    with open(out_file, "rb") as f:
        assert f.read(8) == b"[0] xxxx"
        f.seek(-2, os.SEEK_END)
        assert f.read() == b"x\n"


def test_lines_split_across_reads_keep_one_tag_each(tmp_path):
    code = ("import sys, time\nw = sys.stdout.buffer\n"
            "w.write(b'a' * 100000); w.flush(); time.sleep(0.2)\n"
            "w.write(b'b\\nc' + b'd' * 70000 + b'\\r'); w.flush(); time.sleep(0.2)\n"
            "w.write(b'e\\nlast')\n")
    rc, out, _ = _run(LAUNCH + ["-np", "1", sys.executable, "-c", code], timeout=60, stdout=subprocess.PIPE,
                      stderr=subprocess.STDOUT)
    assert rc == 0
    assert out == (b"[0] " + b"a" * 100000 + b"b\n" + b"[0] c" + b"d" * 70000 + b"\r" + b"[0] e\n"
                   + b"[0] last\n"), out[-300:]


# --- stdout closed ------------------------------------------------------------------------------------
def test_a_closed_stdout_is_a_clear_error():
    # before: AttributeError: 'NoneType' object has no attribute 'buffer'
    launch = " ".join(LAUNCH + ["-np", "1", sys.executable, "-c", "pass"])
    rc, _, err = _run(["bash", "-c", f"exec {launch} >&-"], timeout=60, stderr=subprocess.PIPE)
    err = err.decode(errors="replace")
    assert rc == 2, err
    assert "kerastrainer-run: standard output is closed" in err and "/dev/null" in err
    assert "Traceback" not in err


# --- TF_CONFIG values that are not a cluster ---------------------------------------------------------
def test_tf_config_that_is_not_an_object_is_a_clear_error(monkeypatch):
    from kerastrainer.train.multiworker import MultiWorkerTrainer
    monkeypatch.setenv("TF_CONFIG", "[]")
    with pytest.raises(ValueError, match=r"TF_CONFIG must be a JSON object like \{\"cluster\""):
        MultiWorkerTrainer()


@pytest.mark.parametrize("cluster, message", [
    ({"worker": "127.0.0.1:5001,127.0.0.1:5002"},
     r"TF_CONFIG's cluster 'worker' is the string '127.0.0.1:5001,127.0.0.1:5002', not a list: write "
     r"\[\"127.0.0.1:5001\", \"127.0.0.1:5002\"\]"),
    ({"worker": ["127.0.0.1:5001", 5002]}, r"TF_CONFIG's cluster 'worker': 5002 is not a 'host:port' address"),
    ({"chief": "127.0.0.1:5000", "worker": ["127.0.0.1:5001"]}, r"cluster 'chief' is the string"),
    ([], r"TF_CONFIG's 'cluster' must be a JSON object"),
])
def test_tf_config_worker_list_given_as_a_string_is_refused(cluster, message):
    # before: a string was read as one worker per character (30 workers named '1', '2', '7', ...)
    env = {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}})}
    with pytest.raises(ValueError, match=message):
        get_cluster_info(env)


def test_launcher_refuses_a_worker_string_in_make_tf_config():
    from kerastrainer.utils.cluster import make_tf_config
    with pytest.raises(TypeError, match="one character per worker"):
        make_tf_config("127.0.0.1:5001,127.0.0.1:5002", 0)
