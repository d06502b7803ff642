"""The replicated and PS trainers on two logical GPUs carved from one physical GPU.

The log should say that the towers share a physical GPU, so the gradients are reduced on /gpu:0
(NCCL cannot all-reduce within one GPU). On a machine without a GPU it runs on two logical CPUs.
"""
import numpy as np

from kerastrainer.utils.devices import ensure_tower_devices

ensure_tower_devices(2)  # before TensorFlow starts

import tensorflow as tf  # noqa: E402

import kerastrainer as kt  # noqa: E402
from kerastrainer import (BatchData, DataFromGenerator, ModelDesc, SyncMultiGPUTrainerParameterServer,  # noqa: E402
                          SyncMultiGPUTrainerReplicated, TrainConfig, launch_train_with_config)


class Model(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec([None, 32], tf.float32, "x"), tf.TensorSpec([None], tf.int32, "y")]

    def build_graph(self, x, y):
        h = kt.models.FullyConnected("fc0", x, 64, activation=tf.nn.relu)
        logits = kt.models.FullyConnected("fc1", h, 4)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")

    def optimizer(self):
        return tf.keras.optimizers.SGD(0.1)


def points():
    rng = np.random.RandomState(0)
    while True:
        x = rng.randn(32).astype("float32")
        yield [x, int(x[:4].argmax())]


if __name__ == "__main__":
    print("logical GPUs:", tf.config.list_logical_devices("GPU"), flush=True)
    for trainer_class in (SyncMultiGPUTrainerReplicated, SyncMultiGPUTrainerParameterServer):
        trainer = trainer_class(2)
        kt.logger.set_logger_dir(f"/tmp/two_logical_{trainer_class.__name__}", action="d")
        launch_train_with_config(TrainConfig(model=Model(), dataflow=BatchData(DataFromGenerator(points), 64),
                                             steps_per_epoch=50, max_epoch=2), trainer)
        print(trainer_class.__name__, "devices", trainer.devices, "OK", flush=True)
