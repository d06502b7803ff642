"""tensorpack's own unit tests that turn eager execution off at import run as on TF 2.21.

``tp_models_test_graph_mode.py`` (``models/models_test.py``: placeholders, ``tf.Session``,
kerastrainer's registered layers called in the program's graph) and ``tp_param_test_graph_mode.py``
(``callbacks/param_test.py``: NoOpTrainer set up and trained in that program) are strict ports,
imports only. ``tf.compat.v1.disable_eager_execution()`` is process-wide, so each runs in its own
process (``_run_graph_mode_port.py``), which then says in which mode the process ended: graph mode,
as the program asked, after every training in it."""
import os
import subprocess
import sys

import pytest

import kerastrainer

HERE = os.path.dirname(os.path.abspath(__file__))
# the subprocess imports the kerastrainer this test imported (a worktree on PYTHONPATH included)
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kerastrainer.__file__)))
GRAPH_MODE_AFTER = "MODE_AFTER eager=False eager_new_thread=False"


def _run(args, cwd=HERE, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1",
               PYTHONPATH=os.pathsep.join([ROOT, HERE] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("module,count", [("tp_models_test_graph_mode", 3), ("tp_param_test_graph_mode", 6)])
def test_tensorpack_unit_tests_that_disable_eager_execution_pass(module, count):
    r = _run(["_run_graph_mode_port.py", module])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert f"Ran {count} tests" in out and "\nOK" in out, out[-6000:]
    # the program's mode is graph mode, as it asked, also after kerastrainer trained in it
    assert GRAPH_MODE_AFTER in out, out[-3000:]
