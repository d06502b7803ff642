"""A Keras model that defines its own step, trained by KerasModel: the override is what trains.

The five programs of keras-io's guide "Customizing what happens in fit() with TensorFlow"
(keras-team/keras-io, guides/custom_train_step_in_tensorflow.py, by fchollet), ported as test
clients. Edits a Keras user makes to train with kerastrainer, and the test's own:
- `model.compile(...)` -> `km = KerasModel(model); km.compile(...)` (the same arguments, passed to
  the model's own compile, custom signatures included);
- `model.fit(x, y, epochs=n)` -> `km.fit(input=(x, y), epochs=n, batch_size=32)`;
  `model.evaluate(x, y)` -> `km.evaluate((x, y))`;
- program 3: `fit(x, y, sample_weight=sw)` -> a `tf.data.Dataset` of `(x, y, sw)` batches (the
  same data `train_step` receives under Keras);
- program 5: random 28x28 images instead of MNIST (no download), 12 batches of 16;
- the test's own: `keras.utils.set_random_seed(0)` before each model, `shuffle=False`, fewer
  epochs, and the same program run with `keras.Model.fit` to compare the History.

And keras-io's WGAN-GP (examples/generative/wgan_gp.py, by A_K_Nain): a critic trained 3 times per
generator step, a gradient penalty from an inner GradientTape, BatchNorm and Dropout, and a Keras
callback reading `self.model.generator`. Edits: `from tensorflow import keras` -> `import keras`
(Keras 3), Fashion-MNIST -> 64 random images (no download), `BATCH_SIZE` 16, 1 epoch, narrower
convolutions (the test's time), `wgan.compile(...)` / `wgan.fit(train_images, ...)` ->
`km = KerasModel(wgan); km.compile(...)` / `km.fit(input=train_images, ...)`, the callback writes
into the test's directory. Its noise is unseeded (`tf.random.normal`), so its losses are compared
with fit's only for being finite; what it updates is checked exactly.
"""
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import layers

from _devices import cpus
from kerastrainer import KerasModel, ModelSaver, SimpleTrainer, SyncMultiGPUTrainerReplicated
from kerastrainer.tfutils.varmanip import load_chkpt_vars
from kerastrainer.utils import logger


# --- program 1: train_step with compute_loss and compile's metrics ------------------------------
class CustomModel1(keras.Model):
    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


# --- program 2: lower level, its own loss and metrics; compile gives the optimizer only ---------
class CustomModel2(keras.Model):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.loss_tracker = keras.metrics.Mean(name="loss")
        self.mae_metric = keras.metrics.MeanAbsoluteError(name="mae")
        self.loss_fn = keras.losses.MeanSquaredError()

    def train_step(self, data):
        x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.loss_fn(y, y_pred)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        self.loss_tracker.update_state(loss)
        self.mae_metric.update_state(y, y_pred)
        return {"loss": self.loss_tracker.result(), "mae": self.mae_metric.result()}

    @property
    def metrics(self):
        return [self.loss_tracker, self.mae_metric]


# --- program 3: sample weights --------------------------------------------------------------------
class CustomModel3(keras.Model):
    def train_step(self, data):
        if len(data) == 3:
            x, y, sample_weight = data
        else:
            sample_weight = None
            x, y = data
        with tf.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(y=y, y_pred=y_pred, sample_weight=sample_weight)
        trainable_vars = self.trainable_variables
        gradients = tape.gradient(loss, trainable_vars)
        self.optimizer.apply(gradients, trainable_vars)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred, sample_weight=sample_weight)
        return {m.name: m.result() for m in self.metrics}


# --- program 4: its own evaluation step ------------------------------------------------------------
class CustomModel4(keras.Model):
    def test_step(self, data):
        x, y = data
        y_pred = self(x, training=False)
        loss = self.compute_loss(y=y, y_pred=y_pred)
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


# --- program 5: a GAN with its own compile signature and two optimizers -------------------------
latent_dim = 128


def make_gan_parts():
    discriminator = keras.Sequential([
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(64, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(128, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.GlobalMaxPooling2D(),
        layers.Dense(1),
    ], name="discriminator")
    generator = keras.Sequential([
        keras.Input(shape=(latent_dim,)),
        layers.Dense(7 * 7 * 128),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Reshape((7, 7, 128)),
        layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
    ], name="generator")
    return discriminator, generator


class GAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_loss_tracker = keras.metrics.Mean(name="d_loss")
        self.g_loss_tracker = keras.metrics.Mean(name="g_loss")
        self.seed_generator = keras.random.SeedGenerator(1337)

    @property
    def metrics(self):
        return [self.d_loss_tracker, self.g_loss_tracker]

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn

    def train_step(self, real_images):
        if isinstance(real_images, tuple):
            real_images = real_images[0]
        batch_size = tf.shape(real_images)[0]
        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        generated_images = self.generator(random_latent_vectors)
        combined_images = tf.concat([generated_images, real_images], axis=0)
        labels = tf.concat([tf.ones((batch_size, 1)), tf.zeros((batch_size, 1))], axis=0)
        labels += 0.05 * keras.random.uniform(tf.shape(labels), seed=self.seed_generator)
        with tf.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply(grads, self.discriminator.trainable_weights)
        random_latent_vectors = keras.random.normal(shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        misleading_labels = tf.zeros((batch_size, 1))
        with tf.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply(grads, self.generator.trainable_weights)
        self.d_loss_tracker.update_state(d_loss)
        self.g_loss_tracker.update_state(g_loss)
        return {"d_loss": self.d_loss_tracker.result(), "g_loss": self.g_loss_tracker.result()}


# --- the test's side ------------------------------------------------------------------------------
def _dense_model(cls):
    keras.utils.set_random_seed(0)
    inputs = keras.Input(shape=(32,))
    outputs = keras.layers.Dense(1)(inputs)
    return cls(inputs, outputs)


def _xy(n=320):
    rng = np.random.RandomState(0)
    return rng.random_sample((n, 32)).astype("float32"), rng.random_sample((n, 1)).astype("float32")


def _same_history(ours, keras_fit, rtol=1e-5):
    # KerasModel's History also holds the learning rate of each epoch
    assert sorted(set(ours.history) - {"learning_rate"}) == sorted(keras_fit.history)
    for k in keras_fit.history:
        np.testing.assert_allclose(ours.history[k], keras_fit.history[k], rtol=rtol, atol=1e-6, err_msg=k)


def _quiet(**kw):
    return dict(callbacks=[], extra_callbacks=[], monitors=[], **kw)


@pytest.mark.parametrize("steps_per_call", [1, 4])
def test_program_1_compute_loss_and_compiled_metrics_give_fits_history(steps_per_call):
    x, y = _xy()
    ref = _dense_model(CustomModel1)
    ref.compile(optimizer="adam", loss="mse", metrics=["mae"])
    expected = ref.fit(x, y, epochs=3, batch_size=32, shuffle=False, verbose=0)
    model = _dense_model(CustomModel1)
    km = KerasModel(model, trainer=SimpleTrainer(steps_per_call=steps_per_call))
    km.compile(optimizer="adam", loss="mse", metrics=["mae"])
    got = km.fit(input=(x, y), epochs=3, batch_size=32, shuffle=False, **_quiet())
    _same_history(got, expected)
    # the user's model is trained, plain Keras again, and its optimizer kept its state
    np.testing.assert_allclose(model.predict(x[:4], verbose=0), ref.predict(x[:4], verbose=0), rtol=1e-5, atol=1e-6)
    assert int(model.optimizer.iterations.numpy()) == 30


def test_program_2_its_own_loss_and_metrics_with_compile_giving_the_optimizer_only():
    x, y = _xy()
    ref = _dense_model(CustomModel2)
    ref.compile(optimizer="adam")
    expected = ref.fit(x, y, epochs=3, batch_size=32, shuffle=False, verbose=0)
    km = KerasModel(_dense_model(CustomModel2))
    km.compile(optimizer="adam")
    got = km.fit(input=(x, y), epochs=3, batch_size=32, shuffle=False, **_quiet())
    _same_history(got, expected)


def test_program_3_sample_weights_reach_the_step():
    x, y = _xy()
    sw = np.random.RandomState(1).random_sample((len(x), 1)).astype("float32")
    ds = tf.data.Dataset.from_tensor_slices((x, y, sw)).batch(32)
    ref = _dense_model(CustomModel3)
    ref.compile(optimizer="adam", loss="mse", metrics=["mae"])
    expected = ref.fit(ds, epochs=2, verbose=0)
    km = KerasModel(_dense_model(CustomModel3))
    km.compile(optimizer="adam", loss="mse", metrics=["mae"])
    got = km.fit(input=ds, epochs=2, **_quiet())
    _same_history(got, expected)


def test_program_4_evaluate_runs_the_models_test_step():
    x, y = _xy()
    ref = _dense_model(CustomModel4)
    ref.compile(loss="mse", metrics=["mae"])
    expected = ref.evaluate(x, y, verbose=0, return_dict=True)
    km = KerasModel(_dense_model(CustomModel4))
    km.compile(loss="mse", metrics=["mae"])
    got = km.evaluate((x, y), return_dict=True)
    assert got == pytest.approx(expected, rel=1e-6)


def _gan(seed=0):
    keras.utils.set_random_seed(seed)
    discriminator, generator = make_gan_parts()
    return GAN(discriminator=discriminator, generator=generator, latent_dim=latent_dim)


def _gan_compile_args():
    return dict(d_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
                g_optimizer=keras.optimizers.Adam(learning_rate=0.0003),
                loss_fn=keras.losses.BinaryCrossentropy(from_logits=True))


def _images(n=192):
    return np.random.RandomState(0).random_sample((n, 28, 28, 1)).astype("float32")


@pytest.mark.slow
def test_program_5_gan_with_its_own_compile_trains_both_optimizers_as_fit_does(logdir):
    dataset = tf.data.Dataset.from_tensor_slices(_images()).batch(16)
    ref = _gan()
    ref.compile(**_gan_compile_args())
    expected = ref.fit(dataset, epochs=1, verbose=0)
    gan = _gan()
    km = KerasModel(gan, trainer=SimpleTrainer(steps_per_call=3))
    km.compile(**_gan_compile_args())
    logger.set_logger_dir(logdir)
    got = km.fit(input=dataset, epochs=1, callbacks=[ModelSaver()], extra_callbacks=[], monitors=[])
    _same_history(got, expected, rtol=1e-4)
    assert int(gan.d_optimizer.iterations.numpy()) == int(gan.g_optimizer.iterations.numpy()) == 12
    # both optimizers in the checkpoint, under their attribute names
    keys = set(load_chkpt_vars(tf.train.latest_checkpoint(logdir)))
    assert {"optimizer/d_optimizer/iteration", "optimizer/g_optimizer/iteration"} <= keys, sorted(keys)


def _in_a_process_of_its_own(code: str):
    """Run ``code`` (which prints ``RESULT<json>``) in a new Python process in this directory and return
    the JSON: keras.Model.fit under a MirroredStrategy runs there, its collective ops' keys would collide
    with those of later strategies in this one."""
    import json
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    code = "import conftest; conftest._configure_tf()\n" + code
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=here,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
    line = [ln for ln in r.stdout.splitlines() if ln.startswith("RESULT")]
    assert r.returncode == 0 and line, r.stderr[-3000:]
    return json.loads(line[0][len("RESULT"):])


def test_two_replicas_train_as_keras_fit_under_a_mirrored_strategy():
    # the same step, the same global batches: Keras's optimizer sums the replicas' gradients and its
    # compute_loss divides by the replicas, so the weights are one device's; the loss the step tracks
    # itself is the scaled one, under keras.Model.fit alike
    code = ("import json, tensorflow as tf\n"
            "from _devices import cpus; from test_keras_own_step import CustomModel1, _dense_model, _xy\n"
            "x, y = _xy()\n"
            "with tf.distribute.MirroredStrategy(cpus(2)).scope():\n"
            "    ref = _dense_model(CustomModel1); ref.compile(optimizer='adam', loss='mse', metrics=['mae'])\n"
            "print('RESULT' + json.dumps(ref.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0).history))")
    history = _in_a_process_of_its_own(code)
    expected = keras.callbacks.History()
    expected.history = history
    x, y = _xy()
    model = _dense_model(CustomModel1)
    km = KerasModel(model, trainer=SyncMultiGPUTrainerReplicated(cpus(2), steps_per_call=4))
    km.compile(optimizer="adam", loss="mse", metrics=["mae"])
    got = km.fit(input=(x, y), epochs=2, batch_size=32, shuffle=False, **_quiet())
    _same_history(got, expected)
    single = _dense_model(CustomModel1)
    single.compile(optimizer="adam", loss="mse", metrics=["mae"])
    single.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0)
    for a, b in zip(model.weights, single.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_a_gan_on_two_replicas_trains():
    km = KerasModel(_gan(), trainer=SyncMultiGPUTrainerReplicated(cpus(2)))
    km.compile(**_gan_compile_args())
    got = km.fit(input=tf.data.Dataset.from_tensor_slices(_images(96)).batch(16), epochs=1, **_quiet())
    assert np.isfinite(got.history["d_loss"]).all() and np.isfinite(got.history["g_loss"]).all()


def test_what_cannot_be_honoured_is_an_error():
    x, y = _xy(64)
    km = KerasModel(_dense_model(CustomModel1))
    with pytest.raises(RuntimeError, match=r"runs its own train_step: call KerasModel.compile"):
        km.fit(input=(x, y), epochs=1, **_quiet())


@pytest.mark.parametrize("freq", [1, 2])
def test_validation_data_runs_the_models_test_step_as_fit(freq):
    x, y = _xy(96)
    xv, yv = _xy(40)
    ref = _dense_model(CustomModel1)
    ref.compile(optimizer="adam", loss="mse", metrics=["mae"])
    expected = ref.fit(x, y, epochs=2, batch_size=32, shuffle=False, validation_data=(xv, yv),
                       validation_batch_size=16, validation_freq=freq, verbose=0)
    model = _dense_model(CustomModel1)
    km = KerasModel(model)
    km.compile(optimizer="adam", loss="mse", metrics=["mae"])
    seen = []
    probe = keras.callbacks.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(sorted(logs)))
    got = km.fit(x, y, epochs=2, batch_size=32, shuffle=False, validation_data=(xv, yv), validation_batch_size=16,
                 validation_freq=freq, callbacks=[probe], extra_callbacks=[], monitors=[])
    assert "val_loss" in expected.history and "val_mae" in expected.history
    _same_history(got, expected)
    assert ("val_loss" in seen[-1]) and (("val_loss" in seen[0]) == (freq == 1))
    # after fit the model is plain Keras again: its own evaluate reads the trained weights
    np.testing.assert_allclose(km.evaluate((xv, yv), return_dict=True)["loss"],
                               ref.evaluate(xv, yv, verbose=0, return_dict=True)["loss"], rtol=1e-5)


def test_an_uneven_split_over_two_replicas_trains_and_logs_as_one_device():
    # batches of 7 split 4 + 3 (the last, of 5: 3 + 2): each replica's Keras loss is scaled by its
    # share of the batch, so the weights and every logged mean are one device's
    x, y = _xy(40)
    ref = _dense_model(HalfLoss)
    ref.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    expected = ref.fit(x, y, epochs=2, batch_size=7, shuffle=False, verbose=0)
    model = _dense_model(HalfLoss)
    km = KerasModel(model, trainer=SyncMultiGPUTrainerReplicated(cpus(2)))
    km.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    got = km.fit(x, y, epochs=2, batch_size=7, shuffle=False, **_quiet())
    _same_history(got, expected)
    for a, b in zip(model.weights, ref.weights):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)


class HalfLoss(keras.Model):
    """Overrides compute_loss only: Keras's own train_step calls it."""

    def compute_loss(self, x=None, y=None, y_pred=None, sample_weight=None, training=True):
        return 0.5 * super().compute_loss(x, y, y_pred, sample_weight, training)


def test_an_overridden_compute_loss_is_what_trains():
    # KerasModel's own step would have used compile()'s loss alone: the model's compute_loss halves it
    x, y = _xy()
    ref = _dense_model(HalfLoss)
    ref.compile(optimizer="sgd", loss="mse")
    expected = ref.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0)
    km = KerasModel(_dense_model(HalfLoss))
    km.compile(optimizer="sgd", loss="mse")
    got = km.fit(input=(x, y), epochs=2, batch_size=32, shuffle=False, **_quiet())
    _same_history(got, expected)


# --- keras-io's WGAN-GP --------------------------------------------------------------------------
IMG_SHAPE = (28, 28, 1)
noise_dim = 128


def conv_block(x, filters, activation, kernel_size=(3, 3), strides=(1, 1), padding="same", use_bias=True,
               use_bn=False, use_dropout=False, drop_value=0.5):
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding=padding, use_bias=use_bias)(x)
    if use_bn:
        x = layers.BatchNormalization()(x)
    x = activation(x)
    if use_dropout:
        x = layers.Dropout(drop_value)(x)
    return x


def get_discriminator_model():
    img_input = layers.Input(shape=IMG_SHAPE)
    x = layers.ZeroPadding2D((2, 2))(img_input)
    x = conv_block(x, 16, kernel_size=(5, 5), strides=(2, 2), use_bn=False, use_bias=True,
                   activation=layers.LeakyReLU(0.2), use_dropout=False, drop_value=0.3)
    x = conv_block(x, 32, kernel_size=(5, 5), strides=(2, 2), use_bn=False, activation=layers.LeakyReLU(0.2),
                   use_bias=True, use_dropout=True, drop_value=0.3)
    x = layers.Flatten()(x)
    x = layers.Dropout(0.2)(x)
    x = layers.Dense(1)(x)
    return keras.models.Model(img_input, x, name="discriminator")


def upsample_block(x, filters, activation, kernel_size=(3, 3), strides=(1, 1), up_size=(2, 2), padding="same",
                   use_bn=False, use_bias=True, use_dropout=False, drop_value=0.3):
    x = layers.UpSampling2D(up_size)(x)
    x = layers.Conv2D(filters, kernel_size, strides=strides, padding=padding, use_bias=use_bias)(x)
    if use_bn:
        x = layers.BatchNormalization()(x)
    if activation:
        x = activation(x)
    if use_dropout:
        x = layers.Dropout(drop_value)(x)
    return x


def get_generator_model():
    noise = layers.Input(shape=(noise_dim,))
    x = layers.Dense(4 * 4 * 32, use_bias=False)(noise)
    x = layers.BatchNormalization()(x)
    x = layers.LeakyReLU(0.2)(x)
    x = layers.Reshape((4, 4, 32))(x)
    x = upsample_block(x, 16, layers.LeakyReLU(0.2), strides=(1, 1), use_bias=False, use_bn=True, padding="same",
                       use_dropout=False)
    x = upsample_block(x, 16, layers.LeakyReLU(0.2), strides=(1, 1), use_bias=False, use_bn=True, padding="same",
                       use_dropout=False)
    x = upsample_block(x, 1, layers.Activation("tanh"), strides=(1, 1), use_bias=False, use_bn=True)
    x = layers.Cropping2D((2, 2))(x)
    return keras.models.Model(noise, x, name="generator")


class WGAN(keras.Model):
    def __init__(self, discriminator, generator, latent_dim, discriminator_extra_steps=3, gp_weight=10.0):
        super(WGAN, self).__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.d_steps = discriminator_extra_steps
        self.gp_weight = gp_weight

    def compile(self, d_optimizer, g_optimizer, d_loss_fn, g_loss_fn):
        super(WGAN, self).compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.d_loss_fn = d_loss_fn
        self.g_loss_fn = g_loss_fn

    def gradient_penalty(self, batch_size, real_images, fake_images):
        alpha = tf.random.normal([batch_size, 1, 1, 1], 0.0, 1.0)
        diff = fake_images - real_images
        interpolated = real_images + alpha * diff
        with tf.GradientTape() as gp_tape:
            gp_tape.watch(interpolated)
            pred = self.discriminator(interpolated, training=True)
        grads = gp_tape.gradient(pred, [interpolated])[0]
        norm = tf.sqrt(tf.reduce_sum(tf.square(grads), axis=[1, 2, 3]))
        gp = tf.reduce_mean((norm - 1.0) ** 2)
        return gp

    def train_step(self, real_images):
        if isinstance(real_images, tuple):
            real_images = real_images[0]
        batch_size = tf.shape(real_images)[0]
        for i in range(self.d_steps):
            random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))
            with tf.GradientTape() as tape:
                fake_images = self.generator(random_latent_vectors, training=True)
                fake_logits = self.discriminator(fake_images, training=True)
                real_logits = self.discriminator(real_images, training=True)
                d_cost = self.d_loss_fn(real_img=real_logits, fake_img=fake_logits)
                gp = self.gradient_penalty(batch_size, real_images, fake_images)
                d_loss = d_cost + gp * self.gp_weight
            d_gradient = tape.gradient(d_loss, self.discriminator.trainable_variables)
            self.d_optimizer.apply_gradients(zip(d_gradient, self.discriminator.trainable_variables))
        random_latent_vectors = tf.random.normal(shape=(batch_size, self.latent_dim))
        with tf.GradientTape() as tape:
            generated_images = self.generator(random_latent_vectors, training=True)
            gen_img_logits = self.discriminator(generated_images, training=True)
            g_loss = self.g_loss_fn(gen_img_logits)
        gen_gradient = tape.gradient(g_loss, self.generator.trainable_variables)
        self.g_optimizer.apply_gradients(zip(gen_gradient, self.generator.trainable_variables))
        return {"d_loss": d_loss, "g_loss": g_loss}


class GANMonitor(keras.callbacks.Callback):
    def __init__(self, num_img=6, latent_dim=128, out_dir="."):
        self.num_img = num_img
        self.latent_dim = latent_dim
        self.out_dir = out_dir

    def on_epoch_end(self, epoch, logs=None):
        random_latent_vectors = tf.random.normal(shape=(self.num_img, self.latent_dim))
        generated_images = self.model.generator(random_latent_vectors)
        generated_images = (generated_images * 127.5) + 127.5
        for i in range(self.num_img):
            img = generated_images[i].numpy()
            img = keras.preprocessing.image.array_to_img(img)
            img.save(f"{self.out_dir}/generated_img_{i}_{epoch}.png")


def discriminator_loss(real_img, fake_img):
    real_loss = tf.reduce_mean(real_img)
    fake_loss = tf.reduce_mean(fake_img)
    return fake_loss - real_loss


def generator_loss(fake_img):
    return -tf.reduce_mean(fake_img)


@pytest.mark.slow
def test_keras_io_wgan_gp_trains_its_critic_three_times_a_step(tmp_path):
    train_images = np.random.RandomState(0).uniform(-1, 1, (64,) + IMG_SHAPE).astype("float32")
    keras.utils.set_random_seed(0)
    wgan = WGAN(discriminator=get_discriminator_model(), generator=get_generator_model(), latent_dim=noise_dim,
                discriminator_extra_steps=3)
    critic_before = [w.numpy().copy() for w in wgan.discriminator.trainable_weights]
    km = KerasModel(wgan, trainer=SimpleTrainer(steps_per_call=2))
    km.compile(d_optimizer=keras.optimizers.Adam(learning_rate=0.0002, beta_1=0.5, beta_2=0.9),
               g_optimizer=keras.optimizers.Adam(learning_rate=0.0002, beta_1=0.5, beta_2=0.9),
               g_loss_fn=generator_loss, d_loss_fn=discriminator_loss)
    hist = km.fit(input=train_images, batch_size=16, epochs=1,
                  callbacks=[GANMonitor(num_img=2, latent_dim=noise_dim, out_dir=str(tmp_path))],
                  extra_callbacks=[], monitors=[])
    assert int(wgan.d_optimizer.iterations.numpy()) == 3 * 4 and int(wgan.g_optimizer.iterations.numpy()) == 4
    assert np.isfinite(hist.history["d_loss"]).all() and np.isfinite(hist.history["g_loss"]).all()
    assert any(not np.array_equal(a, b.numpy()) for a, b in zip(critic_before, wgan.discriminator.trainable_weights))
    assert sorted(os.listdir(tmp_path)) == ["generated_img_0_0.png", "generated_img_1_0.png"]


@pytest.mark.slow
def test_two_workers_run_the_models_own_step_on_their_shards(tmp_path):
    # kerastrainer-run -np 2: each worker reads every 2nd sample (16 of each global batch of 32); the
    # step's optimizer sums both workers' gradients of the loss compute_loss divides by 2: the
    # weights are those of one process training on the whole global batches
    import subprocess
    import sys
    here = os.path.dirname(os.path.abspath(__file__))
    path = [os.path.dirname(here)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONPATH=os.pathsep.join(path))
    r = subprocess.run([sys.executable, "-m", "kerastrainer.run", "-np", "2", "--grace", "5", sys.executable,
                        os.path.join(here, "_keras_own_step_worker.py"), str(tmp_path)],
                       capture_output=True, text=True, timeout=300, env=env, start_new_session=True)
    assert r.returncode == 0 and "WORKER-DONE 0" in r.stdout and "WORKER-DONE 1" in r.stdout, \
        r.stdout[-3000:] + r.stderr[-3000:]
    x, y = _xy()
    single = _dense_model(CustomModel1)
    single.compile(optimizer="adam", loss="mse", metrics=["mae"])
    single.fit(x, y, epochs=2, batch_size=32, shuffle=False, verbose=0)
    for rank in (0, 1):
        with np.load(tmp_path / f"final-{rank}.npz") as z:
            got = [z[f"arr_{i}"] for i in range(len(z.files))]
        for a, b in zip(got, single.weights):
            np.testing.assert_allclose(a, b.numpy(), rtol=1e-5, atol=1e-6)


# --- a model with its own step whose layers add losses and hold metrics (keras-io's endpoint layer) -------
class EndpointLayer(layers.Layer):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.acc = keras.metrics.BinaryAccuracy(name="endpoint_acc")

    def call(self, targets, logits):
        self.add_loss(keras.losses.BinaryCrossentropy(from_logits=True)(targets, logits))
        self.acc.update_state(targets, keras.ops.sigmoid(logits))
        return keras.ops.sigmoid(logits)


class EndpointOwnStepModel(keras.Model):
    def train_step(self, data):
        return super().train_step(data)


def _endpoint_model():
    x, t = keras.Input((4,), name="x"), keras.Input((1,), name="t")
    return EndpointOwnStepModel([x, t], EndpointLayer()(t, keras.layers.Dense(1)(x)))


@pytest.mark.parametrize("replicas", [1, 2])
def test_an_own_step_reading_add_loss_losses_of_its_layers_trains_as_fit(replicas, tmp_path):
    """compute_loss reads the model's add_loss losses; in the tower the model is not the outermost call,
    so Keras does not clear those of the earlier trace (another graph): 'out of scope' before. On two
    replicas the weights are one device's: the layer's Keras loss is divided over the replicas once
    (Keras 3.15's fit under a MirroredStrategy divides it twice, half the loss and the gradient)."""
    rng = np.random.RandomState(0)
    x, t = rng.randn(32, 4).astype("float32"), (rng.rand(32, 1) > 0.5).astype("float32")
    keras.utils.set_random_seed(0)
    model = _endpoint_model()
    ref = _endpoint_model()
    ref.set_weights(model.get_weights())
    ref.compile(keras.optimizers.SGD(0.1))
    want = ref.fit({"x": x, "t": t}, batch_size=8, epochs=2, shuffle=False, verbose=0).history
    want_weights = ref.get_weights()
    km = KerasModel(model, trainer=SimpleTrainer() if replicas == 1 else SyncMultiGPUTrainerReplicated(cpus(2)))
    km.compile(keras.optimizers.SGD(0.1))
    h = km.fit({"x": x, "t": t}, batch_size=8, epochs=2, shuffle=False, verbose=0, extra_callbacks=[], monitors=[])
    for key in ("loss", "endpoint_acc"):
        np.testing.assert_allclose(h.history[key], want[key], atol=1e-5, err_msg=key)
    for u, v in zip(want_weights, model.get_weights()):
        np.testing.assert_allclose(np.asarray(u), v, atol=1e-5)
