'''
MNIST dataset with TensorFlow TFRecords. Refer to:
    https://github.com/fchollet/keras/blob/master/examples/mnist_tfrecord.py

This is an implementation for multi-GPU systems.

Call this example:
    CUDA_VISIBLE_DEVICES=0,1 MNIST_TFRECORD=mnist.tfrecord python mnist_tfrecord_mgpu.py

Ported from avolkov1/keras_experiments examples/mnist/mnist_tfrecord_mgpu.py (test client).
Edits, each forced by TF2 / Keras 3:
  1. `keras_exp` -> `kerastrainer.keras` in the imports (the migration rule).
  2. `tensorflow.contrib...datasets.mnist.load_mnist()` (gone with contrib) -> the
     TFRecord file named by $MNIST_TFRECORD (`image`: 784 floats, `label`: int64), read
     with `tf.data.TFRecordDataset`; its records are also the validation set.
  3. `tf.Session`/`KB.set_session`, `tf.train.shuffle_batch`, queue runners and the
     Coordinator -> a `tf.data` pipeline (shuffle, repeat, batch, reshape, one-hot):
     TF2 has no sessions nor queue runners.
  4. `Input(tensor=x_train_batch)` + `compile(target_tensors=[y_train_batch])` ->
     `Input(shape=(28, 28, 1))` and the dataset given to `fit`: Keras 3 has no input
     or target tensors.
  5. `RMSprop(lr=lr, decay=1e-5)` -> `RMSprop(learning_rate=InverseTimeDecay(lr, 1, 1e-5))`:
     Keras 3 optimizers take neither `lr` nor `decay`; this schedule is Keras 2's decay.
  6. `'saved_wt.h5'` -> `'saved_wt.weights.h5'`: Keras 3's weights file name.
  7. `batch_size * ngpus`, `2e-3 * ngpus` -> `* max(ngpus, 1)`: on a machine without
     GPUs the original multiplies by 0.
'''
from __future__ import print_function
import os
import time

import numpy as np

import tensorflow as tf

from keras import backend as KB
from keras.models import Model
from keras.layers import (
    Dense, Dropout, Flatten, Input, Conv2D, MaxPooling2D)
from keras.optimizers import RMSprop
from keras.optimizers.schedules import InverseTimeDecay  # edit 5

from keras.models import Sequential
import keras.layers as KL

from keras.callbacks import ModelCheckpoint

from keras.utils import to_categorical

from kerastrainer.keras.multigpu import (  # edit 1
    get_available_gpus, make_parallel, print_mgpu_modelsummary)


if KB.backend() != 'tensorflow':
    raise RuntimeError('This example can only run with the '
                       'TensorFlow backend, '
                       'because it requires TFRecords, which '
                       'are not supported on other platforms.')


def cnn_layers_list(nclasses):
    '''List of instantitated cnn layers to use for the mnist data.'''
    ll = []
    ll.append(Conv2D(32, (3, 3), activation='relu', padding='valid'))
    ll.append(Conv2D(64, (3, 3), activation='relu'))
    ll.append(MaxPooling2D(pool_size=(2, 2)))
    ll.append(Dropout(0.25))
    ll.append(Flatten())
    ll.append(Dense(128, activation='relu'))
    ll.append(Dropout(0.5))
    ll.append(Dense(nclasses, activation='softmax', name='x_train_out'))

    return ll


def cnn_layers(x_train_input, nclasses):
    '''Create a model via functional API using cnn layers.'''
    ll = cnn_layers_list(nclasses)
    xi = x_train_input
    for il in ll:
        xi = il(xi)

    return xi


def make_model(x_train_input, nclasses):
    '''Non-functional model definition.'''
    model = Sequential()
    model.add(KL.InputLayer(input_tensor=x_train_input))
    ll = cnn_layers_list(nclasses)
    for il in ll:
        model.add(il)

    return model


def _parse(record):  # edit 2
    feats = tf.io.parse_single_example(record, {
        'image': tf.io.FixedLenFeature([784], tf.float32),
        'label': tf.io.FixedLenFeature([], tf.int64)})
    return feats['image'], tf.cast(feats['label'], tf.int32)


def main():
    # user options
    batch_size = 128
    val_in_train = False  # not sure how the validation part works during fit.
    use_model_checkpt = False

    # demo processing: edit 3, no session

    gdev_list = get_available_gpus()
    ngpus = len(gdev_list)
    batch_size = batch_size * max(ngpus, 1)

    records = os.environ['MNIST_TFRECORD']  # edit 2
    images, labels = [], []
    for img, lab in tf.data.TFRecordDataset(records).map(_parse):
        images.append(img.numpy())
        labels.append(int(lab))
    X_train = np.stack(images)
    train_samples = X_train.shape[0]
    height_nrows = 28
    width_ncols = 28
    batch_shape = [-1, height_nrows, width_ncols, 1]
    epochs = 5
    steps_per_epoch = train_samples // batch_size
    nclasses = 10

    # The capacity variable controls the maximum queue size
    # allowed when prefetching data for training.
    capacity = 10000

    # edit 3: the shuffle_batch queue as a tf.data pipeline
    def to_batch(x_train_batch, y_train_batch):
        x_train_batch = tf.cast(x_train_batch, tf.float32)
        x_train_batch = tf.reshape(x_train_batch, shape=batch_shape)

        y_train_batch = tf.cast(y_train_batch, tf.int32)
        y_train_batch = tf.one_hot(y_train_batch, nclasses)
        return x_train_batch, y_train_batch

    dataset = tf.data.TFRecordDataset(records).map(_parse).shuffle(capacity).repeat() \
        .batch(batch_size).map(to_batch)

    x_train_input = Input(shape=(height_nrows, width_ncols, 1))  # edit 4

    x_train_out = cnn_layers(x_train_input, nclasses)
    train_model = Model(inputs=[x_train_input], outputs=[x_train_out])
    if ngpus > 1:
        train_model = make_parallel(train_model, gdev_list)

    lr = 2e-3 * max(ngpus, 1)
    train_model.compile(optimizer=RMSprop(learning_rate=InverseTimeDecay(lr, 1, 1e-5)),  # edit 5
                        loss='categorical_crossentropy',
                        metrics=['accuracy'])  # edit 4

    if ngpus > 1:
        print_mgpu_modelsummary(train_model)
    else:
        train_model.summary()

    # Callbacks
    if use_model_checkpt:
        mon = 'val_acc' if val_in_train else 'acc'
        checkpoint = ModelCheckpoint(
            'saved_wt.weights.h5', monitor=mon, verbose=0,  # edit 6
            save_best_only=True,
            save_weights_only=True)
        checkpoint = [checkpoint]
    else:
        checkpoint = []

    callbacks = checkpoint

    start_time = time.time()
    train_model.fit(
        dataset,  # edit 4
        steps_per_epoch=steps_per_epoch,
        epochs=epochs,
        callbacks=callbacks)
    elapsed_time = time.time() - start_time
    print('[{}] finished in {} s'.format('TRAINING', round(elapsed_time, 3)))

    if not checkpoint:  # empty list
        train_model.save_weights('./saved_wt.weights.h5')  # edit 6

    KB.clear_session()

    # Second Session. Demonstrate that the model works and is independent of
    # the TFRecord pipeline, and to test loading trained model without tensors.
    x_test = np.reshape(X_train, (X_train.shape[0], 28, 28, 1))  # edit 2
    y_test = np.array(labels)
    x_test_inp = KL.Input(shape=(x_test.shape[1:]))
    test_out = cnn_layers(x_test_inp, nclasses)
    test_model = Model(inputs=x_test_inp, outputs=test_out)

    test_model.load_weights('saved_wt.weights.h5')  # edit 6
    test_model.compile(optimizer='rmsprop',
                       loss='categorical_crossentropy',
                       metrics=['accuracy'])
    test_model.summary()

    loss, acc = test_model.evaluate(x_test, to_categorical(y_test))
    print('\nTest loss: {0}'.format(loss))
    print('\nTest accuracy: {0}'.format(acc))


if __name__ == '__main__':
    main()
