#!/usr/bin/env python
"""Train ``keras.applications.ResNet50`` (or 101/152) on ImageNet through ``KerasModel``.

The Keras flavour of ``imagenet-resnet.py``: the model is a stock Keras application
(``weights=None``) behind a small layer that turns uint8 BGR images into normalised
floats on the device; the data pipeline, the learning-rate recipe (Goyal et al.),
SGD with Nesterov momentum, weight decay 1e-4 on conv/FC kernels only, checkpoints
and auto-resume are the same. ``KerasModel``'s batch is global (Keras' rule), so the
DataFlow's batch here is ``--batch x --gpus``. Validation reports ``val_error_top1``
and ``val_error_top5``.

    python examples/imagenet/imagenet-resnet-keras.py --data ~/data/imagenet --gpus 8 --batch 64
    python examples/imagenet/imagenet-resnet-keras.py --data ~/data/imagenet --eval --load train_log/imagenet-resnet-keras-d50
    python examples/imagenet/imagenet-resnet-keras.py --fake --batch 32 --steps-per-epoch 50 --epochs 1
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import imagenet_utils as U  # noqa: E402

KERAS_RESNETS = {50: "ResNet50", 101: "ResNet101", 152: "ResNet152"}


def build_keras_resnet(depth: int = 50, image_size: int = 224, num_classes: int = U.NUM_CLASSES,
                       weight_decay: float = 1e-4):
    """``uint8 BGR image -> logits``: normalisation on the device, then the Keras application.

    Weight decay: an L2 penalty ``weight_decay / 2 * sum(w ** 2)`` on every conv and
    dense kernel (as ``l2_regularizer`` in the ModelDesc example), put on the kernels'
    ``regularizer`` so that it reaches ``model.losses``; biases and BatchNorm are not
    decayed.
    """
    import keras
    if depth not in KERAS_RESNETS:
        raise SystemExit(f"keras.applications has ResNet-{sorted(KERAS_RESNETS)} only; got --depth {depth} "
                         "(imagenet-resnet.py builds 18 and 34).")

    @keras.saving.register_keras_serializable(package="imagenet_example")
    class ImageNetNormalize(keras.layers.Layer):
        """uint8 BGR -> ``(x / 255 - mean) / std`` per channel, float (the layer's compute dtype)."""

        def call(self, x):
            return keras.ops.cast(U.image_preprocess(x), self.compute_dtype)

    app = getattr(keras.applications, KERAS_RESNETS[depth])(
        weights=None, include_top=True, input_shape=(image_size, image_size, 3), classes=num_classes,
        classifier_activation=None)
    for layer in app.layers:
        if isinstance(layer, (keras.layers.Conv2D, keras.layers.Dense)):
            layer.kernel.regularizer = keras.regularizers.L2(weight_decay / 2.0)
    image = keras.Input((image_size, image_size, 3), dtype="uint8", name="input")
    logits = app(ImageNetNormalize(name="normalize")(image))
    return keras.Model(image, logits, name=f"resnet{depth}")


def _wrong_top(k):
    import tensorflow as tf

    def fn(y_true, y_pred):
        label = tf.reshape(tf.cast(y_true, tf.int32), [-1])
        return U.wrong_vectors(y_pred, label)[0 if k == 1 else 1]
    fn.__name__ = f"error_top{k}"
    return fn


def compile_model(km, total_batch):
    import keras
    km.compile(U.make_sgd(total_batch), keras.losses.SparseCategoricalCrossentropy(from_logits=True),
               metrics=[_wrong_top(1), _wrong_top(5)])


def load_weights(model, path):
    """Restore the Keras model's weights from a checkpoint written by ``ModelSaver`` under ``KerasModel``."""
    from kerastrainer.tfutils import CheckpointInit, LayerStore, ModelVariables
    import tensorflow as tf

    class Target:  # what a SessionInit loads into: a checkpoint root and named variables
        def __init__(self):
            # the layout KerasModelDesc gives its checkpoints: model -> keras_model
            self.model_variables = ModelVariables(LayerStore(name="unused"), {"keras_model": model})
            self.checkpoint = tf.train.Checkpoint(model=self.model_variables)

        def named_variables(self):
            return self.model_variables.named_variables()

    CheckpointInit(path, model_only=True).init(Target())


def set_precision_policy(precision: str) -> None:
    """Keras layers take their dtype policy when they are made: set it before building the model."""
    import keras
    if precision != "fp32":
        keras.mixed_precision.set_global_policy({"bf16": "mixed_bfloat16", "fp16": "mixed_float16"}[precision])


def evaluate(args):
    from kerastrainer import KerasModel
    set_precision_policy(args.precision)
    model = build_keras_resnet(args.depth, args.image_size)
    load_weights(model, args.load)
    km = KerasModel(model)
    compile_model(km, args.batch)
    ds = U.get_imagenet_dataflow(args.data, "val", args.val_batch or args.batch, args.image_size,
                                 args.data_workers, args.meta_dir)
    # evaluate() weights each batch by its size: exact means over the whole val set
    res = km.evaluate(ds, return_dict=True)
    count = U.count_images(args.data, "val", args.meta_dir)
    print(U.report_errors(res["error_top1"] * count, res["error_top5"] * count, count), flush=True)
    return res


def get_trainer(args):
    kwargs = dict(precision=None if args.precision == "fp32" else args.precision, jit_compile={"on": True, "off": False}.get(args.xla, "auto"))
    from kerastrainer import SimpleTrainer, SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated
    if args.gpus == 1:
        return SimpleTrainer(**kwargs)
    if args.trainer == "ps":
        return SyncMultiGPUTrainerParameterServer(args.gpus, ps_device="cpu", **kwargs)
    return SyncMultiGPUTrainerReplicated(args.gpus, **kwargs)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    U.add_common_args(parser)
    parser.add_argument("--depth", type=int, default=50, choices=sorted(KERAS_RESNETS))
    parser.add_argument("--trainer", choices=["replicated", "ps"], default="replicated")
    args = parser.parse_args(argv)
    U.check_data_args(args)
    if args.eval:
        evaluate(args)
        return

    from kerastrainer import KerasModel, ModelSaver, ThroughputTracker, logger
    from kerastrainer.tfutils import CheckpointInit
    from kerastrainer.tfutils.sessinit import read_checkpoint_counter

    trainer = get_trainer(args)
    total_batch = args.batch * args.gpus          # KerasModel splits each (global) batch over the towers
    logdir = args.logdir or f"train_log/imagenet-resnet-keras-d{args.depth}"
    logger.set_logger_dir(logdir, action="k")
    logger.info("Total batch %d (%d per tower x %d towers); base learning rate %.4f", total_batch, args.batch,
                args.gpus, U.base_learning_rate(total_batch))

    session_init, starting_epoch = args.load, 1
    try:  # auto-resume: the newest checkpoint of the log directory wins over --load
        resume = CheckpointInit(logdir)
    except FileNotFoundError:
        resume = None
    if resume is not None:
        epoch = read_checkpoint_counter(resume.path, "epoch")
        session_init, starting_epoch = resume, (epoch or 0) + 1
        logger.info("Found checkpoint %s (epoch %s): training resumes from it.", resume.path, epoch)

    if args.fake:
        train, val = U.FakeImageNetData(total_batch, args.image_size), None
    else:
        train = U.get_imagenet_dataflow(args.data, "train", total_batch, args.image_size, args.data_workers,
                                        args.meta_dir)
        val = U.get_imagenet_dataflow(args.data, "val", args.val_batch or args.batch, args.image_size,
                                      max(1, (args.data_workers or U.default_num_workers()) // 2), args.meta_dir)
    steps = U.steps_per_epoch_for(args, total_batch)
    set_precision_policy(args.precision)
    km = KerasModel(build_keras_resnet(args.depth, args.image_size), input=train, trainer=trainer)
    compile_model(km, total_batch)
    callbacks = [ModelSaver(max_to_keep=5), ThroughputTracker(samples_per_step=total_batch)] \
        + U.lr_callbacks(total_batch, steps, args.warmup_epochs)
    km.fit(validation_data=val, steps_per_epoch=steps, max_epoch=args.epochs, callbacks=callbacks,
           session_init=session_init, starting_epoch=starting_epoch)


if __name__ == "__main__":
    main()
