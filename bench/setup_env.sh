#!/usr/bin/env bash
# Create the benchmark's own virtual environment, .bench-venv/ at the repository root,
# holding the references (tensorpack 0.11, tf-keras, a CPU build of PyTorch) that must
# never become dependencies of kerastrainer itself.
#
#   bash bench/setup_env.sh            # create or update .bench-venv
#   PYTHON=python3.11 bash bench/setup_env.sh
#
# The venv sees the parent interpreter's packages (--system-site-packages), so it
# reuses the TensorFlow, numpy and OpenCV already installed there; when the parent has
# no TensorFlow, tensorflow-cpu 2.21 is installed into the venv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
VENV=.bench-venv

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv --system-site-packages "$VENV"
fi
# torch==2.13.0 is served as a CPU wheel by the local package store; pin it so pip
# never resolves a CUDA build.
"$VENV/bin/python" -m pip install -q -r bench/requirements.txt
if ! "$VENV/bin/python" -c "import tensorflow" >/dev/null 2>&1; then
    "$VENV/bin/python" -m pip install -q "tensorflow-cpu==2.21.*"
fi
# Smoke test of each reference, each the way the benchmarks import it.
"$VENV/bin/python" - <<'PY'
import sys
sys.modules["tensorflow"] = None          # tensorpack.dataflow without TF
import tensorpack.dataflow                # noqa: F401
del sys.modules["tensorflow"]
import torch
print("bench venv ok: torch", torch.__version__)
PY
TF_USE_LEGACY_KERAS=1 "$VENV/bin/python" -c \
    "import tensorflow as tf, tensorpack; print('tensorpack', tensorpack.__version__, 'on TF', tf.__version__)"
