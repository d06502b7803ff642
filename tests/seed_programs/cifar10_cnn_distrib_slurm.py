#!/usr/bin/env python
'''Train a simple deep CNN on the CIFAR10 small images dataset.

Distributed training.

run:
    salloc -N2  -p hsw_p40 --comment=docker  --qos=short --time=04:00:00

    srun -l --ntasks-per-node=2 python \
    examples/cifar/cifar10_cnn_distrib_slurm.py --epochs=5 --network=ib.cluster

    srun -l --ntasks-per-node=2 \
      python examples/cifar/cifar10_cnn_distrib_slurm.py --epochs=5 --rdma
    # rdma default is verbs

    # On psgcluster --network=ib.cluster is required for --rdma=gdr option
    # couldn't get --rdma=gdr option to work.

Ported from avolkov1/keras_experiments examples/cifar/cifar10_cnn_distrib_slurm.py
(test client). The TF1 distributed runtime it drove (tf.train.Server, sessions,
parameter servers, replica_device_setter) does not exist in TF2; kerastrainer's
MultiWorkerTrainer joins the workers of the srun step instead, and
make_parallel(model_init, wgdev_list) trains on it. Edits:
  1. Imports: `keras_exp.multigpu` -> `kerastrainer.keras.multigpu`; `keras_exp.distrib`
     (SlurmClusterParser, TFClusterManagerFacade, JobType, ProtocolType) ->
     `kerastrainer.MultiWorkerTrainer` and `kerastrainer.keras.parallel.get_allworkers_devlist`.
  2. The TF1 cluster set-up -> `trainer = MultiWorkerTrainer()`, which reads the srun
     step's SLURM_* variables and joins the workers (MultiWorkerMirroredStrategy).
     Removed, TF2 has none of them: ConfigProto/GPUOptions (log_device_placement ->
     `tf.debugging.set_log_device_placement`; the trainer sets memory growth), the server,
     its session and `KB.set_session`, the ps and worker `join`s (in TF1 only the chief ran
     the program past them; here every worker runs it), `replica_device_setter` with
     `GreedyLoadBalancingStrategy` (no parameter servers: every worker holds the weights),
     `psdev_list`, `stop_chief`. CLUSTER_SPEC_DICT is the trainer's cluster. `--rdma` and
     `--network` are said to be ignored: TF2 has no grpc+verbs/gdr, the addresses are SLURM's.
  3. `cmgr_facade.get_allworkers_devlist(ngpus)` -> `get_allworkers_devlist()`: the same
     list, one device per worker (MultiWorkerTrainer runs one process per device).
  4. `RMSprop(lr=lr, decay=1e-6)` -> `RMSprop(learning_rate=InverseTimeDecay(lr, 1, 1e-6))`,
     `ModelCheckpoint(monitor='val_acc')` -> `'val_accuracy'`, `.hdf5` -> `.keras`: Keras 3.
  5. `ImageDataGenerator` from `keras.src.legacy.preprocessing.image`: Keras 3.
  6. `--save-weights FILE` added: each worker saves its trained model ("{rank}" in FILE is
     the worker's rank), for the test to compare numbers. (The test's harness makes
     `cifar10.load_data()` return small local arrays: nothing is downloaded.)
'''
from __future__ import print_function

import sys

from argparse import SUPPRESS

# from time import sleep

import tensorflow as tf

from keras.utils import to_categorical
from keras.datasets import cifar10
from keras.src.legacy.preprocessing.image import ImageDataGenerator  # edit 5
from keras import backend as KB  # noqa: F401

from keras.callbacks import ModelCheckpoint

from keras.optimizers import RMSprop
from keras.optimizers.schedules import InverseTimeDecay  # edit 4

from kerastrainer.keras.multigpu import (get_available_gpus, print_mgpu_modelsummary)  # edit 1
from kerastrainer.keras.multigpu import make_parallel  # edit 1

from kerastrainer import MultiWorkerTrainer  # edit 1
from kerastrainer.keras.parallel import get_allworkers_devlist  # edit 1

from cifar_common import make_model

from parser_common import (parser_def_mgpu, remove_options)

# from functools import partial

_DEVPROF = False


def parser_(desc):
    '''CLI Parser for options to run Tensorflow over SLURM cluster.'''
    parser = parser_def_mgpu(desc)
    remove_options(parser, ['--mgpu', '--nccl', '--enqueue'])

    checkptfile = 'cifar10_cnn_distrib.weights.best.keras'  # edit 4
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

    parser.add_argument('--save-weights',  # edit 6
                        help='each worker saves its trained model there ({rank}: its rank)')

    args = parser.parse_args()

    return args


def main(argv=None):
    '''Train a simple deep CNN on the CIFAR10 small images dataset on a SLURM
    cluster.'''
    main.__doc__ = __doc__

    argv = sys.argv if argv is None else sys.argv.extend(argv)
    desc = main.__doc__  # .format(os.path.basename(__file__))
    # CLI parser
    args = parser_(desc)
    # print('RDMA: {}'.format(args.rdma))
    # rdma = getattr(args, 'rdma', None)
    rdma = args.rdma
    network = args.network
    # print('NETWORK: {}'.format(network))

    checkpt = getattr(args, 'checkpt', None)
    checkpt_flag = False if checkpt is None else True
    filepath = checkpt
    # print('CHECKPT:', checkpt)

    batch_size = 32
    num_classes = 10
    epochs = args.epochs
    data_augmentation = args.aug

    logdevp = args.logdevp

    # ---------------------------------------------- Distributed setup on SLURM
    # edit 2: the srun step's workers, joined before TensorFlow runs its first op
    trainer = MultiWorkerTrainer()
    if rdma or network:
        print('--rdma/--network ignored: TF2 has no grpc+verbs/gdr protocol; '
              'the workers are reached at the host names SLURM gives.')

    logdevp_flag = True if _DEVPROF or logdevp else False
    tf.debugging.set_log_device_placement(logdevp_flag)  # edit 2

    print('\n\tCLUSTER_SPEC_DICT: {}\n'.format(
        trainer.cluster_resolver.cluster_spec().as_dict()))  # edit 2

    is_chief = trainer.is_chief  # edit 2

    # The ngpus per host needs to be done with MPI or somehow sync'd. Currently
    # assuming all hosts have the same number of GPUs.
    gdev_list = get_available_gpus()
    ngpus = len(gdev_list)  # noqa: F841

    # List of all devices. The devices might be associated to the same worker.
    wgdev_list = get_allworkers_devlist()  # edit 3
    print('\n\tWGDEV_LIST: {}\n'
          .format([dev.to_string() for dev in wgdev_list]))  # DEBUG
    # If 2 workers ea. w/ 4 devices then nworker_devices_total == 2 * 4 = 8
    # If 4 workers ea. w/ 1 devices then nworker_devices_total == 4 * 1 = 4
    nworker_devices_total = len(wgdev_list)
    batch_size = batch_size * nworker_devices_total

    # ------------------------------------ Data loading and basic preprocessing
    # The data, shuffled and split between train and test sets:
    (x_train, y_train), (x_test, y_test) = cifar10.load_data()
    # Convert class vectors to binary class matrices.
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
    model_init = make_model(  # edit 2: no replica_device_setter
        x_train.shape[1:], num_classes,
        filepath if checkpt_flag else None
    )

    callbacks = None
    if checkpt_flag:
        checkpoint = ModelCheckpoint(filepath, monitor='val_accuracy', verbose=1,  # edit 4
                                     save_best_only=True, mode='max')
        callbacks = [checkpoint]

    # Data-Parallelize the model via function or class.
    model = make_parallel(model_init, wgdev_list)  # , ps_device='/gpu:0'
    print_mgpu_modelsummary(model)

    # ------------------------------------------------------------ Run training
    lr = 0.0001 * nworker_devices_total
    opt = RMSprop(learning_rate=InverseTimeDecay(lr, 1, 1e-6))  # edit 4

    # Let's train the model using RMSprop
    model.compile(loss='categorical_crossentropy',
                  optimizer=opt,
                  metrics=['accuracy'])

    if not data_augmentation:
        print('Not using data augmentation.')
        model.fit(x_train, y_train,
                  batch_size=batch_size,
                  epochs=epochs,
                  validation_data=(x_test, y_test),
                  shuffle=True,
                  callbacks=callbacks)

    else:
        print('Using real-time data augmentation.')
        # This will do preprocessing and realtime data augmentation:
        datagen = ImageDataGenerator(
            featurewise_center=False,  # set input mean to 0 over the dataset
            samplewise_center=False,  # set each sample mean to 0
            # divide inputs by std of the dataset
            featurewise_std_normalization=False,
            samplewise_std_normalization=False,  # divide each input by its std
            zca_whitening=False,  # apply ZCA whitening
            # randomly rotate images in the range (degrees, 0 to 180)
            rotation_range=0,
            # randomly shift images horizontally (fraction of total width)
            width_shift_range=0.1,
            # randomly shift images vertically (fraction of total height)
            height_shift_range=0.1,
            horizontal_flip=True,  # randomly flip images
            vertical_flip=False)  # randomly flip images

        # Compute quantities required for feature-wise normalization
        # (std, mean, and principal components if ZCA whitening is applied).
        datagen.fit(x_train)

        # Fit the model on the batches generated by datagen.flow().
        model.fit_generator(datagen.flow(x_train, y_train,
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

    if args.save_weights:  # edit 6
        model_init.save(args.save_weights.format(rank=trainer.rank))

    # ------------------------------------------------------------- STOP SERVER
    # edit 2: no server to stop


if __name__ == '__main__':
    main()
