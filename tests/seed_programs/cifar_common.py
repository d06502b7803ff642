'''
Common functions for Cifar10 examples.

Ported from avolkov1/keras_experiments examples/cifar/cifar_common.py (test client).
Edits, each forced by TF2 / Keras 3:
  1. `from keras.datasets import cifar10` + `cifar10.load_batch`: Keras 3 keeps
     `load_batch` only in `keras.src.datasets.cifar`.
  2. TFVER checks and `tensorflow.contrib` (prefetching_ops, shuffle_and_repeat,
     map_and_batch, AUTOTUNE) removed: TF2 has no contrib; `Dataset.shuffle().repeat()`,
     `map().batch()` and `tf.data.AUTOTUNE` are the same operations.
  3. `isinstance(train_input, tf.Tensor)` -> also `keras.KerasTensor`: Keras 3's
     `InputLayer(input_tensor=...)` takes a Keras tensor.
  4. `DummyComm`, `print_in_order`, `prefetch_to_device` kept but unused here.
'''
from __future__ import print_function
import os
import numpy as np
import tensorflow as tf
import keras
from keras import backend as KB
from keras.models import Sequential
import keras.layers as KL

from keras.datasets import cifar10
from keras.src.datasets.cifar import load_batch  # edit 1


__all__ = (
    'CifarTrainDefaults', 'cifar10_load_data', 'make_model',
    'wrap_as_tfdataset', 'print_rank0',)


class CifarTrainDefaults(object):  # pylint: disable=too-few-public-methods
    '''Cifar common training defaults.'''
    batch_size = 128
    epochs = 200


def cifar10_load_data(datadir=None):
    '''Loads CIFAR10 dataset.

    Returns
        Tuple of Numpy arrays: `(x_train, y_train), (x_test, y_test)`.
    '''

    if datadir is None:
        return cifar10.load_data()

    dirname = 'cifar-10-batches-py'
    path_ = os.path.join(datadir, dirname)

    num_train_samples = 50000

    x_train = np.zeros((num_train_samples, 3, 32, 32), dtype='uint8')
    y_train = np.zeros((num_train_samples,), dtype='uint8')

    for ii in range(1, 6):
        fpath = os.path.join(path_, 'data_batch_' + str(ii))
        data, labels = load_batch(fpath)  # edit 1
        x_train[(ii - 1) * 10000: ii * 10000, :, :, :] = data
        y_train[(ii - 1) * 10000: ii * 10000] = labels

    fpath = os.path.join(path_, 'test_batch')
    x_test, y_test = load_batch(fpath)  # edit 1

    y_train = np.reshape(y_train, (len(y_train), 1))
    y_test = np.reshape(y_test, (len(y_test), 1))

    if KB.image_data_format() == 'channels_last':
        x_train = x_train.transpose(0, 2, 3, 1)
        x_test = x_test.transpose(0, 2, 3, 1)

    return (x_train, y_train), (x_test, y_test)


def make_model(train_input, num_classes, weights_file=None, small=False):
    '''Return Cifar10 DL model.'''

    if small:
        return make_model_small(train_input, num_classes, weights_file)

    return make_model_full(train_input, num_classes, weights_file)


def make_model_full(train_input, num_classes, weights_file=None):
    '''Return Cifar10 DL model with many layers.

    :param train_input: Either a tf.Tensor input placeholder/pipeline, or a
        tuple input shape.
    '''
    model = Sequential()

    if isinstance(train_input, (tf.Tensor, keras.KerasTensor)):  # edit 3
        model.add(KL.InputLayer(input_tensor=train_input))
    else:
        model.add(KL.InputLayer(input_shape=train_input))

    model.add(KL.Conv2D(32, (3, 3), padding='same'))
    model.add(KL.Activation('relu'))
    model.add(KL.Conv2D(32, (3, 3)))
    model.add(KL.Activation('relu'))
    model.add(KL.MaxPooling2D(pool_size=(2, 2)))
    model.add(KL.Dropout(0.25))

    model.add(KL.Conv2D(64, (3, 3), padding='same'))
    model.add(KL.Activation('relu'))
    model.add(KL.Conv2D(64, (3, 3)))
    model.add(KL.Activation('relu'))
    model.add(KL.MaxPooling2D(pool_size=(2, 2)))
    model.add(KL.Dropout(0.25))

    model.add(KL.Flatten())
    model.add(KL.Dense(512))
    model.add(KL.Activation('relu'))
    model.add(KL.Dropout(0.5))
    model.add(KL.Dense(num_classes))
    model.add(KL.Activation('softmax'))

    if weights_file is not None and os.path.exists(weights_file):
        model.load_weights(weights_file)

    return model


def make_model_small(train_input, num_classes, weights_file=None):
    '''Return Cifar10 DL model with small number layers.'''
    model = Sequential()

    if isinstance(train_input, (tf.Tensor, keras.KerasTensor)):  # edit 3
        model.add(KL.InputLayer(input_tensor=train_input))
    else:
        model.add(KL.InputLayer(input_shape=train_input))

    model.add(KL.Conv2D(32, (3, 3), padding='same'))
    model.add(KL.Activation('relu'))
    model.add(KL.Flatten())
    model.add(KL.Dense(num_classes))
    model.add(KL.Activation('softmax'))

    if weights_file is not None and os.path.exists(weights_file):
        model.load_weights(weights_file)

    return model


class DummyComm(object):
    '''Look like a comm object.'''

    @staticmethod
    def size():
        '''Total number of processes running.'''
        return 1

    @staticmethod
    def rank():
        '''Current process enumeration or rank.'''
        return 0

    @staticmethod
    def allreduce(*args, **kwargs):
        '''An allreduce operation.'''
        return


def print_rank0(msg, comm):
    '''Print a message in rank0 process.'''
    if comm.rank() == 0:
        print(msg)


def aug_fn(image):
    '''Cifar10 images distortion for data augmentation.'''
    distorted_image = tf.image.random_flip_left_right(image)
    distorted_image = tf.image.random_brightness(
        distorted_image, max_delta=63)
    distorted_image = tf.image.random_contrast(
        distorted_image, lower=0.2, upper=1.8)

    return image


def wrap_as_tfdataset(
        x_train, y_train, data_augmentation, batch_size,
        gpu_local_rank=None, prefetch_to_device=False,
        comm=DummyComm()):
    '''Wrap numpy data in TF Datasets API.'''
    buffer_size = tf.data.AUTOTUNE  # edit 2
    shuffle_buffer = 1000
    dataset = tf.data.Dataset.from_tensor_slices((x_train, y_train))

    dataset = dataset.shuffle(shuffle_buffer).repeat()  # edit 2

    if data_augmentation:
        print_rank0('USING IMAGE AUGMENTATION IN DATASET PIPELINE.', comm)

        def proc_dataset(images, labels):
            '''Aug/proc function for map_and_batch.'''
            images = aug_fn(images)
            return images, labels

        dataset = dataset.map(proc_dataset).batch(batch_size)  # edit 2
    else:
        dataset = dataset.batch(batch_size)

    dataset.prefetch(buffer_size=buffer_size)

    return dataset
