"""ModelExporter: write a trained tower as a TF SavedModel for serving."""
from __future__ import annotations

import os

import tensorflow as tf

from ..utils import logger
from .base import build_model_for_inference
from .config import PredictConfig

__all__ = ["ModelExporter"]


class ModelExporter:
    """Export the inference graph of a :class:`PredictConfig` as a SavedModel.

    The SavedModel's ``serving_default`` signature takes the ``input_names`` and
    returns a dict of the ``output_names``; load it with ``tf.saved_model.load``
    (no kerastrainer needed).

    Example::

        ModelExporter(PredictConfig(model=Model(), session_init='train_log/mnist',
                                    input_names=['input'], output_names=['prob'])
                      ).export_serving('export/mnist')
    """

    def __init__(self, config: PredictConfig):
        self.config = config

    def export_serving(self, export_dir: str) -> str:
        cfg = self.config
        target = build_model_for_inference(cfg.model, cfg.session_init)
        pruned = cfg.model.get_tower_function().predict_function(cfg.input_names, cfg.output_names)
        specs = {s.name: s for s in cfg.model.get_input_signature()}
        signature = [tf.TensorSpec(specs[n].shape, specs[n].dtype, name=n) for n in cfg.input_names]
        concrete = pruned.concrete_function
        out_names = [n.split(":")[0].replace("/", "_") for n in cfg.output_names]

        module = tf.Module()
        module.model = target.model_variables

        @tf.function(input_signature=signature)
        def serve(*inputs):
            return dict(zip(out_names, concrete(*inputs)))

        module.serve = serve
        if os.path.exists(export_dir) and os.listdir(export_dir):
            raise FileExistsError(f"Export directory '{export_dir}' exists and is not empty.")
        tf.saved_model.save(module, export_dir, signatures={"serving_default": serve})
        logger.info("SavedModel written to %s (inputs %s, outputs %s)", export_dir, cfg.input_names, out_names)
        return export_dir
