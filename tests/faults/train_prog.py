"""A small real training run for the fault tests: python train_prog.py LOGDIR [options].

Prints 'PID <pid>' first and 'STEP <n>' lines as it trains, so a test can act mid-run.
"""
import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

p = argparse.ArgumentParser()
p.add_argument("logdir")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--steps", type=int, default=20)
p.add_argument("--workers", type=int, default=0, help="MultiProcessRunnerZMQ workers (0: in-process)")
p.add_argument("--delay", type=float, default=0.0, help="seconds per datapoint in the DataFlow")
p.add_argument("--stall-report", type=float, default=30.0)
p.add_argument("--wait-file", default=None, help="at step 3, wait (up to 120 s) until this file exists")
args = p.parse_args()

from kerastrainer import (AutoResumeTrainConfig, Callback, ModelSaver, MultiProcessRunnerZMQ,  # noqa: E402
                          SimpleTrainer, launch_train_with_config, logger)
from kerastrainer.dataflow import DataFlow  # noqa: E402
from _models import MLP  # noqa: E402


class Data(DataFlow):
    def __len__(self):
        return args.steps

    def __iter__(self):
        rng = np.random.RandomState(0)
        for _ in range(args.steps):
            if args.delay:
                time.sleep(args.delay)
            x = rng.randn(32, 8).astype("float32")
            yield [x, (x[:, 0] > 0).astype("int32")]


class PrintSteps(Callback):
    def _trigger_step(self):
        print("STEP", self.trainer.global_step, flush=True)
        if args.wait_file and self.trainer.global_step == 3:
            end = time.time() + 120
            while not os.path.exists(args.wait_file) and time.time() < end:
                time.sleep(0.1)


print("PID", os.getpid(), flush=True)
df = MultiProcessRunnerZMQ(Data(), num_proc=args.workers) if args.workers else Data()
logger.set_logger_dir(args.logdir, action="k")
trainer = SimpleTrainer(steps_per_call=1)
trainer.stall_report_seconds = args.stall_report
launch_train_with_config(AutoResumeTrainConfig(
    model=MLP(), dataflow=df, callbacks=[ModelSaver(), PrintSteps()], max_epoch=args.epochs,
    steps_per_epoch=args.steps), trainer)
print("DONE", flush=True)
