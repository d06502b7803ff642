#!/usr/bin/env python
'''Train a simple deep CNN on the CIFAR10 small images dataset.

Distributed training.

run:
    srun -l --ntasks-per-node=2 python \
    examples/cifar/cifar10_cnn_distrib_slurm.py --epochs=5

Ported from avolkov1/keras_experiments examples/cifar/cifar10_cnn_distrib_slurm.py
(test client). The TF1 distributed runtime it drove (tf.train.Server, sessions,
parameter servers, replica_device_setter) does not exist in TF2; its kerastrainer
equivalent is KerasModel on MultiWorkerTrainer. Edits:
  1. `keras_exp` -> `kerastrainer.keras` in the imports; `keras_exp.distrib`
     (SlurmClusterParser, TFClusterManagerFacade, ProtocolType) -> `MultiWorkerTrainer`,
     which reads the srun step's SLURM_* variables itself.
  2. Server, session, ConfigProto, ps join, replica_device_setter, GreedyLoadBalancing
     removed: TF2 has none of them (MultiWorkerMirroredStrategy runs the collectives).
  3. `wgdev_list` (every worker's devices) -> `trainer.size * trainer.num_local_replicas`
     devices in all;
     `make_parallel(model_init, wgdev_list)` -> `KerasModel(model_init, trainer=trainer)`
     (make_parallel splits over one process's devices and says so for this list).
     `print_mgpu_modelsummary(model)` -> of `model_init`.
  4. `model.compile(...)`/`model.fit(x, y, ...)` -> `KerasModel.compile(...)` /
     `KerasModel.fit(input=(x, y), ...)`: KerasModel's fit takes the data as `input`.
     `batch_size` is the global batch of all workers; each worker reads its shard.
  5. `RMSprop(lr=lr, decay=1e-6)` -> `RMSprop(learning_rate=InverseTimeDecay(lr, 1, 1e-6))`
     and `ModelCheckpoint(monitor='val_acc')` -> `'val_accuracy'`, `.keras` file: Keras 3.
  6. `ImageDataGenerator` from `keras.src.legacy.preprocessing.image`; `fit_generator`
     -> `fit(input=...)`: Keras 3.
  7. `--save-weights FILE` added: the chief saves the trained model, for the test to
     compare numbers. (The test's harness makes `cifar10.load_data()` return small local
     arrays: nothing is downloaded.)
'''
from __future__ import print_function

import sys

from argparse import SUPPRESS

from kerastrainer import MultiWorkerTrainer  # edit 1
trainer = MultiWorkerTrainer()  # edit 2: first, before TensorFlow runs any op

import tensorflow as tf  # noqa: E402

from keras.utils import to_categorical  # noqa: E402
from keras.datasets import cifar10  # noqa: E402
from keras.src.legacy.preprocessing.image import ImageDataGenerator  # noqa: E402 edit 6
from keras.optimizers.schedules import InverseTimeDecay  # noqa: E402 edit 5

from keras.callbacks import ModelCheckpoint  # noqa: E402

from keras.optimizers import RMSprop  # noqa: E402

from kerastrainer.keras.multigpu import (get_available_gpus, print_mgpu_modelsummary)  # noqa: E402 edit 1
from kerastrainer.keras import KerasModel  # noqa: E402 edit 3

from cifar_common import make_model  # noqa: E402

from parser_common import (parser_def_mgpu, remove_options)  # noqa: E402

_DEVPROF = False


def parser_(desc):
    '''CLI Parser for options to run Tensorflow over SLURM cluster.'''
    parser = parser_def_mgpu(desc)
    remove_options(parser, ['--mgpu'])

    checkptfile = 'cifar10_cnn_distrib.weights.best.keras'  # edit 5
    parser.add_argument(
        '--checkpt', action='store', nargs='?',
        const=checkptfile, default=SUPPRESS,
        help='S|Save (overwrites) and load the model weights if available.'
        '\nOptionally specify a file/filepath if the default name is '
        'undesired.\n(default: {})'.format(checkptfile))

    parser.add_argument('--aug', action='store_true', default=False,
                        help='S|Perform data augmentation on cifar10 set.\n')

    parser.add_argument('--logdevp', action='store_true', default=False,
                        help='S|Log device placement in Tensorflow.\n')

    parser.add_argument('--save-weights', help='the chief saves the trained model there')  # edit 7

    args = parser.parse_args()

    return args


def main(argv=None):
    '''Train a simple deep CNN on the CIFAR10 small images dataset on a SLURM
    cluster.'''
    main.__doc__ = __doc__

    argv = sys.argv if argv is None else sys.argv.extend(argv)
    desc = main.__doc__
    # CLI parser
    args = parser_(desc)

    checkpt = getattr(args, 'checkpt', None)
    checkpt_flag = False if checkpt is None else True
    filepath = checkpt

    batch_size = 32
    num_classes = 10
    epochs = args.epochs
    data_augmentation = args.aug

    # ---------------------------------------------- Distributed setup on SLURM
    # edit 2: MultiWorkerTrainer() above joined the cluster of the srun step.
    is_chief = trainer.is_chief

    gdev_list = get_available_gpus()
    ngpus = len(gdev_list)
    print('\n\tRANK {} OF {}: LOCAL DEVICES {}\n'.format(trainer.rank, trainer.size, gdev_list or ngpus))

    # edit 3: every worker's devices
    nworker_devices_total = trainer.size * trainer.num_local_replicas
    batch_size = batch_size * nworker_devices_total

    # ------------------------------------ Data loading and basic preprocessing
    (x_train, y_train), (x_test, y_test) = cifar10.load_data()
    y_train = to_categorical(y_train, num_classes)
    y_test = to_categorical(y_test, num_classes)

    x_train = x_train.astype('float32')
    x_test = x_test.astype('float32')
    x_train /= 255
    x_test /= 255

    nsamples = x_train.shape[0]
    steps_per_epoch = nsamples // batch_size

    print(x_train.shape[0], 'train samples')
    print(x_test.shape[0], 'test samples')

    # --------------------------------------------- Setup model and parallelize
    model_init = make_model(
        x_train.shape[1:], num_classes,
        filepath if checkpt_flag else None
    )

    callbacks = None
    if checkpt_flag:
        checkpoint = ModelCheckpoint(filepath, monitor='val_accuracy', verbose=1,  # edit 5
                                     save_best_only=True, mode='max')
        callbacks = [checkpoint]

    # Data-Parallelize the model via function or class.
    model = KerasModel(model_init, trainer=trainer)  # edit 3
    print_mgpu_modelsummary(model_init)  # edit 3

    # ------------------------------------------------------------ Run training
    lr = 0.0001 * nworker_devices_total
    opt = RMSprop(learning_rate=InverseTimeDecay(lr, 1, 1e-6))  # edit 5

    # Let's train the model using RMSprop
    model.compile(loss='categorical_crossentropy',
                  optimizer=opt,
                  metrics=['accuracy'])

    if not data_augmentation:
        print('Not using data augmentation.')
        model.fit(input=(x_train, y_train),  # edit 4
                  batch_size=batch_size,
                  epochs=epochs,
                  validation_data=(x_test, y_test),
                  shuffle=True,
                  callbacks=callbacks)

    else:
        print('Using real-time data augmentation.')
        datagen = ImageDataGenerator(
            featurewise_center=False,
            samplewise_center=False,
            featurewise_std_normalization=False,
            samplewise_std_normalization=False,
            zca_whitening=False,
            rotation_range=0,
            width_shift_range=0.1,
            height_shift_range=0.1,
            horizontal_flip=True,
            vertical_flip=False)

        datagen.fit(x_train)

        model.fit(input=datagen.flow(x_train, y_train,  # edit 6
                                     batch_size=batch_size),
                  steps_per_epoch=steps_per_epoch,
                  epochs=epochs,
                  validation_data=(x_test, y_test),
                  callbacks=callbacks)

    # Run Validation
    if is_chief:
        model_init.compile(loss='categorical_crossentropy',
                           optimizer=opt,
                           metrics=['accuracy'])
        metrics = model_init.evaluate(
            x=x_test, y=y_test,
            batch_size=batch_size)
        print('\nCIFAR VALIDATION LOSS, ACC: {}, {}'.format(*metrics))
        if args.save_weights:  # edit 7
            model_init.save(args.save_weights)

    # ------------------------------------------------------------- STOP SERVER
    # edit 2: no server to stop


if __name__ == '__main__':
    main()
