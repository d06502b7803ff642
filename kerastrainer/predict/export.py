"""ModelExporter: write a trained tower as a TF SavedModel for serving, or as a frozen graph."""
from __future__ import annotations

import os
import shutil
import tempfile
from typing import Optional, Sequence

import tensorflow as tf

from .._internals import convert_variables_to_constants
from ..callbacks.fileio import atomic_write_bytes
from ..utils import logger
from .base import build_model_for_inference
from .config import PredictConfig

__all__ = ["ModelExporter"]


class ModelExporter:
    """Export the inference graph of a :class:`PredictConfig`.

    - :meth:`export_serving`: a SavedModel whose ``serving_default`` signature takes the
      ``input_names`` and returns a dict of the ``output_names``; load it with
      ``tf.saved_model.load`` (no kerastrainer needed).
    - :meth:`export_compact`: a frozen ``GraphDef`` (weights as constants) pruned to the
      named inputs and outputs, which ``tf.compat.v1`` imports and runs by tensor name
      (``'input:0'``, ``'prob:0'``), as tensorpack's compact export.

    The model's ``build_graph`` may be inference-only (return nothing), as in tensorpack.

    Example::

        exporter = ModelExporter(PredictConfig(model=Model(), session_init='train_log/mnist',
                                               input_names=['input'], output_names=['prob']))
        exporter.export_serving('export/mnist')
        exporter.export_compact('export/mnist.pb')
    """

    def __init__(self, config: PredictConfig):
        self.config = config

    def _pruned(self):
        cfg = self.config
        target = build_model_for_inference(cfg.model, cfg.session_init)
        pruned = cfg.model.get_tower_function().predict_function(cfg.input_names, cfg.output_names)
        return target, pruned

    def export_serving(self, export_dir: str, tags: Optional[Sequence[str]] = None,
                       signature_name: str = "prediction_pipeline") -> str:
        """Write a SavedModel to ``export_dir`` (which must not exist or be empty).

        The signature is saved as ``serving_default`` and, if different, also as
        ``signature_name`` (tensorpack's default name). ``tags`` other than ``serve``
        have no TF2 meaning (``tf.saved_model.save`` writes the ``serve`` tag) and are
        warned about.

        The SavedModel is written into a temporary directory beside ``export_dir`` and
        renamed to it once complete: a failed export (a full disk) leaves nothing behind,
        so the same call can simply be run again.
        """
        cfg = self.config
        if tags and set(tags) != {"serve"}:
            logger.warning("ModelExporter.export_serving(tags=%s): TF2 SavedModels carry the 'serve' tag "
                           "only; the tags are ignored.", list(tags))
        if os.path.exists(export_dir) and os.listdir(export_dir):
            raise FileExistsError(f"Export directory '{export_dir}' exists and is not empty.")
        target, pruned = self._pruned()
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
        signatures = {"serving_default": serve}
        if signature_name and signature_name != "serving_default":
            signatures[signature_name] = serve
        _save_whole(module, export_dir, signatures)
        logger.info("SavedModel written to %s (inputs %s, outputs %s)", export_dir, cfg.input_names, out_names)
        return export_dir

    def export_compact(self, filename: str, optimize: bool = True, toco_compatible: bool = False) -> str:
        """Write a frozen, pruned ``GraphDef`` to ``filename``.

        Its placeholders are named like the inputs and its outputs keep their tensor
        names, so TF1-style code runs it::

            graph_def = tf.compat.v1.GraphDef()
            graph_def.ParseFromString(open(filename, 'rb').read())
            with tf.Graph().as_default() as g:
                tf.compat.v1.import_graph_def(graph_def, name='')
                with tf.compat.v1.Session(graph=g) as sess:
                    prob = sess.run('prob:0', {'input:0': images})

        ``optimize`` and ``toco_compatible`` (TF1 graph transforms) have no TF2 meaning;
        ``toco_compatible=True`` is warned about.
        """
        del optimize  # the frozen graph is already pruned to what the outputs need
        if toco_compatible:
            logger.warning("ModelExporter.export_compact(toco_compatible=True) has no TF2 meaning; "
                           "convert the SavedModel with tf.lite.TFLiteConverter instead.")
        _, pruned = self._pruned()
        frozen = convert_variables_to_constants(pruned.concrete_function)
        graph_def = frozen.graph.as_graph_def()
        d = os.path.dirname(filename)
        if d:
            os.makedirs(d, exist_ok=True)
        atomic_write_bytes(filename, graph_def.SerializeToString())
        logger.info("Frozen graph written to %s (inputs %s, outputs %s)", filename,
                    self.config.input_names, self.config.output_names)
        return filename


def _save_whole(module, export_dir: str, signatures: dict) -> None:
    """``tf.saved_model.save`` into a sibling temporary directory, renamed to ``export_dir`` when
    complete (rename(2) replaces an empty directory); removed on any failure."""
    export_dir = os.path.abspath(export_dir)
    parent = os.path.dirname(export_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(export_dir)}.tmp-", dir=parent)
    try:
        tf.saved_model.save(module, tmp, signatures=signatures)
        os.replace(tmp, export_dir)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, (OSError, tf.errors.OpError)):
            reason = getattr(e, "message", None) or getattr(e, "strerror", None) or str(e)
            raise OSError(f"ModelExporter.export_serving: could not write the SavedModel {export_dir}: {reason}. "
                          "Nothing was left behind; free space there (or fix the cause) and run it again.") from e
        raise

