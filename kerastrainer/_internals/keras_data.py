"""Keras internals of ``fit``'s data: the order in which ``keras.Model.fit`` reads numpy arrays.

This module owns what of Keras's data adapters (``keras.src.trainers.data_adapters``) kerastrainer
uses: the batches of sample indices of one epoch over arrays, drawn as Keras's ``ArrayDataAdapter``
draws them on the TensorFlow backend (a ``tf.random.shuffle`` of ``tf.range(n)`` in a dataset map,
one permutation per iterator of the dataset). How kerastrainer makes the iterators (as Keras's
``EpochIterator``) is ``kerastrainer/keras/data.py``'s.
"""
from __future__ import annotations

from .versions import _keras, _missing

__all__ = ["keras_array_batch_indices"]


def keras_array_batch_indices(num_samples: int, batch_size: int, shuffle=True):
    """A ``tf.data.Dataset`` of one epoch's batches of sample indices (int64 vectors) in the order
    ``keras.Model.fit(x, y, batch_size=batch_size, shuffle=shuffle)`` reads ``num_samples`` samples of
    numpy arrays: each iterator of it draws one permutation from Keras's own random stream (the
    global seed, ``keras.utils.set_random_seed``), ``shuffle='batch'`` shuffles within each batch.

    Keras has no public API for its array order, and another stream (``Dataset.shuffle``) gives other
    orders under the same seed: the adapter is given the indices ``0..n-1`` as ``x``, so each of its
    batches is the indices Keras would gather. Raises :class:`InternalsError` when the adapter moved
    (any other order would train on other batches than ``fit``).
    """
    _keras()
    import numpy as np
    try:
        from keras.src.trainers.data_adapters import get_data_adapter
    except ImportError as e:
        raise _missing("keras.src.trainers.data_adapters.get_data_adapter (Keras's array adapter)",
                       "numpy data would be read in another order than keras.Model.fit's", e) from e
    adapter = get_data_adapter(x=np.arange(int(num_samples), dtype=np.int64), batch_size=int(batch_size),
                               shuffle=shuffle)
    return adapter.get_tf_dataset()
