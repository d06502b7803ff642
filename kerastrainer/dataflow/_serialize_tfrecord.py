"""The TFRecord format of :mod:`.serialize`: :class:`TFRecordSerializer` and :class:`TFRecordData`.

Owns: one record of wire bytes per datapoint, and the DataFlow that reads the records back
in file order (no stored length: ``load(path, size=n)``; a file found to hold fewer than
``n`` records is an error naming it, never epochs made up by repeating records).
TensorFlow is imported only when ``save`` is called or the DataFlow is iterated, so
``kerastrainer.dataflow`` stays TF-free.

Leaves to others: path checks, temporary files and the progress bar to
:mod:`._serialize_files`; the encoding to :mod:`.wire`. Import the names from
:mod:`kerastrainer.dataflow.serialize`, their documented path.
"""
from __future__ import annotations

import os
from typing import Any, Iterator, Optional

from ..utils import logger
from . import wire
from ._serialize_files import PathLike, existing_path, new_file_path, progress_bar, remove_quietly
from .base import DataFlow, DataFlowSizeUnknown, check_dataflow
from .common import FixedSizeData, _try_size

__all__ = ["TFRecordSerializer", "TFRecordData"]


def _import_tf(who: str):
    try:
        import tensorflow as tf
    except ImportError as e:
        raise ImportError(f"{who} needs TensorFlow (pip install tensorflow); the other serializers do not") from e
    return tf


class TFRecordSerializer:
    """Write a DataFlow to one TFRecord file (a record of wire bytes per datapoint), and read it back.

    TensorFlow is imported only when ``save`` is called or the loaded DataFlow is
    iterated. TFRecord is sequential and stores no length: ``load(path, size=n)``
    gives the DataFlow a ``len()`` of ``n`` (tensorpack's API). Prefer
    :class:`LMDBSerializer` for random access.

    Example::

        TFRecordSerializer.save(ds, 'train.tfrecord')
        ds = TFRecordSerializer.load('train.tfrecord', size=50000)
    """

    @staticmethod
    def save(df: Any, path: PathLike) -> None:
        """Iterate ``df`` once (after ``reset_state()``) and write every datapoint to ``path``."""
        check_dataflow(df, "TFRecordSerializer.save")
        path = new_file_path(path, "TFRecordSerializer.save")
        tf = _import_tf("TFRecordSerializer")
        df.reset_state()
        tmp = f"{path}.tmp-{os.getpid()}"
        n = 0
        try:
            with tf.io.TFRecordWriter(tmp) as writer, progress_bar(_try_size(df), "TFRecordSerializer.save") as pbar:
                for dp in df:
                    writer.write(wire.dumps(dp))
                    n += 1
                    pbar.update(1)
            os.replace(tmp, path)
        except BaseException:
            remove_quietly(tmp)
            raise
        logger.info("TFRecordSerializer: wrote %d datapoints to %s", n, path)

    @staticmethod
    def load(path: PathLike, size: Optional[int] = None):
        """A DataFlow over the records of ``path`` in file order; with ``size``, epochs of exactly
        ``size`` datapoints, else no ``len()``.

        With ``size`` smaller than the file, each epoch goes on where the last one stopped
        (tensorpack's ``FixedSizeData``). A file found to hold fewer than ``size`` records
        raises ``ValueError`` naming it and its real count when the first pass ends: the
        records are never repeated to make up an epoch.
        """
        ds = TFRecordData(path)
        if size is not None:
            return _SizedTFRecordData(ds, size)
        return ds


class _SizedTFRecordData(FixedSizeData):
    """``FixedSizeData`` over a TFRecord file that checks the file holds ``size`` records."""

    def __init__(self, ds: "TFRecordData", size: int):
        super().__init__(ds, size)
        self._tfrecord = ds

    def _passes(self):
        """The file's records, pass after pass; each pass must hold at least ``size`` records."""
        while True:
            n = 0
            for dp in self._tfrecord:
                n += 1
                yield dp
            if n < self._size:
                raise ValueError(
                    f"TFRecordSerializer.load: {self._tfrecord.path!r} holds {n} records but size={self._size} was "
                    f"given; an epoch would repeat {self._size - n} of them. Give size={n} (the file's count).")

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            if self._itr is None or not self.keep_state:
                self._itr = self._passes()
            for _ in range(self._size):
                yield next(self._itr)


class TFRecordData(DataFlow):
    """The records of a TFRecord file written by :class:`TFRecordSerializer`, in order.

    Example::

        ds = TFRecordData('train.tfrecord')
    """

    def __init__(self, path: PathLike):
        self.path = existing_path(path, "TFRecordSerializer.load")

    def __len__(self) -> int:
        raise DataFlowSizeUnknown("a TFRecord file stores no length: use TFRecordSerializer.load(path, size=n)")

    def __iter__(self) -> Iterator[Any]:
        tf = _import_tf("TFRecordSerializer.load")
        # the plain record reader: no tf.data thread pool, so it also works in forked workers
        records = tf.compat.v1.io.tf_record_iterator(self.path)
        i = 0
        while True:
            try:
                raw = next(records)
            except StopIteration:
                return
            except tf.errors.OpError as e:
                raise ValueError(f"TFRecordSerializer.load: {self.path!r} is damaged after record {i}: "
                                 f"{e.message}. Write it again.") from None
            try:
                dp = wire.loads(bytearray(raw))
            except ValueError as e:
                raise ValueError(f"TFRecordSerializer.load: record {i} of {self.path!r} is not a datapoint "
                                 f"written by TFRecordSerializer.save ({e})") from None
            i += 1
            yield dp
