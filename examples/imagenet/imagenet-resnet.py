#!/usr/bin/env python
"""Train ResNet-18/34/50/101/152 on ImageNet (ILSVRC12) with a ModelDesc: the flagship example.

The recipe of "ImageNet in 1 hour" (Goyal et al. 2017): 0.1 per 256 images of total
batch with a 5-epoch linear warm-up, x0.1 at epochs 30/60/80 of 90, SGD with Nesterov
momentum 0.9, weight decay 1e-4 on conv/FC weights only; ResNet v1.5 with the last BN
of each block starting at zero. Validation reports top-1 and top-5 error. Images are
decoded and augmented in worker processes and reach the towers as uint8 batches;
float conversion and normalisation run on the device. See examples/imagenet/README.md.

    # 8 GPUs, batch 64 per GPU (total 512, learning rate 0.2)
    python examples/imagenet/imagenet-resnet.py --data ~/data/imagenet --gpus 8 --batch 64
    # evaluate a checkpoint (top-1 / top-5 error on val)
    python examples/imagenet/imagenet-resnet.py --data ~/data/imagenet --eval --load train_log/imagenet-resnet-d50
    # speed test without data
    python examples/imagenet/imagenet-resnet.py --fake --batch 32 --steps-per-epoch 50 --epochs 1

Training resumes by itself from the newest checkpoint in --logdir (AutoResumeTrainConfig).
"""
import argparse
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import imagenet_utils as U  # noqa: E402


def get_trainer(args):
    """The trainer for ``--trainer``; multi-worker ones are imported only when asked for.

    Returns ``(trainer, towers in the sync group, towers fed by this process)``.
    """
    kwargs = dict(precision=None if args.precision == "fp32" else args.precision, jit_compile={"on": True, "off": False}.get(args.xla, "auto"))
    if args.trainer in ("multiworker", "horovod"):
        if args.gpus != 1:
            raise SystemExit(f"--trainer {args.trainer} runs one process per device: start one process per "
                             "GPU (kerastrainer-run -np N / horovodrun -np N) and leave --gpus at 1.")
        if args.trainer == "multiworker":
            try:
                from kerastrainer.train.multiworker import MultiWorkerTrainer
            except ImportError as e:
                raise SystemExit(f"--trainer multiworker is not available in this kerastrainer: {e}") from e
            trainer = MultiWorkerTrainer(**kwargs)  # first, before any TF op (see its docstring)
        else:
            try:
                from kerastrainer.train.horovod import HorovodTrainer
                trainer = HorovodTrainer(**kwargs)
            except (ImportError, RuntimeError) as e:
                raise SystemExit(f"--trainer horovod is not available ({e}). Install Horovod built for this "
                                 "TensorFlow, or use --trainer multiworker (TF collectives, same launch "
                                 "model: kerastrainer-run -np N).") from e
        return trainer, trainer.size, 1
    from kerastrainer import SimpleTrainer, SyncMultiGPUTrainerParameterServer, SyncMultiGPUTrainerReplicated
    if args.gpus == 1:
        return SimpleTrainer(**kwargs), 1, 1
    if args.trainer == "ps":
        return SyncMultiGPUTrainerParameterServer(args.gpus, ps_device="cpu", **kwargs), args.gpus, args.gpus
    return SyncMultiGPUTrainerReplicated(args.gpus, **kwargs), args.gpus, args.gpus


def make_model_class():
    import tensorflow as tf
    from kerastrainer import ModelDesc, add_moving_summary, l2_regularizer, regularize_cost, resnet

    class ImageNetResNet(ModelDesc):
        """ResNet on uint8 BGR images; normalisation on the device."""

        def __init__(self, depth=50, image_size=224, num_classes=U.NUM_CLASSES, total_batch=256,
                     weight_decay=1e-4, mode="resnet"):
            self.depth, self.image_size, self.num_classes = depth, image_size, num_classes
            self.total_batch, self.weight_decay, self.mode = total_batch, weight_decay, mode

        def inputs(self):
            s = self.image_size
            return [tf.TensorSpec((None, s, s, 3), tf.uint8, "input"),
                    tf.TensorSpec((None,), tf.int32, "label")]

        def build_graph(self, image, label):
            image = U.image_preprocess(image)
            logits = resnet(image, self.depth, num_classes=self.num_classes, mode=self.mode)
            logits = tf.cast(logits, tf.float32)  # fp32 softmax and top-k under bf16/fp16
            tf.nn.softmax(logits, name="prob")
            xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=label, logits=logits)
            loss = tf.reduce_mean(xent, name="xentropy-loss")
            wrong1, wrong5 = U.wrong_vectors(logits, label)
            # conv and FC kernels are all named .../W; BN's gamma/beta and the FC bias are not
            wd_cost = regularize_cost(r"(^|/)W$", l2_regularizer(self.weight_decay), name="wd_cost")
            add_moving_summary(loss, wd_cost, tf.reduce_mean(wrong1), tf.reduce_mean(wrong5),
                               names=["xentropy-loss", "wd_cost", "train-error-top1", "train-error-top5"])
            return tf.add(loss, wd_cost, name="cost")

        def optimizer(self):
            return U.make_sgd(self.total_batch)

    return ImageNetResNet


def evaluate(model, args):
    """Top-1 / top-5 error of ``--load`` on the val set."""
    from kerastrainer import PredictConfig, SimpleDatasetPredictor
    ds = U.get_imagenet_dataflow(args.data, "val", args.val_batch or args.batch, args.image_size,
                                 args.data_workers, args.meta_dir)
    pred = SimpleDatasetPredictor(PredictConfig(model=model, session_init=args.load,
                                                input_names=["input", "label"],
                                                output_names=["wrong-top1", "wrong-top5"]), ds)
    wrong1 = wrong5 = 0.0
    count = 0
    for w1, w5 in pred.get_result():
        wrong1 += float(w1.sum())
        wrong5 += float(w5.sum())
        count += len(w1)
    print(U.report_errors(wrong1, wrong5, count), flush=True)
    return wrong1 / count, wrong5 / count


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    U.add_common_args(parser)
    parser.add_argument("--depth", type=int, default=50, choices=[18, 34, 50, 101, 152])
    parser.add_argument("--mode", choices=["resnet", "preact"], default="resnet")
    parser.add_argument("--trainer", choices=["replicated", "ps", "multiworker", "horovod"], default="replicated")
    parser.add_argument("--lms", choices=["recompute", "offload", "offload+recompute", "auto"],
                        help="large model support: each residual block is an LMS block (docs/lms.md)")
    args = parser.parse_args(argv)
    U.check_data_args(args)

    if args.eval:
        model = make_model_class()(args.depth, args.image_size, mode=args.mode)
        evaluate(model, args)
        return

    trainer, num_replicas, local_towers = get_trainer(args)  # before any TF op (multi-worker)
    from kerastrainer import (AutoResumeTrainConfig, ClassificationError, InferenceRunner, ModelSaver,
                              ScalarStats, ThroughputTracker, launch_train_with_config, logger)
    from kerastrainer.utils import cluster

    total_batch = args.batch * num_replicas
    logdir = args.logdir or f"train_log/imagenet-resnet-d{args.depth}"
    multiworker = local_towers == 1 and num_replicas > 1
    if multiworker:
        cluster.set_logger_dir_on_chief(logdir, action="k")
    else:
        logger.set_logger_dir(logdir, action="k")
    logger.info("Total batch %d (%d per tower x %d towers); base learning rate %.4f", total_batch, args.batch,
                num_replicas, U.base_learning_rate(total_batch))

    model = make_model_class()(args.depth, args.image_size, total_batch=total_batch, mode=args.mode)
    if args.fake:
        train = U.FakeImageNetData(args.batch, args.image_size)
        callbacks = []
    else:
        shard = cluster.shard_list if multiworker else None
        train = U.get_imagenet_dataflow(args.data, "train", args.batch, args.image_size, args.data_workers,
                                        args.meta_dir, shard=shard)
        val = U.get_imagenet_dataflow(args.data, "val", args.val_batch or args.batch, args.image_size,
                                      max(1, (args.data_workers or U.default_num_workers()) // 2), args.meta_dir)
        callbacks = [InferenceRunner(val, [ScalarStats("xentropy-loss"),
                                           ClassificationError("wrong-top1", "val-error-top1"),
                                           ClassificationError("wrong-top5", "val-error-top5")])]
    steps = U.steps_per_epoch_for(args, total_batch)
    callbacks = [ModelSaver(max_to_keep=5), ThroughputTracker(samples_per_step=total_batch)] + callbacks \
        + U.lr_callbacks(total_batch, steps, args.warmup_epochs)
    if args.lms:
        from kerastrainer import LMS
        callbacks.append(LMS(args.lms))
    config = AutoResumeTrainConfig(model=model, dataflow=train, callbacks=callbacks, steps_per_epoch=steps,
                                   max_epoch=args.epochs, session_init=args.load)
    launch_train_with_config(config, trainer)


if __name__ == "__main__":
    main()
