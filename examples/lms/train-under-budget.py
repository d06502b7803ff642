#!/usr/bin/env python
"""Train a deep model under a memory budget it does not fit without LMS.

The script starts two child processes with TensorFlow's CPU allocator capped
(``TF_CPU_ALLOCATOR_USE_BFC=true TF_CPU_BFC_MEM_LIMIT_IN_MB=<budget>``): one
trains without LMS and fails with ``ResourceExhaustedError`` (out of memory), the
other trains the same model and batch with ``LMS('recompute')`` as a callback.

    python examples/lms/train-under-budget.py            # budget 110 MiB
"""
import argparse
import os
import subprocess
import sys

import numpy as np


def train(use_lms: bool, steps: int):
    import keras
    import tensorflow as tf
    from kerastrainer.dataflow import DataFromGenerator
    from kerastrainer.lms import LMS, lms_block
    from kerastrainer.tfutils import get_variable
    from kerastrainer.input_source import QueueInput
    from kerastrainer.train import ModelDesc, SimpleTrainer, TrainConfig, launch_train_with_config

    def block(x):
        # elementwise-heavy layers: every activation (4 MiB at batch 256) is kept for backward
        for j in range(4):
            w = get_variable(f"w{j}", [x.shape[-1]], initializer=tf.ones_initializer())
            x = tf.tanh(x * w + 0.1)
        return x

    class Deep(ModelDesc):
        def inputs(self):
            return [tf.TensorSpec((256, 4096), tf.float32, "x")]

        def build_graph(self, x):
            for i in range(8):
                x = lms_block(f"block{i}", block)(x)
            return tf.reduce_mean(tf.square(x - 0.5), name="cost")

        def optimizer(self):
            return keras.optimizers.SGD(0.5)

    rng = np.random.RandomState(0)
    data = rng.randn(256, 4096).astype("float32")
    # a short queue: its batches live in the same (capped) host allocator
    df = DataFromGenerator(lambda: ([data] for _ in range(steps)))
    cbs = [LMS("recompute")] if use_lms else []
    trainer = SimpleTrainer(steps_per_call=1)
    launch_train_with_config(TrainConfig(model=Deep(), data=QueueInput(df, capacity=2), callbacks=cbs, monitors=[],
                                         extra_callbacks=[], steps_per_epoch=steps, max_epoch=1), trainer)
    print("FINAL_COST", trainer.last_step_outputs["cost"])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--budget-mb", type=int, default=110)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--child", choices=["plain", "lms"])
    args = p.parse_args()
    if args.child:
        return train(args.child == "lms", args.steps)
    env = dict(os.environ, TF_CPU_ALLOCATOR_USE_BFC="true", TF_CPU_BFC_MEM_LIMIT_IN_MB=str(args.budget_mb),
               TF_CPP_MIN_LOG_LEVEL="3")
    for child in ("plain", "lms"):
        out = subprocess.run([sys.executable, __file__, "--child", child, "--steps", str(args.steps)],
                             capture_output=True, text=True, env=env)
        text = out.stdout + out.stderr
        if "ResourceExhausted" in text or "OOM" in text:
            result = "out of memory (ResourceExhaustedError)"
        elif out.returncode == 0:
            result = "trained: " + [ln for ln in text.splitlines() if "FINAL_COST" in ln][-1]
        else:
            result = "failed:\n" + text[-2000:]
        print(f"budget {args.budget_mb} MiB, {'with LMS(recompute)' if child == 'lms' else 'without LMS'}: "
              f"{result}")


if __name__ == "__main__":
    main()
