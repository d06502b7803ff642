"""tensorpack's ``tfutils.collection``: back up, restore and freeze graph collections, with TF1's meaning.

The collections are those of the current default graph (``tf.compat.v1.get_default_graph()``: a
custom trainer's TF1 graph, the function graph of a tower being traced, or the process's global
graph when eager), as in TF1. Besides them, a kerastrainer tower keeps its summaries in its
:class:`~kerastrainer.tfutils.tower.TowerContext` rather than in a collection; they are treated as
the collections tensorpack put them in:

- ``tf.GraphKeys.SUMMARIES``: every summary of the tower (``tf.summary.*``, ``tfv1.summary.*``,
  ``add_moving_summary``'s, ``add_param_summary``'s);
- ``'MOVING_SUMMARY_OPS'`` (tensorpack's key): the tower's ``add_moving_summary`` values.

So ``with freeze_collection([tf.GraphKeys.SUMMARIES]): ...`` in a tower drops the summaries made in
the block, as tensorpack did. ``UPDATE_OPS`` frozen in a custom trainer's TF1 graph drops the
ops the block added (a custom trainer runs the graph's ``UPDATE_OPS``); but Keras 3's BatchNorm
(kerastrainer's and ``tf.layers``') updates its statistics inside the step, not through
``UPDATE_OPS``: freezing ``UPDATE_OPS`` in a tower warns so and names the way (``training=False``).

Example::

    with freeze_collection([tf.compat.v1.GraphKeys.SUMMARIES]):
        logits_adv = self.get_logits(x_adv)      # no summaries from this second pass
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Dict, Iterable, Optional

import tensorflow as tf

from ..utils import logger
from .tower import get_current_tower_context

__all__ = ["backup_collection", "restore_collection", "freeze_collection", "MOVING_SUMMARY_OPS"]

MOVING_SUMMARY_OPS = "MOVING_SUMMARY_OPS"   # tensorpack's collection of add_moving_summary's ops
_SUMMARIES = tf.compat.v1.GraphKeys.SUMMARIES
_UPDATE_OPS = tf.compat.v1.GraphKeys.UPDATE_OPS
_warned = set()


class CollectionBackup(dict):
    """``{key: [items]}`` of the graph's collections (tensorpack's backup), plus the summaries the
    current tower kept under those keys (restored with them)."""

    def __init__(self, items: Dict[str, list], tower=None, moving: Optional[dict] = None,
                 tensors: Optional[dict] = None):
        super().__init__(items)
        self.tower, self.moving, self.tensors = tower, moving, tensors


def backup_collection(keys: Optional[Iterable[str]] = None) -> CollectionBackup:
    """A copy of the collections ``keys`` (all of the default graph's when None).

    Example::

        saved = backup_collection([tf.compat.v1.GraphKeys.SUMMARIES])
    """
    graph = tf.compat.v1.get_default_graph()
    if keys is None:
        keys = graph.get_all_collection_keys()
    if isinstance(keys, str) or not isinstance(keys, (list, tuple, set, frozenset)):
        raise TypeError(f"backup_collection: keys must be a list, tuple or set of collection names; got {keys!r}.")
    keys = list(keys)
    ctx = get_current_tower_context()
    moving = tensors = None
    if ctx is not None:
        if _SUMMARIES in keys or MOVING_SUMMARY_OPS in keys:
            moving = dict(ctx.moving_summaries)
        if _SUMMARIES in keys:
            tensors = dict(ctx.tensor_summaries)
        if _UPDATE_OPS in keys and "tower_update_ops" not in _warned:
            _warned.add("tower_update_ops")
            logger.warning("freeze_collection/backup_collection of UPDATE_OPS in a tower: the ops the block adds to "
                           "UPDATE_OPS are dropped, but Keras 3's BatchNorm (kerastrainer's, tf.layers') updates "
                           "its moving statistics inside the step, not through UPDATE_OPS, so those updates "
                           "of the block still run. Call its layers with training=False (or under "
                           "TowerContext(..., is_training=False)) to leave the statistics as they are.")
    return CollectionBackup({k: list(graph.get_collection(k)) for k in keys}, ctx if moving is not None or
                            tensors is not None else None, moving, tensors)


def restore_collection(backup: Dict[str, list]) -> None:
    """Put the collections of ``backup`` back as they were (items added since are dropped).

    Example::

        restore_collection(saved)
    """
    if not isinstance(backup, dict):
        raise TypeError(f"restore_collection takes what backup_collection returned; got {type(backup).__name__}.")
    graph = tf.compat.v1.get_default_graph()
    for key, items in backup.items():
        ref = graph.get_collection_ref(key)
        del ref[:]
        ref.extend(items)
    if isinstance(backup, CollectionBackup) and backup.tower is not None:
        if backup.moving is not None:
            backup.tower.moving_summaries.clear()
            backup.tower.moving_summaries.update(backup.moving)
        if backup.tensors is not None:
            backup.tower.tensor_summaries.clear()
            backup.tower.tensor_summaries.update(backup.tensors)


@contextmanager
def freeze_collection(keys: Iterable[str]):
    """Within the block, additions to the collections ``keys`` are made and then dropped at its end.

    Example::

        with freeze_collection([tf.compat.v1.GraphKeys.SUMMARIES]):
            build_the_attack(x)
    """
    backup = backup_collection(keys)
    try:
        yield
    finally:
        restore_collection(backup)
