"""``collect_env_info()``: the versions and devices a bug report needs (tensorpack's name)."""
import os
import platform
import sys

import numpy as np
import tensorflow as tf

__all__ = ["collect_env_info"]


def collect_env_info() -> str:
    """A two-column table (one ``name  value`` per line) of Python, numpy, TensorFlow, Keras,
    kerastrainer, the visible devices and the environment variables that change TF's behaviour.

    Example::

        from kerastrainer.tfutils import collect_env_info
        print(collect_env_info())
    """
    import keras

    from .._version import __version__
    rows = [("sys.platform", sys.platform), ("Python", sys.version.replace("\n", " ")),
            ("Machine", platform.machine()), ("kerastrainer", __version__), ("Numpy", np.__version__),
            ("TensorFlow", f"{tf.version.VERSION} git={tf.version.GIT_VERSION}"), ("Keras", keras.__version__),
            ("TF built with CUDA", str(tf.test.is_built_with_cuda()))]
    for kind in ("GPU", "CPU"):
        devs = tf.config.list_physical_devices(kind)
        rows.append((f"{kind}s", ", ".join(d.name for d in devs) or "none"))
    for var in ("CUDA_VISIBLE_DEVICES", "TF_ENABLE_ONEDNN_OPTS", "XLA_FLAGS", "TF_XLA_FLAGS", "OMP_NUM_THREADS"):
        if var in os.environ:
            rows.append((var, os.environ[var]))
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)
