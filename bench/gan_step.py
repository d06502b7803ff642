#!/usr/bin/env python
"""A GAN step with two optimizers: kerastrainer's Objectives against keras.Model.fit with the
same step written as a custom ``train_step``.

The model (both systems build it from the same Keras layers): a generator (dense 1024, 4x4x64,
transposed conv to 8x8x32, conv to 8x8x1, tanh) and a discriminator (two convs, dense 1);
batch 64 of random 8x8 images and noise of 32. The step: one forward pass of the generator
and of the discriminator on real and fake together, the discriminator's and the generator's
gradients from it, both Adam updates (tensorpack's GANTrainer rule). Systems, each in its own
subprocess, interleaved and repeated (medians reported):

- ``keras_speN``: ``keras.Model.fit`` of a model whose ``train_step`` is that step, with
  ``steps_per_execution`` N (1, 8, 32), on a ``tf.data.Dataset``;
- ``keras_speN_bfc``: the same with TF's BFC CPU allocator, which ``import kerastrainer`` asks for
  (kerastrainer/utils/cpu_allocator.py): fit given the kerastrainer runs' allocator;
- ``kt_objectives``: a ModelDesc returning ``{'d_loss', 'g_loss'}`` with two
  ``kerastrainer.Objective``, ``SimpleTrainer()`` (steps per call 'auto'), a DataFlow of batches
  through QueueInput;
- ``kt_keras_step``: ``KerasModel`` on the Keras model above: its own ``train_step``, run by
  ``SimpleTrainer()`` (steps per call 'auto'), on the same ``tf.data.Dataset``.

Each run trains one warm-up epoch (tracing), then times one epoch. The table gives steps/s
(one step = one update of each optimizer), the ratio to the best keras.Model.fit figure, and
the discriminator loss reported at the end (same data, seed and steps in every system; the
Keras step and ``kt_keras_step`` report the last batch's, ``kt_objectives`` the mean of its last
call's steps).

    python bench/gan_step.py [--steps 300] [--repeats 3]
"""
import json
import os
import subprocess
import sys
import time

from _common import bfc_variant, print_rate_table, rate_bench_args, run_result_children

BATCH, Z = 64, 32


def build_layers():
    import keras
    keras.utils.set_random_seed(0)
    gen = keras.Sequential([
        keras.Input((Z,)),
        keras.layers.Dense(4 * 4 * 64, activation="relu"),
        keras.layers.Reshape((4, 4, 64)),
        keras.layers.Conv2DTranspose(32, 4, strides=2, padding="same", activation="relu"),
        keras.layers.Conv2D(1, 3, padding="same", activation="tanh"),
    ], name="gen")
    disc = keras.Sequential([
        keras.Input((8, 8, 1)),
        keras.layers.Conv2D(32, 3, padding="same", activation="leaky_relu"),
        keras.layers.Conv2D(64, 3, strides=2, padding="same", activation="leaky_relu"),
        keras.layers.Flatten(),
        keras.layers.Dense(1),
    ], name="discrim")
    return gen, disc


def make_data(steps):
    import numpy as np
    rng = np.random.RandomState(0)
    real = rng.uniform(-1, 1, (steps * BATCH, 8, 8, 1)).astype("float32")
    z = rng.uniform(-1, 1, (steps * BATCH, Z)).astype("float32")
    return real, z


def gan_losses(tf, gen, disc, real, z, training):
    fake = gen(z, training=training)
    logits = disc(tf.concat([real, fake], 0), training=training)
    real_logits, fake_logits = tf.split(logits, 2)
    xent = tf.nn.sigmoid_cross_entropy_with_logits
    d_loss = tf.reduce_mean(xent(labels=tf.ones_like(real_logits), logits=real_logits)) + \
        tf.reduce_mean(xent(labels=tf.zeros_like(fake_logits), logits=fake_logits))
    g_loss = tf.reduce_mean(xent(labels=tf.ones_like(fake_logits), logits=fake_logits))
    return d_loss, g_loss


def keras_gan_model():
    """The Keras model whose train_step is the GAN step (for keras.Model.fit and KerasModel)."""
    import keras
    import tensorflow as tf
    gen, disc = build_layers()

    class GAN(keras.Model):
        def __init__(self):
            super().__init__()
            self.gen, self.disc = gen, disc

        def compile(self, d_optimizer, g_optimizer, **kw):
            super().compile(**kw)
            self.d_optimizer, self.g_optimizer = d_optimizer, g_optimizer

        def train_step(self, data):
            real, z = data
            with tf.GradientTape(persistent=True) as tape:
                d_loss, g_loss = gan_losses(tf, self.gen, self.disc, real, z, True)
            dv, gv = self.disc.trainable_weights, self.gen.trainable_weights
            d_grads, g_grads = tape.gradient(d_loss, dv), tape.gradient(g_loss, gv)
            self.d_optimizer.apply_gradients(zip(d_grads, dv))
            self.g_optimizer.apply_gradients(zip(g_grads, gv))
            return {"d_loss": d_loss, "g_loss": g_loss}

    return GAN()


def gan_optimizers():
    import keras
    return keras.optimizers.Adam(2e-4, beta_1=0.5), keras.optimizers.Adam(1e-3, beta_1=0.5)


def run_keras(spe, steps):
    import tensorflow as tf
    model = keras_gan_model()
    model.compile(*gan_optimizers(), steps_per_execution=spe)
    real, z = make_data(steps)
    data = tf.data.Dataset.from_tensor_slices((real, z)).batch(BATCH).prefetch(4)
    model.fit(data, epochs=1, verbose=0)      # warm-up
    t0 = time.perf_counter()
    hist = model.fit(data, epochs=1, verbose=0)
    dt = time.perf_counter() - t0
    return steps / dt, hist.history["d_loss"][-1]


def run_kt(steps):
    import keras
    import tensorflow as tf
    from kerastrainer import CallbackFactory, DataFromList, ModelDesc, Objective, SimpleTrainer, TrainConfig, \
        launch_train_with_config
    gen, disc = build_layers()

    class GAN(ModelDesc):
        def __init__(self):
            self.gen, self.disc = gen, disc

        def inputs(self):
            return [tf.TensorSpec((None, 8, 8, 1), tf.float32, "real"), tf.TensorSpec((None, Z), tf.float32, "z")]

        def build_graph(self, real, z):
            d_loss, g_loss = gan_losses(tf, self.gen, self.disc, real, z, True)
            return {"d_loss": d_loss, "g_loss": g_loss}

        def optimizer(self):
            return [Objective("d_loss", keras.optimizers.Adam(2e-4, beta_1=0.5), variables=[self.disc]),
                    Objective("g_loss", keras.optimizers.Adam(1e-3, beta_1=0.5), variables=[self.gen])]

    real, z = make_data(steps)
    data = DataFromList([[real[i:i + BATCH], z[i:i + BATCH]] for i in range(0, len(real), BATCH)], shuffle=False)
    stamps, d_losses = [], []

    def at_epoch_end(cb):
        stamps.append(time.perf_counter())
        d_losses.append(cb.trainer.last_step_outputs["d_loss"])

    trainer = SimpleTrainer()
    launch_train_with_config(TrainConfig(model=GAN(), dataflow=data, max_epoch=2, extra_callbacks=[], monitors=[],
                                         callbacks=[CallbackFactory(trigger_epoch=at_epoch_end)]), trainer)
    print(f"steps_per_call at the end: {trainer.last_call_steps}", file=sys.stderr)
    return steps / (stamps[1] - stamps[0]), d_losses[-1]


def run_kt_keras(steps):
    """KerasModel running the Keras model's own train_step (the same step keras.Model.fit runs)."""
    import tensorflow as tf
    from kerastrainer import CallbackFactory, KerasModel, SimpleTrainer
    model = keras_gan_model()
    km = KerasModel(model, trainer=SimpleTrainer())
    km.compile(*gan_optimizers())
    real, z = make_data(steps)
    data = tf.data.Dataset.from_tensor_slices((real, z)).batch(BATCH)
    stamps = []
    timer = CallbackFactory(trigger_epoch=lambda cb: stamps.append(time.perf_counter()))
    hist = km.fit(input=data, epochs=2, callbacks=[timer], extra_callbacks=[], monitors=[])
    return steps / (stamps[1] - stamps[0]), hist.history["d_loss"][-1]


def child(system, steps):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    kind = bfc_variant(system)
    if kind.startswith("keras_spe"):
        rate, loss = run_keras(int(kind[len("keras_spe"):]), steps)
    elif kind == "kt_keras_step":
        rate, loss = run_kt_keras(steps)
    else:
        rate, loss = run_kt(steps)
    print("RESULT " + json.dumps({"system": system, "steps_per_s": rate, "loss": float(loss)}))


def main():
    args = rate_bench_args(__doc__, "1,8,32")
    if args.child:
        child(args.child, args.steps)
        return
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    spes = args.spe.split(",")
    systems = [f"keras_spe{s}" for s in spes] + [f"keras_spe{s}_bfc" for s in spes] + ["kt_objectives", "kt_keras_step"]
    results = run_result_children(__file__, systems, args.repeats, ["--steps", str(args.steps)],
                                  lambda r: f"{r['steps_per_s']:8.1f} steps/s  d_loss {r['loss']:.5f}")
    print_rate_table(results, "keras", "final d_loss",
                     f"medians of {args.repeats} runs, {args.steps} steps of batch {BATCH}")

if __name__ == "__main__":
    main()
