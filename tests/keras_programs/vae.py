"""keras-io's "Variational AutoEncoder" (a Model subclass with its own ``train_step`` and metric trackers).

Origin: https://github.com/keras-team/keras-io/blob/master/examples/generative/vae.py
(fchollet, created 2020/05/03; the Keras 3 version: ``keras.ops``, a ``SeedGenerator(1337)`` in
``Sampling``).

Edits, each marked ``# EDIT``:
- the adoption: ``vae.fit(...)`` -> ``KerasModel(vae).fit(...)`` with the same arguments;
- for the test: 96 generated 28x28 "digits" (``fake_digits``) instead of the MNIST download, batch 32
  (not 128), 2 epochs (not 30), ``shuffle=False`` and ``verbose=0``, a seed and ``clear_session``,
  no summaries or plots; the program is a function returning what the test compares.
"""
import keras
import numpy as np
import tensorflow as tf
from keras import layers, ops

from kerastrainer.keras import KerasModel  # EDIT

from keras_programs.fake_mnist import fake_digits  # EDIT


class Sampling(layers.Layer):
    """Uses (z_mean, z_log_var) to sample z, the vector encoding a digit."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = keras.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = keras.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class VAE(keras.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = keras.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = keras.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = keras.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [
            self.total_loss_tracker,
            self.reconstruction_loss_tracker,
            self.kl_loss_tracker,
        ]

    def train_step(self, data):
        with tf.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = ops.mean(
                ops.sum(
                    keras.losses.binary_crossentropy(data, reconstruction),
                    axis=(1, 2),
                )
            )
            kl_loss = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            kl_loss = ops.mean(ops.sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {
            "loss": self.total_loss_tracker.result(),
            "reconstruction_loss": self.reconstruction_loss_tracker.result(),
            "kl_loss": self.kl_loss_tracker.result(),
        }


def program(use_kerastrainer: bool):  # EDIT: a function
    keras.backend.clear_session()  # EDIT
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs
    latent_dim = 2

    encoder_inputs = keras.Input(shape=(28, 28, 1))
    x = layers.Conv2D(32, 3, activation="relu", strides=2, padding="same")(encoder_inputs)
    x = layers.Conv2D(64, 3, activation="relu", strides=2, padding="same")(x)
    x = layers.Flatten()(x)
    x = layers.Dense(16, activation="relu")(x)
    z_mean = layers.Dense(latent_dim, name="z_mean")(x)
    z_log_var = layers.Dense(latent_dim, name="z_log_var")(x)
    z = Sampling()([z_mean, z_log_var])
    encoder = keras.Model(encoder_inputs, [z_mean, z_log_var, z], name="encoder")

    latent_inputs = keras.Input(shape=(latent_dim,))
    x = layers.Dense(7 * 7 * 64, activation="relu")(latent_inputs)
    x = layers.Reshape((7, 7, 64))(x)
    x = layers.Conv2DTranspose(64, 3, activation="relu", strides=2, padding="same")(x)
    x = layers.Conv2DTranspose(32, 3, activation="relu", strides=2, padding="same")(x)
    decoder_outputs = layers.Conv2DTranspose(1, 3, activation="sigmoid", padding="same")(x)
    decoder = keras.Model(latent_inputs, decoder_outputs, name="decoder")

    (x_train, _), (x_test, _) = fake_digits(64, 1), fake_digits(32, 2)  # EDIT: no download
    mnist_digits = np.concatenate([x_train, x_test], axis=0)
    mnist_digits = np.expand_dims(mnist_digits, -1).astype("float32") / 255

    vae = VAE(encoder, decoder)
    vae.compile(optimizer=keras.optimizers.Adam())
    initial = [w.numpy() for w in vae.weights]  # EDIT: for the test
    fit = KerasModel(vae).fit if use_kerastrainer else vae.fit  # EDIT: the adoption
    history = fit(mnist_digits, epochs=2, batch_size=32, shuffle=False, verbose=0)  # EDIT: 2 epochs, 32
    # EDIT: what the test compares (the plots read vae.encoder.predict)
    z_mean, _, _ = vae.encoder.predict(mnist_digits[:8], verbose=0)
    return dict(model=vae, initial=initial, history=history.history, predict=z_mean)
