"""A program that calls ``tf.compat.v1.disable_eager_execution()`` still trains (issue 24).

``tp_param_test_graph_mode.py`` is tensorpack's ``callbacks/param_test.py`` in the form that disables
eager execution at import, with only its imports changed. The switch is process-wide, so each case
runs in its own process."""
import os
import subprocess
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
IGNORED = "tf.compat.v1.disable_eager_execution() called: ignored"


def _run(args, cwd=HERE, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONUNBUFFERED="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def test_tensorpack_param_test_with_disable_eager_execution_passes():
    r = _run(["-m", "unittest", "-v", "tp_param_test_graph_mode"])
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "Ran 6 tests" in out and "OK" in out
    assert out.count(IGNORED) == 1, out[-4000:]   # one line, however often the program asks


# A ModelDesc trained by launch_train_with_config; PRELUDE runs before kerastrainer is imported.
_PROGRAM = """
import tensorflow as tf
{prelude}
import numpy as np
from kerastrainer import *

class M(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 3), tf.float32, 'x'), tf.TensorSpec((None,), tf.float32, 'y')]
    def build_graph(self, x, y):
        p = tf.squeeze(FullyConnected('fc', x, 1), 1)
        return tf.reduce_mean(tf.square(p - y), name='cost')
    def optimizer(self):
        return tf.keras.optimizers.SGD(0.1)

df = BatchData(DataFromList([[np.ones(3, 'float32'), np.float32(1)]] * 8, shuffle=False), 4)
trainer = launch_train_with_config(TrainConfig(model=M(), dataflow=df, max_epoch=2, steps_per_epoch=2),
                                   SimpleTrainer())
print("TRAINED global_step", trainer.global_step, "eager", tf.executing_eagerly())
"""


def _program(tmp_path, prelude):
    path = tmp_path / "prog.py"
    path.write_text(_PROGRAM.format(prelude=textwrap.dedent(prelude)))
    return _run([str(path)], cwd=str(tmp_path))


def test_disabled_before_kerastrainer_is_loaded_is_a_clear_error(tmp_path):
    r = _program(tmp_path, "tf.compat.v1.disable_eager_execution()")
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert out.count("was called before kerastrainer was loaded") == 1, out[-4000:]
    assert "RuntimeError: launch_train_with_config: eager execution is disabled process-wide" in out, out[-4000:]
    assert "TRAINED" not in out


import pytest  # noqa: E402


@pytest.mark.parametrize("prelude", [
    "import kerastrainer.compat\ntf.compat.v1.disable_eager_execution()",
    # edit 1 of docs/tensorpack-migration.md: the program's own `import tensorflow.compat.v1` comes after
    "import kerastrainer.compat\nimport tensorflow.compat.v1 as tf1\ntf1.disable_eager_execution()",
])
def test_disabled_after_kerastrainer_is_loaded_trains(tmp_path, prelude):
    r = _program(tmp_path, prelude)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "TRAINED global_step 4 eager True" in out
    assert out.count(IGNORED) == 1, out[-4000:]
