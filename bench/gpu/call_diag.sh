# Device call with the bundle's last piece: unpack TF 2.21 GPU, check when XLA reads XLA_FLAGS,
# and probe the Keras ResNet-50 XLA compile (bench/xla_compile_probe.py). About 5 minutes.
# Run from the repository root on the GPU machine, carrying .c17 (the last piece) and .gpu.
last=$(ls -d .c[0-9][0-9] | tail -1)
mkdir -p /tmp/parts && mv $last/* /tmp/parts/
bash .gpu/unpack.sh /tmp/parts/zstandard-*.whl || { ls -la /tmp/parts; exit 1; }
source .gpu/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
timeout 90 python3 bench/gpu/late_flags.py 2>&1 | grep -v "^I0000\|^W0000" | tail -3
python3 bench/xla_compile_probe.py --out /tmp/probe --duration ${DUR:-230} --gdb-at ${GDB_AT:-100} \
  km-xla= km-xla-noautotune=--xla_gpu_autotune_level=0 kmnb-xla= 2>&1 | tee $OUT/probe.txt
for d in /tmp/probe/dump/*; do echo "== $d"; ls -l --time-style=+%T $d | sort -k6 | grep -v "^total" \
  | awk '{print $6, $5, $7}' | tail -40; done > $OUT/dump_listing.txt 2>&1
(cd /tmp/probe && tar czf $OUT/probe_logs.tgz *.log gdb-*.txt 2>/dev/null)
