"""When does XLA read XLA_FLAGS? Sets a dump folder after the first GPU op, then compiles.

On the H100 (TF 2.21) this printed False: XLA had read its flags by then, which is why
kerastrainer adds its flags at import (kerastrainer/utils/xla_flags.py).
"""
import os

import tensorflow as tf

x = tf.random.normal([64, 64])
print("gpus:", tf.config.list_physical_devices("GPU"), "x on", x.device, flush=True)
os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_dump_to=/tmp/late_dump"
tf.function(lambda a: tf.matmul(a, a) + 1.0, jit_compile=True)(x)
print("late XLA_FLAGS honoured:", os.path.isdir("/tmp/late_dump") and bool(os.listdir("/tmp/late_dump")), flush=True)
