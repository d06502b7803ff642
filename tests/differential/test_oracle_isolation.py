"""The oracle's dependencies stay in the oracle's process: with tensorpack and tf-keras installed
(the test extra), the test process's ``tf.keras`` is still Keras 3 and tensorpack is never loaded."""
import os
import subprocess
import sys

from oracle import require_oracle


def test_tf_keras_installed_does_not_change_tf_keras_for_kerastrainer():
    require_oracle()
    code = ("import os, sys, keras, tensorflow as tf, kerastrainer\n"
            "from kerastrainer import *\n"
            "assert 'TF_USE_LEGACY_KERAS' not in os.environ\n"
            "assert tf.keras.layers.Dense is keras.layers.Dense, tf.keras\n"
            "assert keras.__version__.startswith('3.'), keras.__version__\n"
            "assert 'tensorpack' not in sys.modules and 'tf_keras' not in sys.modules\n"
            "print('ok')\n")
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip().endswith("ok"), proc.stderr[-3000:]
