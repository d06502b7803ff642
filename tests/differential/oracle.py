"""Run tensorpack 0.11, the oracle, in a subprocess and read its answers.

The oracle needs ``TF_USE_LEGACY_KERAS=1`` (tensorpack's ``tf.layers`` need tf-keras) and TF1
graph mode, neither of which may touch the test's own process: kerastrainer runs on Keras 3.
So the test writes its inputs to an .npz, ``_tp_oracle.py`` runs in a child process with that
environment, and its outputs come back in another .npz.

Example::

    out = run_oracle("layers", {"cases": json.dumps(["conv_nhwc"]), "conv_nhwc/x": x}, tmp_path)
    out["conv_nhwc/y"]
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import Dict

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ORACLE = HERE / "_tp_oracle.py"


def oracle_available() -> bool:
    """tensorpack 0.11 and tf-keras are installed (the test extra)."""
    return all(importlib.util.find_spec(m) is not None for m in ("tensorpack", "tf_keras"))


def require_oracle():
    if not oracle_available():
        pytest.skip("the differential tests need tensorpack==0.11 and tf-keras==2.21.0: "
                    "pip install -e '.[test]'")


def run_oracle(task: str, inputs: Dict[str, np.ndarray], workdir, timeout: float = 600) -> Dict[str, np.ndarray]:
    """Run ``_tp_oracle.py task`` on ``inputs``; return its outputs (``<case>/error`` on a case that
    failed in tensorpack). Raises RuntimeError with the oracle's stderr when the process fails."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    in_path, out_path = workdir / f"oracle_{task}_in.npz", workdir / f"oracle_{task}_out.npz"
    np.savez(in_path, **inputs)
    env = dict(os.environ, TF_USE_LEGACY_KERAS="1", TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="",
               PYTHONHASHSEED="0",
               # XLA on CPU only where a session asks for it (ops without a CPU kernel)
               TF_XLA_FLAGS=(os.environ.get("TF_XLA_FLAGS", "") + " --tf_xla_cpu_global_jit"
                            " --tf_xla_min_cluster_size=1").strip())
    proc = subprocess.run([sys.executable, str(ORACLE), task, str(in_path), str(out_path)], env=env,
                          cwd=str(workdir), capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0 or not out_path.exists():
        raise RuntimeError(f"the tensorpack oracle ({task}) failed with exit code {proc.returncode}:\n"
                           f"{proc.stderr[-6000:]}")
    with np.load(out_path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}
