"""keras-io's "Image segmentation with a U-Net-like architecture" (per-pixel softmax and
``sparse_categorical_crossentropy``, BatchNormalization, a ``keras.utils.Sequence`` of batches).

Origin: https://github.com/keras-team/keras-io/blob/master/examples/vision/oxford_pets_image_segmentation.py
(fchollet, created 2019/03/20).

Edits, each marked ``# EDIT``:
- the adoption: ``model.fit(...)`` -> ``KerasModel(model).fit(...)`` with the same arguments
  (``validation_data`` and the ``ModelCheckpoint`` callback), and ``predict`` through the same runner;
- for the test: generated images and trimaps (a bright square is class 1, its border class 2) held
  in arrays instead of the Oxford Pets files (``OxfordPets`` reads them instead of ``load_img``),
  ``img_size`` (16, 16), ``batch_size`` 8, 32 training and 16 validation images, 2 epochs (not
  (160, 160), 32, 6390, 1000, 15), ``shuffle=False`` and ``verbose=0``, the checkpoint written to
  ``workdir`` as ``.keras`` (Keras 3's format), ``import keras`` for ``tensorflow.keras``
  (``keras.utils.PyDataset`` for ``keras.utils.Sequence``), a seed; no displays or summary; a
  function returning what the test compares.
"""
import os

import keras
import numpy as np
from keras import layers

from kerastrainer.keras import KerasModel  # EDIT


def _fake_pets(n, img_size, seed):  # EDIT: instead of the images/ and annotations/trimaps/ files
    rng = np.random.RandomState(seed)
    h, w = img_size
    images = rng.randint(0, 120, (n, h, w, 3)).astype("uint8")
    trimaps = np.full((n, h, w), 2, "uint8")        # labels 1, 2, 3 as in the trimaps
    for i in range(n):
        r, c, s = rng.randint(2, h // 2), rng.randint(2, w // 2), rng.randint(3, h // 2)
        trimaps[i, r - 1:r + s + 1, c - 1:c + s + 1] = 3
        trimaps[i, r:r + s, c:c + s] = 1
        images[i, r:r + s, c:c + s] += 120
    return images, trimaps


class OxfordPets(keras.utils.PyDataset):  # EDIT: keras.utils.Sequence
    """Helper to iterate over the data (as Numpy arrays)."""

    def __init__(self, batch_size, img_size, input_imgs, target_imgs):  # EDIT: arrays, not paths
        super().__init__()  # EDIT: PyDataset's constructor
        self.batch_size = batch_size
        self.img_size = img_size
        self.input_imgs = input_imgs
        self.target_imgs = target_imgs

    def __len__(self):
        return len(self.target_imgs) // self.batch_size

    def __getitem__(self, idx):
        """Returns tuple (input, target) correspond to batch #idx."""
        i = idx * self.batch_size
        batch_input_imgs = self.input_imgs[i: i + self.batch_size]
        batch_target_imgs = self.target_imgs[i: i + self.batch_size]
        x = np.zeros((self.batch_size,) + self.img_size + (3,), dtype="float32")
        for j, img in enumerate(batch_input_imgs):
            x[j] = img
        y = np.zeros((self.batch_size,) + self.img_size + (1,), dtype="uint8")
        for j, img in enumerate(batch_target_imgs):
            y[j] = np.expand_dims(img, 2)
            # Ground truth labels are 1, 2, 3. Subtract one to make them 0, 1, 2:
            y[j] -= 1
        return x, y


def get_model(img_size, num_classes):
    inputs = keras.Input(shape=img_size + (3,))

    ### [First half of the network: downsampling inputs] ###

    # Entry block
    x = layers.Conv2D(32, 3, strides=2, padding="same")(inputs)
    x = layers.BatchNormalization()(x)
    x = layers.Activation("relu")(x)

    previous_block_activation = x  # Set aside residual

    # Blocks 1, 2, 3 are identical apart from the feature depth.
    for filters in [64, 128, 256]:
        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.SeparableConv2D(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.MaxPooling2D(3, strides=2, padding="same")(x)

        # Project residual
        residual = layers.Conv2D(filters, 1, strides=2, padding="same")(previous_block_activation)
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    ### [Second half of the network: upsampling inputs] ###

    for filters in [256, 128, 64, 32]:
        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.Activation("relu")(x)
        x = layers.Conv2DTranspose(filters, 3, padding="same")(x)
        x = layers.BatchNormalization()(x)

        x = layers.UpSampling2D(2)(x)

        # Project residual
        residual = layers.UpSampling2D(2)(previous_block_activation)
        residual = layers.Conv2D(filters, 1, padding="same")(residual)
        x = layers.add([x, residual])  # Add back residual
        previous_block_activation = x  # Set aside next residual

    # Add a per-pixel classification layer
    outputs = layers.Conv2D(num_classes, 3, activation="softmax", padding="same")(x)

    # Define the model
    model = keras.Model(inputs, outputs)
    return model


def program(use_kerastrainer: bool, workdir: str):  # EDIT: a function
    img_size = (16, 16)  # EDIT: (160, 160)
    num_classes = 3
    batch_size = 8  # EDIT: 32

    # Free up RAM in case the model definition cells were run multiple times
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)  # EDIT: the same seed for both runs

    # Build model
    model = get_model(img_size, num_classes)

    images, trimaps = _fake_pets(48, img_size, 1)  # EDIT: instead of the sorted, shuffled paths
    val_samples = 16  # EDIT: 1000
    train_imgs, train_targets = images[:-val_samples], trimaps[:-val_samples]
    val_imgs, val_targets = images[-val_samples:], trimaps[-val_samples:]

    # Instantiate data Sequences for each split
    train_gen = OxfordPets(batch_size, img_size, train_imgs, train_targets)
    val_gen = OxfordPets(batch_size, img_size, val_imgs, val_targets)

    # Configure the model for training.
    # We use the "sparse" version of categorical_crossentropy
    # because our target data is integers.
    model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy")

    callbacks = [
        keras.callbacks.ModelCheckpoint(os.path.join(workdir, "oxford_segmentation.keras"),  # EDIT
                                        save_best_only=True)
    ]

    initial = [w.numpy() for w in model.weights]  # EDIT: for the test
    runner = KerasModel(model) if use_kerastrainer else model  # EDIT: the adoption
    # Train the model, doing validation at the end of each epoch.
    epochs = 2  # EDIT: 15
    history = runner.fit(train_gen, epochs=epochs, validation_data=val_gen, callbacks=callbacks,
                         shuffle=False, verbose=0)  # EDIT

    # Generate predictions for all images in the validation set
    val_gen = OxfordPets(batch_size, img_size, val_imgs, val_targets)
    val_preds = runner.predict(val_gen, verbose=0)  # EDIT: verbose
    return dict(model=model, initial=initial, history=history.history, predict=val_preds)
