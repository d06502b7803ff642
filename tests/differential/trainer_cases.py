"""The training cases of the differential suite: a few steps of a small ModelDesc, run by tensorpack
0.11 (the oracle, ``run_tensorpack``, in its subprocess) and by kerastrainer (``run_kerastrainer``)
on the same batches and the same initial weights (the oracle's, copied by name).

The models are written once, as tensorpack programs are (``tf`` is the framework's ``tfv1``, the
layers, ``ModelDesc`` and callbacks come from the framework ``F``): ``convnet`` (BatchNorm, weight
decay, ``tf.train.MomentumOptimizer`` on a ``learning_rate`` variable) and ``shufflenet``, the
computation of tensorpack's ``examples/ImageNetModels/shufflenet.py`` (ShuffleNet v1 units with its
own ``DepthConv`` and ``channel_shuffle``, ``Conv2D(split=)``, channels_first, ``ImageNetModel``'s
preprocessing, Nesterov momentum and weight decay), at a small size. The learning rate follows a
``ScheduledHyperParamSetter`` (linear, step-based) or a ``HyperParamSetterWithFunc``.

Each side records the cost of every step (the mean over the towers) and the variables after the
last step. This module imports neither framework at load.
"""
from __future__ import annotations

import math
import types

import numpy as np

STEPS_PER_EPOCH, EPOCHS = 2, 2     # 4 steps; the epoch-based schedule changes the rate at the second


# ------------------------------------------------------------------------ models

def make_model(F, tf, name: str):
    if name == "convnet":
        return _convnet(F, tf)
    if name == "shufflenet":
        return _shufflenet(F, tf)
    raise KeyError(name)


def _convnet(F, tf):
    class ConvNet(F.ModelDesc):
        def inputs(self):
            return [tf.TensorSpec([None, 12, 12, 3], tf.float32, "input"),
                    tf.TensorSpec([None], tf.int32, "label")]

        def build_graph(self, image, label):
            with F.argscope(F.Conv2D, kernel_size=3):
                x = F.Conv2D("conv0", image, 8, activation=F.BNReLU, use_bias=False)
                x = F.MaxPooling("pool0", x, 2)
                x = F.Conv2D("conv1", x, 8, activation=tf.nn.relu)
                x = F.BatchNorm("bn1", x)
            x = F.GlobalAvgPooling("gap", x)
            logits = F.FullyConnected("fc", x, 5)
            xent = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits),
                                  name="xent")
            wd = F.regularize_cost(".*/W", F.l2_regularizer(1e-3), name="wd_cost")
            return tf.add_n([xent, wd], name="cost")

        def optimizer(self):
            lr = tf.get_variable("learning_rate", initializer=0.1, trainable=False)
            return tf.train.MomentumOptimizer(lr, 0.9)
    return ConvNet()


def _shufflenet(F, tf):
    # From tensorpack 0.11 examples/ImageNetModels/shufflenet.py (DepthConv, channel_shuffle,
    # shufflenet_unit as written there, v1 only) and imagenet_utils.py (ImageNetModel's
    # preprocessing, loss and optimizer). Edits: the framework's names come from F; the widths,
    # the image size and the number of units are small; no summaries.
    @F.layer_register(log_shape=False)
    def DepthConv(x, out_channel, kernel_shape, padding='SAME', stride=1,
                  W_init=None, activation=tf.identity):
        in_shape = x.get_shape().as_list()
        in_channel = in_shape[1]
        assert out_channel % in_channel == 0, (out_channel, in_channel)
        channel_mult = out_channel // in_channel

        if W_init is None:
            W_init = tf.variance_scaling_initializer(2.0)
        kernel_shape = [kernel_shape, kernel_shape]
        filter_shape = kernel_shape + [in_channel, channel_mult]

        W = tf.get_variable('W', filter_shape, initializer=W_init)
        conv = tf.nn.depthwise_conv2d(x, W, [1, 1, stride, stride], padding=padding, data_format='NCHW')
        return activation(conv, name='output')

    def channel_shuffle(l, group):
        with tf.name_scope('channel_shuffle'):
            in_shape = l.get_shape().as_list()
            in_channel = in_shape[1]
            assert in_channel % group == 0, in_channel
            l = tf.reshape(l, [-1, in_channel // group, group] + in_shape[-2:])
            l = tf.transpose(l, [0, 2, 1, 3, 4])
            l = tf.reshape(l, [-1, in_channel] + in_shape[-2:])
            return l

    @F.layer_register(log_shape=False)
    def shufflenet_unit(l, out_channel, group, stride):
        in_shape = l.get_shape().as_list()
        in_channel = in_shape[1]
        shortcut = l

        first_split = group if in_channel > 24 else 1
        l = F.Conv2D('conv1', l, out_channel // 4, 1, split=first_split, activation=F.BNReLU)
        l = channel_shuffle(l, group)
        l = DepthConv('dconv', l, out_channel // 4, 3, stride=stride)
        l = F.BatchNorm('dconv_bn', l)

        l = F.Conv2D('conv2', l,
                     out_channel if stride == 1 else out_channel - in_channel,
                     1, split=group)
        l = F.BatchNorm('conv2_bn', l)
        if stride == 1:     # unit (b)
            output = tf.nn.relu(shortcut + l)
        else:   # unit (c)
            shortcut = F.AvgPooling('avgpool', shortcut, 3, 2, padding='SAME')
            output = tf.concat([shortcut, tf.nn.relu(l)], axis=1)
        return output

    class ShuffleNet(F.ModelDesc):
        weight_decay = 4e-5
        group = 4

        def inputs(self):
            return [tf.TensorSpec([None, 32, 32, 3], tf.uint8, 'input'),
                    tf.TensorSpec([None], tf.int32, 'label')]

        def build_graph(self, image, label):
            image = tf.cast(image, tf.float32)
            mean = [0.485, 0.456, 0.406][::-1]
            std = [0.229, 0.224, 0.225][::-1]
            image = (image - tf.constant(mean, dtype=tf.float32) * 255.) / (tf.constant(std, dtype=tf.float32) * 255.)
            image = tf.transpose(image, [0, 3, 1, 2])
            with F.argscope([F.Conv2D, F.MaxPooling, F.AvgPooling, F.GlobalAvgPooling, F.BatchNorm],
                            data_format='channels_first'), F.argscope(F.Conv2D, use_bias=False):
                group = self.group
                channels = [int(math.ceil(x * 0.25 / (group * 4)) * group * 4) for x in [272, 544]]
                first_chan = int(math.ceil(24 * 0.5 / group) * group)
                l = F.Conv2D('conv1', image, first_chan, 3, strides=2, activation=F.BNReLU)
                l = F.MaxPooling('pool1', l, 3, 2, padding='SAME')
                l = shufflenet_unit('stage2/block0', l, channels[0], group, 2)
                l = shufflenet_unit('stage2/block1', l, channels[0], group, 1)
                l = shufflenet_unit('stage3/block0', l, channels[1], group, 2)
                l = F.GlobalAvgPooling('gap', l)
                logits = F.FullyConnected('linear', l, 10)
            loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(logits=logits, labels=label),
                                  name='xentropy-loss')
            wd_loss = F.regularize_cost('.*/W', F.l2_regularizer(self.weight_decay), name='l2_regularize_loss')
            return tf.add_n([loss, wd_loss], name='cost')

        def optimizer(self):
            lr = tf.get_variable('learning_rate', initializer=0.1, trainable=False)
            return tf.train.MomentumOptimizer(lr, 0.9, use_nesterov=True)
    return ShuffleNet()


def make_callbacks(F, schedule: str):
    if schedule == "linear_steps":
        return [F.ScheduledHyperParamSetter("learning_rate", [(0, 0.2), (4, 0.04)], interp="linear",
                                            step_based=True)]
    if schedule == "func_epochs":
        return [F.HyperParamSetterWithFunc("learning_rate", lambda e, x: 0.15 if e <= 1 else x * 0.3)]
    raise KeyError(schedule)


def make_batches(model: str, towers: int, seed: int = 0):
    """The batches of every step, tower by tower: ``towers * steps`` batches in the order the towers
    take them (each tower takes its own batch: the per-tower batch rule of both frameworks)."""
    rs = np.random.RandomState(seed)
    n = towers * STEPS_PER_EPOCH * EPOCHS
    if model == "convnet":
        return [[rs.randn(6, 12, 12, 3).astype("float32"), rs.randint(0, 5, size=(6,)).astype("int32")]
                for _ in range(n)]
    return [[rs.randint(0, 256, size=(8, 32, 32, 3)).astype("uint8"), rs.randint(0, 10, size=(8,)).astype("int32")]
            for _ in range(n)]


CASES = {   # name: (model, schedule, towers, trainer)
    "convnet_simple_linear": ("convnet", "linear_steps", 1, "SimpleTrainer"),
    "convnet_simple_func": ("convnet", "func_epochs", 1, "SimpleTrainer"),
    "convnet_replicated_linear": ("convnet", "linear_steps", 2, "SyncMultiGPUTrainerReplicated"),
    "convnet_ps1_linear": ("convnet", "linear_steps", 1, "SyncMultiGPUTrainerParameterServer"),
    "shufflenet_simple_linear": ("shufflenet", "linear_steps", 1, "SimpleTrainer"),
    # shufflenet.py's own trainer: SyncMultiGPUTrainerParameterServer(max(get_num_gpu(), 1))
    "shufflenet_ps1_linear": ("shufflenet", "linear_steps", 1, "SyncMultiGPUTrainerParameterServer"),
}


# ------------------------------------------------------------------------ the oracle's side

def run_tensorpack(inp: dict, out: dict):
    """In the oracle's process: every case named in ``inp['cases']``: ``<case>/cost`` (one value per
    step, the towers' mean), ``<case>/init/<var>`` and ``<case>/final/<var>``."""
    import json
    import traceback
    for case in json.loads(str(inp["cases"])):
        try:
            _run_tensorpack_case(case, inp, out)
        except Exception:
            out[f"{case}/error"] = np.array(traceback.format_exc())


def _run_tensorpack_case(case, inp, out):
    import tensorpack as tp
    from tensorpack.compat import tfv1 as tf
    from tensorpack.models import l2_regularizer, regularize_cost

    model_name, schedule, towers, trainer_name = CASES[case]
    F = types.SimpleNamespace(**{**{k: getattr(tp, k) for k in dir(tp) if not k.startswith("_")},
                                 "l2_regularizer": l2_regularizer, "regularize_cost": regularize_cost})
    batches = [[inp[f"{case}/batch{i}/{j}"] for j in range(2)] for i in range(int(inp[f"{case}/nbatches"]))]
    costs, init, final = [], {}, {}

    class Record(tp.Callback):
        def _setup_graph(self):
            self._costs = [h.get_tensor("cost") for h in self.trainer.towers.training()]

        def _before_train(self):
            init.update({v.op.name: v.eval() for v in tf.global_variables()})

        def _before_run(self, _):
            return tf.train.SessionRunArgs(fetches=self._costs)

        def _after_run(self, _, values):
            costs.append(float(np.mean(values.results)))

        def _after_train(self):
            final.update({v.op.name: v.eval() for v in tf.global_variables()})

    from tensorpack.tfutils import get_default_sess_config
    from tensorpack.tfutils.sesscreate import NewSessionCreator
    sess_config = get_default_sess_config()
    if model_name == "shufflenet":   # NCHW pooling and depthwise convolution: no CPU kernel outside XLA
        sess_config.graph_options.optimizer_options.global_jit_level = tf.OptimizerOptions.ON_1
        sess_config.graph_options.rewrite_options.remapping = sess_config.graph_options.rewrite_options.OFF
    with tf.Graph().as_default():
        tf.set_random_seed(0)
        config = tp.TrainConfig(
            session_creator=NewSessionCreator(config=sess_config),
            model=make_model(F, tf, model_name),
            data=tp.QueueInput(tp.DataFromList(batches, shuffle=False)),
            callbacks=make_callbacks(F, schedule) + [Record()],
            monitors=[], steps_per_epoch=STEPS_PER_EPOCH, max_epoch=EPOCHS)
        trainer = {"SimpleTrainer": lambda: tp.SimpleTrainer(),
                   "SyncMultiGPUTrainerReplicated": lambda: tp.SyncMultiGPUTrainerReplicated(towers, mode="cpu"),
                   "SyncMultiGPUTrainerParameterServer": lambda: tp.SyncMultiGPUTrainerParameterServer(towers),
                   }[trainer_name]()
        tp.launch_train_with_config(config, trainer)
    out[f"{case}/cost"] = np.array(costs)
    for k, v in init.items():
        out[f"{case}/init/{k}"] = np.asarray(v)
    for k, v in final.items():
        out[f"{case}/final/{k}"] = np.asarray(v)
