"""Run a ported seed program the way its README does, on logical CPU devices.

    python _harness.py --devices N [--seed S] [--no-dropout] PROGRAM.py [program args...]

``--devices N`` plays ``CUDA_VISIBLE_DEVICES`` with N GPUs: the CPU is split into N
logical devices before TensorFlow starts, so ``get_available_gpus()`` lists N
devices (none for N=1: the program takes its single-device path); real GPUs are
hidden, so every machine runs the same path. ``--seed`` seeds
Python, numpy, TensorFlow and Keras, so that two runs start from the same weights.
``--no-dropout`` makes Dropout the identity: a serial run and a data-parallel one
draw different masks, and the tests compare their numbers. ``--cifar10 FILE.npz``
makes ``keras.datasets.cifar10.load_data()`` return the test's small arrays (nothing
is downloaded). This is a test client, not library code.
"""
import argparse
import os
import runpy
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--devices", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-dropout", action="store_true")
    parser.add_argument("--cifar10", help="an .npz (x_train, y_train, x_test, y_test) for cifar10.load_data()")
    parser.add_argument("program")
    args, rest = parser.parse_known_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    os.environ.setdefault("KERAS_BACKEND", "tensorflow")
    import tensorflow as tf
    tf.config.set_visible_devices([], "GPU")  # the same path on every machine: N logical CPU "GPUs"
    cpus = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpus[0], [tf.config.LogicalDeviceConfiguration()] * args.devices)
    import keras
    keras.utils.set_random_seed(args.seed)
    if args.no_dropout:
        keras.layers.Dropout.call = lambda self, inputs, training=None: inputs
    if args.cifar10:  # the data the test wrote, instead of a download
        import numpy as np
        data = dict(np.load(args.cifar10))
        keras.datasets.cifar10.load_data = lambda: ((data["x_train"], data["y_train"]),
                                                    (data["x_test"], data["y_test"]))
    program = os.path.abspath(args.program)
    sys.path.insert(0, os.path.dirname(program))
    sys.argv = [program] + rest
    runpy.run_path(program, run_name="__main__")


if __name__ == "__main__":
    main()
