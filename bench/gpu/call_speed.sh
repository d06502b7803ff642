# Device call: ResNet-50 training rows of bench/resnet50.py (ROWS, comma-separated; TIMEOUT per
# child). Each XLA row takes about 90 s (a minute of compile), each non-XLA row about 60 s.
source .gpu/env.sh
python3 bench/resnet50.py --only train --device gpu --steps ${STEPS:-40} --rows ${ROWS} \
  --timeout ${TIMEOUT:-150} 2>&1 | grep -v "^I0000\|^W0000" | tee $OUT/resnet50.txt
