"""A small real training run for the checkpoint fault tests: python ckpt_prog.py LOGDIR [options].

Auto-resumes from LOGDIR; prints 'STEP <n>' after each step and 'DONE <global step>' at the end.
"""
import argparse

import numpy as np

p = argparse.ArgumentParser()
p.add_argument("logdir")
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--steps", type=int, default=4)
p.add_argument("--save-every", type=int, default=0, help="save every k steps (0: each epoch)")
p.add_argument("--nan-at", type=int, default=-1, help="the global step whose cost (and update) is NaN")
p.add_argument("--no-guard", action="store_true", help="run without the NaN guard (TerminateOnNonFinite)")
p.add_argument("--big", type=int, default=0, help="floats in an extra variable, to make saves slow")
p.add_argument("--load", default=None, help="session_init for a plain TrainConfig (no auto-resume)")
args = p.parse_args()

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from kerastrainer import (AutoResumeTrainConfig, Callback, ModelDesc, ModelSaver, PeriodicTrigger,  # noqa: E402
                          SimpleTrainer, TerminateOnNonFinite, TrainConfig, launch_train_with_config, logger)
from kerastrainer.dataflow import DataFlow  # noqa: E402
from kerastrainer.models import FullyConnected  # noqa: E402
from kerastrainer.tfutils import get_variable  # noqa: E402


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 8), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        h = FullyConnected("fc1", x, 16, activation=tf.nn.tanh)
        logits = FullyConnected("fc2", h, 2)
        cost = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        if args.big:
            big = get_variable("big", [args.big], initializer=tf.ones_initializer())
            cost = cost + 1e-9 * tf.reduce_sum(big)
        # steps done so far, saved with the model, so a resumed run counts on
        done = get_variable("steps_done", [], initializer=tf.zeros_initializer(), trainable=False)
        flag = tf.cast(tf.equal(done.assign_add(1.0), float(args.nan_at + 1)), tf.float32)
        # log(1 - 2) = NaN at global step --nan-at, whatever the CPU's kernels do
        return cost * (1.0 + tf.math.log(1.0 - 2.0 * flag))

    def optimizer(self):
        return keras.optimizers.Adam(0.01)


class Data(DataFlow):
    def __len__(self):
        return args.steps

    def __iter__(self):
        rng = np.random.RandomState(0)
        for _ in range(args.steps):
            x = rng.randn(16, 8).astype("float32")
            yield [x, (x[:, 0] > 0).astype("int32")]


class PrintSteps(Callback):
    def _trigger_step(self):
        print("STEP", self.trainer.global_step, flush=True)


logger.set_logger_dir(args.logdir, action="k")
trainer = SimpleTrainer(steps_per_call=1)
saver = ModelSaver(max_to_keep=3, keep_checkpoint_every_n_hours=None)
callbacks = [PeriodicTrigger(saver, every_k_steps=args.save_every) if args.save_every else saver, PrintSteps()]
extra = [] if args.no_guard else [TerminateOnNonFinite()]
kw = dict(model=Model(), dataflow=Data(), callbacks=callbacks, extra_callbacks=extra, monitors=[],
          max_epoch=args.epochs, steps_per_epoch=args.steps)
config = TrainConfig(session_init=args.load, **kw) if args.load else AutoResumeTrainConfig(**kw)
launch_train_with_config(config, trainer)
print("DONE", trainer.global_step, flush=True)
