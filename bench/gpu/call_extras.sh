# Device call: two logical GPUs on one, the JPEG pipeline on all cores against a torch DataLoader,
# LMS's largest batches on a capped GPU. About 8 minutes.
source .gpu/env.sh
# the machine's own python3 has torch (for the reference), but the bundle's CUDA stubs on
# LD_LIBRARY_PATH and its packages on PYTHONPATH break torch's import: a wrapper without them
printf '#!/bin/sh\nunset LD_LIBRARY_PATH\ncd %s\nexport PYTHONPATH=%s\nexec python3 "$@"\n' "$PWD" "$PWD" > /tmp/torchpy
chmod +x /tmp/torchpy; export KT_BENCH_PYTHON=/tmp/torchpy
timeout 100 python3 bench/gpu/two_logical.py > /tmp/two.txt 2>&1; echo "two_logical exit $?" >> /tmp/two.txt
grep -i "nccl\|share a physical\|logical GPUs\|OK\|exit\|Error\|reduc" /tmp/two.txt | cut -c1-300 | tee $OUT/two_logical.txt
timeout 150 python3 bench/jpeg_pipeline.py --workers $(( $(nproc) - 1 )) --repeats 1 --batches 40 2>&1 \
  | grep -v "^I0000\|^W0000" | tee $OUT/jpeg.txt
timeout ${LMS_T:-330} python3 bench/lms.py --gpu --search --parallel-search --model resnet50 --size 224 \
  --memory-limit-mb ${LMS_MB:-4096} --policies none,recompute,offload --batch ${LMS_BATCH:-16} --steps 2 \
  --timeout 90 2>&1 | tee $OUT/lms.txt
