#!/usr/bin/env python
"""TFLMS's Keras callback form of the MNIST tutorial, ported to Keras 3 and kerastrainer.

Origin: IBM/tensorflow-large-model-support, examples/mnist_cnn_keras.py (commit 1e8951e),
the Keras-callback version of IBM's TFLMS Tutorial 01 MNIST example ("LMS( ) is the
Keras callback ... the auto tuning will determine that TFLMS is not needed"), itself based on
keras 2.2.4's examples/mnist_cnn.py. Edits, each forced by Keras 3 / TF2 or by testing
without downloads:

1. Imports: ``tensorflow.python.keras`` (private in TF2) -> ``keras``;
   ``from tensorflow_large_model_support import LMS`` -> ``from kerastrainer.lms import LMS``;
   ``tf.logging.set_verbosity`` dropped (TF2 has no ``tf.logging``).
2. Data: ``mnist.load_data()`` downloads; ``synthetic_mnist`` makes MNIST-shaped uint8 images
   whose label a rule on the pixels decides.
3. ``keras.optimizers.Adadelta()`` -> ``Adadelta(learning_rate=1.0)``: Keras 3 changed the
   default learning rate from 1.0 to 0.001; 1.0 keeps the program's update rule.
4. The module body is wrapped in ``main(argv)`` with ``--batch_size``, ``--epochs``,
   ``--samples``, ``--swapout_threshold``, ``--swapin_ahead``, ``--swapin_groupby`` (defaults: the
   program's values; the sample count is smaller) and ``--no-lms``, so that the tests can run it
   in-process; it returns the model, the history and the callback.
"""
from __future__ import print_function
import argparse
import sys

import numpy as np
import tensorflow as tf
import keras
from keras.models import Sequential
from keras.layers import Dense, Dropout, Flatten
from keras.layers import Conv2D, MaxPooling2D
from keras import backend as K

from kerastrainer.lms import LMS


def synthetic_mnist(n, seed):
    rng = np.random.RandomState(seed)
    x = (rng.rand(n, 28, 28) * 128).astype('uint8')
    y = rng.randint(0, 10, size=n).astype('uint8')
    for i, c in enumerate(y):
        x[i, 2 * c + 4:2 * c + 7, 4:24] = 255
    return x, y


def main(argv=None):
    p = argparse.ArgumentParser()
    p.add_argument('--batch_size', type=int, default=128)
    p.add_argument('--epochs', type=int, default=12)
    p.add_argument('--samples', type=int, default=2048)
    p.add_argument('--swapout_threshold', type=int, default=40)
    p.add_argument('--swapin_ahead', type=int, default=3)
    p.add_argument('--swapin_groupby', type=int, default=2)
    p.add_argument('--no-lms', action='store_true')
    args = p.parse_args(argv)

    batch_size = args.batch_size
    num_classes = 10
    epochs = args.epochs

    # input image dimensions
    img_rows, img_cols = 28, 28

    # the data, split between train and test sets
    (x_train, y_train), (x_test, y_test) = synthetic_mnist(args.samples, 0), synthetic_mnist(args.samples // 4, 1)

    if K.image_data_format() == 'channels_first':
        x_train = x_train.reshape(x_train.shape[0], 1, img_rows, img_cols)
        x_test = x_test.reshape(x_test.shape[0], 1, img_rows, img_cols)
        input_shape = (1, img_rows, img_cols)
    else:
        x_train = x_train.reshape(x_train.shape[0], img_rows, img_cols, 1)
        x_test = x_test.reshape(x_test.shape[0], img_rows, img_cols, 1)
        input_shape = (img_rows, img_cols, 1)

    x_train = x_train.astype('float32')
    x_test = x_test.astype('float32')
    x_train /= 255
    x_test /= 255
    print('x_train shape:', x_train.shape)
    print(x_train.shape[0], 'train samples')
    print(x_test.shape[0], 'test samples')

    # convert class vectors to binary class matrices
    y_train = keras.utils.to_categorical(y_train, num_classes)
    y_test = keras.utils.to_categorical(y_test, num_classes)

    model = Sequential()
    model.add(Conv2D(32, kernel_size=(3, 3),
                     activation='relu',
                     input_shape=input_shape))
    model.add(Conv2D(64, (3, 3), activation='relu'))
    model.add(MaxPooling2D(pool_size=(2, 2)))
    model.add(Dropout(0.25))
    model.add(Flatten())
    model.add(Dense(128, activation='relu'))
    model.add(Dropout(0.5))
    model.add(Dense(num_classes, activation='softmax'))

    model.compile(loss=keras.losses.categorical_crossentropy,
                  optimizer=keras.optimizers.Adadelta(learning_rate=1.0),
                  metrics=['accuracy'])

    # Keras callback for LMS
    # This model does not require TFLMS to successfully run. If we do not
    # specify specific tuning parameters to LMS, the auto tuning will determine
    # that TFLMS is not needed and disable it.
    lms_callback = LMS(swapout_threshold=args.swapout_threshold, swapin_ahead=args.swapin_ahead,
                       swapin_groupby=args.swapin_groupby)

    history = model.fit(x_train, y_train,
                        batch_size=batch_size,
                        epochs=epochs,
                        verbose=1,
                        validation_data=(x_test, y_test),
                        callbacks=[] if args.no_lms else [lms_callback])
    score = model.evaluate(x_test, y_test, verbose=0)
    print('Test loss:', score[0])
    print('Test accuracy:', score[1])
    return model, history, lms_callback


if __name__ == '__main__':
    main(sys.argv[1:])
