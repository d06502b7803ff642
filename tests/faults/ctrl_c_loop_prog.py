"""Trainings one after the other in one process, each ended by a Ctrl-C the test sends at a
random moment: python ctrl_c_loop_prog.py N [--workers W].

Prints 'START i' when training i is about to be launched (set-up, the first trace, steps and
waits for input all follow, so the signal lands anywhere), then 'STOPPED i OK' when its
KeyboardInterrupt came out with Python's own SIGINT handler back and no input thread left
(or 'STOPPED i BAD <why>'), and 'ALL DONE' at the end. A training that ends by itself prints
'FINISHED i' (the signal came too late for it) and the next one starts.
"""
import argparse
import os
import signal
import sys
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

p = argparse.ArgumentParser()
p.add_argument("n", type=int)
p.add_argument("--workers", type=int, default=0)
args = p.parse_args()

from kerastrainer import (MultiProcessRunnerZMQ, QueueInput, SimpleTrainer, StagingInput, TrainConfig,  # noqa: E402
                          launch_train_with_config)
from kerastrainer.dataflow import DataFlow  # noqa: E402
from _models import MLP  # noqa: E402


class Data(DataFlow):
    """Now fast, now slow: a step sometimes waits for its batch."""

    def __len__(self):
        return 50

    def __iter__(self):
        rng = np.random.RandomState()
        for _ in range(50):
            if rng.rand() < 0.2:
                time.sleep(rng.rand() * 0.2)
            x = rng.randn(16, 8).astype("float32")
            yield [x, (x[:, 0] > 0).astype("int32")]


def input_threads():
    return [t.name for t in threading.enumerate() if t.is_alive() and t is not threading.main_thread()
            and ("EnqueueThread" in t.name or "StagingInput" in t.name or "staging" in t.name.lower())]


for i in range(args.n):
    df = MultiProcessRunnerZMQ(Data(), num_proc=args.workers) if args.workers else Data()
    data = StagingInput(QueueInput(df), force=True) if i % 2 else QueueInput(df)
    try:
        # inside the try: the test's Ctrl-C may land the moment this line is out
        print("START", i, flush=True)
        launch_train_with_config(TrainConfig(model=MLP(), data=data, callbacks=[], monitors=[], max_epoch=1000,
                                             steps_per_epoch=50),
                                 SimpleTrainer(steps_per_call=[1, 3, 8][i % 3]))
        print("FINISHED", i, flush=True)
    except KeyboardInterrupt:
        why = []
        if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            why.append(f"SIGINT handler left: {signal.getsignal(signal.SIGINT)!r}")
        time.sleep(0.2)
        if input_threads():
            why.append(f"threads left: {input_threads()}")
        print("STOPPED", i, "OK" if not why else "BAD " + "; ".join(why), flush=True)
print("ALL DONE", flush=True)
