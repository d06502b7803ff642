#!/usr/bin/env bash
# The one prepared device measurement (bench/gpu/README.md): ResNet-50 training
# images/s of ModelDesc (DummyConstantInput, QueueInput with thread staging and with in-loop
# staging, the real JPEG pipeline), KerasModel and keras.Model.fit (XLA on and off), one table.
#
#   bash bench/gpu/check.sh            # GPU machine, after the bundle's pieces: at most ~7.7 minutes
#   bash bench/gpu/check.sh --quick    # CPU dry run here: tiny sizes, no bundle, ~5-10 minutes
#
# On the GPU machine it first unpacks TensorFlow 2.21 GPU into /tmp/site if it is not there yet
# (pieces already moved to /tmp/parts by the earlier calls, plus any .cNN folder carried with
# this one), then sets the bundle's environment (.gpu/env.sh if carried, else the same lines).
# Prints the table and writes it to $OUT/check.txt (after every row: a call cut short keeps one),
# with check.json, check.log (this output) and check-children.log (the row processes' output) beside it.
#
# Environment: OUT (output folder; default /tmp/checkout), BUDGET (seconds for the whole call,
# default 460 on a GPU, 570 with --quick; the rows get what the unpacking leaves), ROWS (rows in
# priority order, KEY[:STEPS],...), STEPS (timed steps, default 60), CHECK_ARGS (more check.py args).
set -uo pipefail
cd "$(dirname "$0")/../.."
T0=$(date +%s)
OUT=${OUT:-/tmp/checkout}
mkdir -p "$OUT"
QUICK=0
if [ "${1:-}" = "--quick" ]; then QUICK=1; shift; fi
CMD="bash bench/gpu/check.sh$([ $QUICK = 1 ] && echo ' --quick')"
ARGS=()
[ -n "${ROWS:-}" ] && ARGS+=(--rows "$ROWS") && CMD="ROWS=$ROWS $CMD"
[ -n "${STEPS:-}" ] && ARGS+=(--steps "$STEPS") && CMD="STEPS=$STEPS $CMD"
[ -n "${BUDGET:-}" ] && CMD="BUDGET=$BUDGET $CMD"

if [ $QUICK = 1 ]; then
    BUDGET=${BUDGET:-570}
    PY=${PYTHON:-python}
    ARGS+=(--quick)
else
    BUDGET=${BUDGET:-460}
    PY=python3
    if [ ! -d /tmp/site/tensorflow ]; then
        # the bundle: pieces moved to /tmp/parts by the earlier calls, and any carried with this one
        mkdir -p /tmp/parts
        for d in .c[0-9][0-9]; do [ -d "$d" ] && mv "$d"/* /tmp/parts/; done
        whl=$(ls /tmp/parts/zstandard-*.whl 2>/dev/null | head -1)
        have=$(cat /tmp/parts/p[0-9]* 2>/dev/null | wc -c)
        want=$(cat /tmp/parts/bundle.size 2>/dev/null || echo "?")
        echo "bundle: $(ls /tmp/parts/p[0-9]* 2>/dev/null | wc -l) pieces, $have bytes (the bundle has $want)"
        if [ -z "$whl" ] || [ "$have" != "$want" -a "$want" != "?" ]; then
            echo "FAILED: TensorFlow is not unpacked and the pieces in /tmp/parts are not the whole bundle" \
                 "(send the missing .cNN pieces first; bench/gpu/README.md)" | tee "$OUT/check.txt"
            ls -la /tmp/parts | tee -a "$OUT/check.txt"
            exit 1
        fi
        t=$(date +%s)
        PIP_ROOT_USER_ACTION=ignore python3 -m pip install -q --no-index --no-deps --target /tmp/zs "$whl" || exit 1
        cat /tmp/parts/p[0-9]* | PYTHONPATH=/tmp/zs python3 -c "
import sys, zstandard
zstandard.ZstdDecompressor(max_window_size=2**31).copy_stream(sys.stdin.buffer, sys.stdout.buffer)" \
            | tar -x -C /tmp || { echo "FAILED: unpacking the bundle" | tee "$OUT/check.txt"; exit 1; }
        rm -rf /tmp/parts
        echo "unpacked TensorFlow into /tmp/site in $(( $(date +%s) - t )) s ($(du -sh /tmp/site | cut -f1))"
    fi
    if [ -f .gpu/env.sh ]; then
        source .gpu/env.sh
    else  # the same as ../shared/gpu/env.sh
        export PYTHONPATH=/tmp/site:$PWD
        export LD_LIBRARY_PATH=$(ls -d /tmp/site/nvidia/*/lib | paste -sd:):${LD_LIBRARY_PATH:-}
        export PATH=/tmp/site/nvidia/cuda_nvcc/bin:$PATH
        export XLA_FLAGS=--xla_gpu_cuda_data_dir=/tmp/site/nvidia/cuda_nvcc
        export TF_CPP_MIN_LOG_LEVEL=1 PYTHONUNBUFFERED=1
    fi
    ARGS+=(--device gpu)
fi
# the rows get what is left of the call's budget, less 15 s for the table and the way back
DEADLINE=$(( T0 + BUDGET - 15 ))
echo "check.sh: $(( $(date +%s) - T0 )) s of set-up; rows until $(date -d @$DEADLINE +%T) ($(( DEADLINE - $(date +%s) )) s)"
# shellcheck disable=SC2086
$PY bench/gpu/check.py "${ARGS[@]}" ${CHECK_ARGS:-} --deadline "$DEADLINE" --out "$OUT" --command "$CMD" 2>&1 \
    | grep --line-buffered -v "^I0000\|^W0000" | tee "$OUT/check.log"
rc=${PIPESTATUS[0]}
echo "check.sh: $(( $(date +%s) - T0 )) s in all (exit $rc); the table: $OUT/check.txt"
exit $rc
