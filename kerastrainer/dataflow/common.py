"""DataFlow combinators: batching, mapping, repeating, shuffling, joining, caching, inspection.

Every combinator takes any object with the DataFlow protocol (``reset_state()``,
``__iter__``, optional ``__len__``), a tensorpack DataFlow included; none needs
its input to subclass :class:`~kerastrainer.dataflow.base.DataFlow`.

Example::

    from kerastrainer.dataflow import DataFromList, MapDataComponent, BatchData

    ds = DataFromList([[np.full((2, 2), i, 'float32'), i] for i in range(10)])
    ds = MapDataComponent(ds, lambda img: img * 2, index=0)
    ds = BatchData(ds, 4, remainder=True)      # 3 batches: 4, 4, 2
    ds.reset_state()
    for images, labels in ds:                  # images: (B, 2, 2) float32, labels: (B,) int32
        ...
"""
from __future__ import annotations

import sys
import time
from collections import deque
from typing import Any, Callable, Hashable, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from ..utils import logger
from ..utils.rng import get_rng
from .base import DataFlow, DataFlowReentrantGuard, DataFlowSizeUnknown, ProxyDataFlow, check_dataflow, is_dataflow
from ..utils.casting import whole_number

__all__ = ["BatchData", "BatchDataByShape", "MapData", "MapDataComponent", "FixedSizeData", "RepeatedData",
           "RepeatedDataPoint", "LocallyShuffleData", "ConcatData", "JoinData", "RandomChooseData",
           "RandomMixData", "SelectComponent", "CacheData", "PrintData", "TestDataSpeed"]

_END = object()  # sentinel for next(iterator, _END)


# ---------------------------------------------------------------------------------------------
# helpers shared by the combinators (and serialize.py)

def _size_of(ds: Any) -> int:
    """``len(ds)``, or ``ds.size()`` for old tensorpack DataFlows; NotImplementedError when unknown."""
    try:
        return len(ds)
    except DataFlowSizeUnknown:
        raise
    except NotImplementedError as e:  # from a DataFlow of another library: keep list(ds) working
        raise DataFlowSizeUnknown(str(e) or f"{type(ds).__name__} does not know its size") from None
    except TypeError:  # no __len__ at all
        pass
    size = getattr(ds, "size", None)
    if callable(size):
        return int(size())
    raise DataFlowSizeUnknown(f"{type(ds).__name__} does not know its size")


def _try_size(ds: Any) -> Optional[int]:
    try:
        return _size_of(ds)
    except NotImplementedError:
        return None


def _close(ds: Any) -> None:
    close = getattr(ds, "close", None)
    if callable(close):
        close()


def _check_int(value: Any, name: str, minimum: int) -> int:
    return whole_number(value, name, minimum=minimum)


def _shallow_copy(dp: Any) -> Any:
    """A new list/dict holding the same components, so that edits do not reach the producer's datapoint."""
    if isinstance(dp, dict):
        return dict(dp)
    if isinstance(dp, (list, tuple)):
        return list(dp)
    return dp


def _get_component(dp: Any, index: Hashable, who: str) -> Any:
    try:
        return dp[index]
    except (IndexError, KeyError, TypeError):
        if isinstance(dp, dict):
            what = f"a dict datapoint with keys {sorted(map(str, dp))}"
        elif isinstance(dp, (list, tuple)):
            what = f"a datapoint with {len(dp)} components"
        else:
            what = f"a datapoint of type {type(dp).__name__}"
        raise IndexError(f"{who}: component {index!r} does not exist in {what}") from None


class _MultiDataFlow(DataFlow):
    """Base of combinators over several DataFlows: forwards reset_state and close to each."""

    def __init__(self, df_lists: Sequence[Any], who: str):
        if isinstance(df_lists, (str, bytes)) or not isinstance(df_lists, Sequence) or not df_lists:
            raise TypeError(f"{who} expects a non-empty list of DataFlows, got {df_lists!r}")
        self.df_lists = [check_dataflow(d, f"{who} (DataFlow #{i})") for i, d in enumerate(df_lists)]

    def reset_state(self) -> None:
        for d in self.df_lists:
            d.reset_state()

    def close(self) -> None:
        for d in self.df_lists:
            _close(d)


# ---------------------------------------------------------------------------------------------
# batching

def _py_ints_to_array(values: list) -> np.ndarray:
    arr = np.asarray(values)
    i32 = np.iinfo(np.int32)
    if arr.dtype == np.int64 and arr.size and i32.min <= arr.min() and arr.max() <= i32.max:
        return arr.astype(np.int32)
    return arr


def _shape_error(values: list, path: str, what: str = "shapes") -> ValueError:
    seen = {}
    for i, v in enumerate(values):
        seen.setdefault(np.shape(v), i)
    listed = ", ".join(f"{s} at datapoint {i}" for s, i in list(seen.items())[:4])
    return ValueError(f"BatchData cannot stack component {path}: its {what} differ across the batch: {listed}. "
                      "Make them one shape (resize or pad), group them with BatchDataByShape, "
                      "or pass use_list=True to get lists.")


def _batch_component(values: list, path: str) -> Any:
    """Stack one component of every datapoint of a batch; containers are batched leaf by leaf."""
    first = values[0]
    if isinstance(first, np.ndarray):
        try:
            # asarray stacks equal-shaped arrays like np.stack, at half its cost or less
            out = np.asarray(values)
        except ValueError:
            raise _shape_error(values, path) from None
        if out.shape[1:] != first.shape:  # e.g. object arrays built from odd inputs
            raise _shape_error(values, path)
        return out
    if isinstance(first, dict):
        for i, v in enumerate(values):
            if not isinstance(v, dict) or v.keys() != first.keys():
                raise ValueError(f"BatchData cannot batch component {path}: datapoint 0 has a dict with keys "
                                 f"{sorted(map(str, first))}, datapoint {i} has {_brief(v)}")
        return {k: _batch_component([v[k] for v in values], f"{path}[{k!r}]") for k in first}
    if isinstance(first, (list, tuple)):
        for i, v in enumerate(values):
            if not isinstance(v, (list, tuple)) or len(v) != len(first):
                raise ValueError(f"BatchData cannot batch component {path}: datapoint 0 has a "
                                 f"{type(first).__name__} of {len(first)}, datapoint {i} has {_brief(v)}")
        out = [_batch_component([v[j] for v in values], f"{path}[{j}]") for j in range(len(first))]
        return tuple(out) if isinstance(first, tuple) else out
    try:
        if isinstance(first, np.generic):  # before float: np.float64 subclasses float
            return np.asarray(values)
        if isinstance(first, bool):
            return np.asarray(values, dtype=bool)
        if isinstance(first, int):
            return _py_ints_to_array(values)
        if isinstance(first, float):
            return np.asarray(values, dtype=np.float32)
        if isinstance(first, (complex, str, bytes)):
            return np.asarray(values)
    except ValueError:
        raise _shape_error(values, path, "types or shapes") from None
    if hasattr(first, "__array__"):
        try:
            return np.stack([np.asarray(v) for v in values])
        except ValueError:
            raise _shape_error(values, path) from None
    raise TypeError(f"BatchData cannot batch component {path} of type {type(first).__name__}; "
                    "make it a numpy array or number, or pass use_list=True to get lists")


def _brief(v: Any) -> str:
    if isinstance(v, dict):
        return f"a dict with keys {sorted(map(str, v))}"
    if isinstance(v, (list, tuple)):
        return f"a {type(v).__name__} of {len(v)}"
    return f"a {type(v).__name__}"


class BatchData(ProxyDataFlow):
    """Stack ``batch_size`` consecutive datapoints into one.

    Each component becomes a numpy array with a new leading batch axis. Numpy
    arrays and numpy scalars keep their dtype; Python ``int`` becomes int32 (int64
    when a value does not fit), ``float`` float32 and ``bool`` bool, as in
    tensorpack; strings give a numpy string array. Python floats are always rounded
    to float32 (tensorpack's rule, kept here), so a value float32 cannot hold
    exactly changes (``16777217.0`` becomes ``16777216.0``; ``1e39`` becomes
    ``inf``, with numpy's overflow warning); yield ``np.float64`` scalars or
    arrays to keep float64. A component that is itself a list, tuple or dict is
    batched leaf by leaf (``[img, {'a': x}]`` gives ``[imgs, {'a': xs}]``).
    Works on list and dict datapoints.

    Args:
        ds: the DataFlow to batch.
        batch_size: datapoints per batch.
        remainder: also yield the last, smaller batch of an epoch.
        use_list: give Python lists instead of arrays: True for every component,
            or a list of bools (list datapoints) or a dict ``{key: bool}`` (dict
            datapoints) to choose per component.

    Example::

        ds = BatchData(DataFromList([[np.zeros((2, 3)), 1]] * 10, shuffle=False), 4, remainder=True)
        assert len(ds) == 3
    """

    def __init__(self, ds: Any, batch_size: int, remainder: bool = False,
                 use_list: Union[bool, Sequence[bool], Mapping[Hashable, bool]] = False):
        super().__init__(check_dataflow(ds, "BatchData"))
        self.batch_size = _check_int(batch_size, "BatchData batch_size", 1)
        self.remainder = bool(remainder)
        if not self.remainder:
            size = _try_size(ds)
            if size is not None and self.batch_size > size:
                raise ValueError(f"BatchData batch_size {self.batch_size} is larger than the DataFlow's size "
                                 f"{size}, so no batch would ever be made; use a smaller batch or remainder=True")
        if not isinstance(use_list, (bool, np.bool_, Sequence, Mapping)) or isinstance(use_list, str):
            raise TypeError(f"BatchData use_list must be a bool, a list of bools or a dict of bools, got {use_list!r}")
        self.use_list = use_list

    def __len__(self) -> int:
        q, r = divmod(_size_of(self.ds), self.batch_size)
        return q + (1 if self.remainder and r else 0)

    def __iter__(self) -> Iterator[Any]:
        holder = []
        for dp in self.ds:
            holder.append(dp)
            if len(holder) == self.batch_size:
                yield self.aggregate_batch(holder, self.use_list)
                holder = []
        if self.remainder and holder:
            yield self.aggregate_batch(holder, self.use_list)

    @staticmethod
    def aggregate_batch(data_holder: List[Any],
                        use_list: Union[bool, Sequence[bool], Mapping[Hashable, bool]] = False) -> Any:
        """Batch a list of datapoints (all lists of one length, or all dicts with the same keys)."""
        first = data_holder[0]
        if isinstance(first, dict):
            for i, dp in enumerate(data_holder):
                if not isinstance(dp, dict) or dp.keys() != first.keys():
                    raise ValueError(f"BatchData: datapoint 0 of the batch is a dict with keys "
                                     f"{sorted(map(str, first))}, datapoint {i} is {_brief(dp)}; "
                                     "every datapoint must have the same keys")
            keys = list(first)
        elif isinstance(first, (list, tuple)):
            for i, dp in enumerate(data_holder):
                if not isinstance(dp, (list, tuple)) or len(dp) != len(first):
                    raise ValueError(f"BatchData: datapoint 0 of the batch has {len(first)} components, "
                                     f"datapoint {i} is {_brief(dp)}; every datapoint must have the same length")
            keys = range(len(first))
        else:
            raise TypeError(f"BatchData needs list or dict datapoints, got {type(first).__name__}; "
                            "wrap single values with MapData(ds, lambda x: [x])")
        out = {} if isinstance(first, dict) else [None] * len(first)
        for k in keys:
            values = [dp[k] for dp in data_holder]
            out[k] = values if _wants_list(use_list, k, first) else _batch_component(values, f"[{k!r}]")
        return out


def _wants_list(use_list: Any, key: Hashable, first: Any) -> bool:
    if isinstance(use_list, (bool, np.bool_)):
        return bool(use_list)
    if isinstance(use_list, Mapping):
        return bool(use_list.get(key, False))
    if isinstance(first, dict):
        raise TypeError("BatchData use_list for dict datapoints must be a bool or a dict {key: bool}")
    if len(use_list) != len(first):
        raise ValueError(f"BatchData use_list has {len(use_list)} entries but datapoints have "
                         f"{len(first)} components; give one bool per component")
    return bool(use_list[key])


class BatchDataByShape(BatchData):
    """Batch together datapoints whose component ``idx`` has the same shape.

    Useful for images of a few different sizes. Datapoints left over in a
    not-yet-full group are kept for the next epoch, so nothing is dropped for good.
    ``len()`` is tensorpack's: the input's size over the batch size (``BatchData``'s), which is
    what a pass makes on average over epochs (one pass may make fewer: its leftovers carry over).

    Example::

        ds = BatchDataByShape(ds, 8, idx=0)   # every batch's images share one shape
    """

    def __init__(self, ds: Any, batch_size: int, idx: Hashable):
        super().__init__(ds, batch_size, remainder=False)
        self.idx = idx
        self._holder = {}
        self._guard = DataFlowReentrantGuard("BatchDataByShape")

    def reset_state(self) -> None:
        super().reset_state()
        self._holder = {}

    def __len__(self) -> int:
        # tensorpack's BatchDataByShape kept BatchData's len (HED's steps_per_epoch = len(ds) * 40)
        return super().__len__()

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            for dp in self.ds:
                shape = np.shape(_get_component(dp, self.idx, "BatchDataByShape"))
                group = self._holder.setdefault(shape, [])
                group.append(dp)
                if len(group) == self.batch_size:
                    del self._holder[shape]
                    yield self.aggregate_batch(group, self.use_list)


# ---------------------------------------------------------------------------------------------
# mapping and selecting

class MapData(ProxyDataFlow):
    """Apply ``func`` to every datapoint; a datapoint for which it returns None is dropped.

    ``func`` receives a shallow copy of the datapoint (a new list or dict with the
    same components), so it may assign components without touching the producer's
    datapoint; edit arrays in place only if the producer does not reuse them.
    ``len()`` is the input's, an upper bound when ``func`` drops datapoints.

    Example::

        ds = MapData(ds, lambda dp: [dp[0] / 255.0, dp[1]])
    """

    def __init__(self, ds: Any, func: Callable[[Any], Any]):
        super().__init__(check_dataflow(ds, type(self).__name__))
        if not callable(func):
            raise TypeError(f"{type(self).__name__} func must be callable, got {type(func).__name__}")
        self.func = func

    def __len__(self) -> int:
        return _size_of(self.ds)

    def __iter__(self) -> Iterator[Any]:
        func = self.func
        for dp in self.ds:
            ret = func(_shallow_copy(dp))
            if ret is not None:
                yield ret


class MapDataComponent(MapData):
    """Apply ``func`` to one component (``index``: a position, or a key of dict datapoints).

    The datapoint yielded is a new list or dict; the input datapoint is not
    modified. A func that returns None drops the datapoint.

    Example::

        ds = MapDataComponent(ds, lambda img: cv2.resize(img, (224, 224)), index=0)
    """

    def __init__(self, ds: Any, func: Callable[[Any], Any], index: Hashable = 0):
        if not callable(func):
            raise TypeError(f"MapDataComponent func must be callable, got {type(func).__name__}")
        self.index = index

        def apply(dp):  # dp is already a shallow copy made by MapData
            ret = func(_get_component(dp, index, "MapDataComponent"))
            if ret is None:
                return None
            dp[index] = ret
            return dp

        super().__init__(ds, apply)


class SelectComponent(ProxyDataFlow):
    """Keep the components ``idxs`` (positions, or keys of dict datapoints), in that order, as a list.

    Example::

        ds = SelectComponent(ds, [2, 0])   # [a, b, c] -> [c, a]
    """

    def __init__(self, ds: Any, idxs: Sequence[Hashable]):
        super().__init__(check_dataflow(ds, "SelectComponent"))
        if isinstance(idxs, (str, bytes)) or not isinstance(idxs, Sequence):
            raise TypeError(f"SelectComponent idxs must be a list of indices or keys, got {idxs!r}")
        self.idxs = list(idxs)

    def __len__(self) -> int:
        return _size_of(self.ds)

    def __iter__(self) -> Iterator[list]:
        idxs = self.idxs
        for dp in self.ds:
            try:
                yield [dp[k] for k in idxs]
            except (IndexError, KeyError, TypeError):
                for k in idxs:
                    _get_component(dp, k, "SelectComponent")
                raise


# ---------------------------------------------------------------------------------------------
# sizes and repetition

class FixedSizeData(ProxyDataFlow):
    """Make every epoch exactly ``size`` datapoints long, restarting the input when it ends.

    With ``keep_state`` (the default) the next epoch continues where the last one
    stopped; otherwise every epoch starts from the beginning of the input.

    Example::

        ds = FixedSizeData(infinite_ds, 1000)   # epochs of 1000 datapoints
    """

    def __init__(self, ds: Any, size: int, keep_state: bool = True):
        super().__init__(check_dataflow(ds, "FixedSizeData"))
        self._size = _check_int(size, "FixedSizeData size", 0)
        self.keep_state = bool(keep_state)
        self._itr = None
        self._guard = DataFlowReentrantGuard("FixedSizeData")

    def reset_state(self) -> None:
        super().reset_state()
        self._itr = None

    def __len__(self) -> int:
        return self._size

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            if self._itr is None or not self.keep_state:
                self._itr = iter(self.ds)
            for _ in range(self._size):
                dp = next(self._itr, _END)
                if dp is _END:
                    self._itr = iter(self.ds)
                    dp = next(self._itr, _END)
                    if dp is _END:
                        raise ValueError("FixedSizeData: the wrapped DataFlow yielded no datapoint, "
                                         "so no epoch can be filled")
                yield dp


class RepeatedData(ProxyDataFlow):
    """Iterate the input ``num`` times per epoch; ``num=-1`` repeats forever.

    Example::

        ds = RepeatedData(ds, 3)     # len(ds) * 3 datapoints
        ds = RepeatedData(ds, -1)    # an infinite stream
    """

    def __init__(self, ds: Any, num: int):
        super().__init__(check_dataflow(ds, "RepeatedData"))
        if isinstance(num, bool) or not isinstance(num, (int, np.integer)) or num < -1:
            raise ValueError(f"RepeatedData num must be an int >= 0, or -1 for forever; got {num!r}")
        self.num = int(num)

    def __len__(self) -> int:
        if self.num == -1:
            raise DataFlowSizeUnknown("RepeatedData(num=-1) is infinite")
        return _size_of(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        if self.num != -1:
            for _ in range(self.num):
                yield from self.ds
            return
        while True:
            empty = True
            for dp in self.ds:
                empty = False
                yield dp
            if empty:  # never spin forever on an empty input
                raise ValueError("RepeatedData(num=-1) wraps a DataFlow that yielded no datapoint; "
                                 "it would loop forever")


class RepeatedDataPoint(ProxyDataFlow):
    """Yield each datapoint ``num`` times in a row (the same object each time).

    Example::

        ds = RepeatedDataPoint(ds, 2)   # a, a, b, b, ...
    """

    def __init__(self, ds: Any, num: int):
        super().__init__(check_dataflow(ds, "RepeatedDataPoint"))
        self.num = _check_int(num, "RepeatedDataPoint num", 1)

    def __len__(self) -> int:
        return _size_of(self.ds) * self.num

    def __iter__(self) -> Iterator[Any]:
        num = self.num
        for dp in self.ds:
            for _ in range(num):
                yield dp


# ---------------------------------------------------------------------------------------------
# shuffling and caching

class LocallyShuffleData(ProxyDataFlow):
    """Shuffle a stream through a buffer of ``buffer_size`` datapoints.

    Every epoch is one pass of the input in which each datapoint is yielded
    ``num_reuse`` times; the buffer is drained (shuffled) at the end of the pass,
    so ``len()`` is exactly ``len(ds) * num_reuse`` and no datapoint is lost or
    carried into the next epoch (tensorpack instead streams the input forever).

    By default each new datapoint replaces one drawn at random from the full
    buffer, which is then yielded (as ``tf.data``'s shuffle). With
    ``shuffle_interval=k`` the tensorpack scheme is used instead: a FIFO buffer
    that is shuffled every ``k`` insertions.

    Example::

        ds = LocallyShuffleData(LMDBSerializer.load(path, shuffle=False), 10000)
    """

    def __init__(self, ds: Any, buffer_size: int, num_reuse: int = 1, shuffle_interval: Optional[int] = None):
        super().__init__(check_dataflow(ds, "LocallyShuffleData"))
        self.buffer_size = _check_int(buffer_size, "LocallyShuffleData buffer_size", 1)
        self.num_reuse = _check_int(num_reuse, "LocallyShuffleData num_reuse", 1)
        self.shuffle_interval = (None if shuffle_interval is None
                                 else _check_int(shuffle_interval, "LocallyShuffleData shuffle_interval", 1))
        self.rng = None

    def reset_state(self) -> None:
        super().reset_state()
        self.rng = get_rng(self)

    def __len__(self) -> int:
        return _size_of(self.ds) * self.num_reuse

    def __iter__(self) -> Iterator[Any]:
        if self.rng is None:
            self.rng = get_rng(self)
        if self.shuffle_interval is None:
            buf = yield from self._random_replace()
        else:
            buf = yield from self._fifo_shuffled()
        for k in self.rng.permutation(len(buf)):
            yield buf[k]

    def _random_replace(self):
        rng, cap, reuse = self.rng, self.buffer_size, self.num_reuse
        buf = []
        picks, p = (), 0
        for dp in self.ds:
            for _ in range(reuse):
                if len(buf) < cap:
                    buf.append(dp)
                    continue
                if p == len(picks):  # draw random slots in chunks: one RNG call per 1024 datapoints
                    picks, p = rng.randint(cap, size=1024), 0
                k = picks[p]
                p += 1
                out, buf[k] = buf[k], dp
                yield out
        return buf

    def _fifo_shuffled(self):
        rng, cap, reuse, interval = self.rng, self.buffer_size, self.num_reuse, self.shuffle_interval
        q = deque()
        count = 0
        for dp in self.ds:
            for _ in range(reuse):
                if len(q) == cap:
                    yield q.popleft()
                q.append(dp)
                count += 1
                if count % interval == 0:
                    items = list(q)
                    q = deque(items[k] for k in rng.permutation(len(items)))
        return list(q)


class CacheData(ProxyDataFlow):
    """Keep the datapoints of the first complete epoch in memory and replay them afterwards.

    An epoch that is stopped early is not cached. With ``shuffle`` the replayed
    epochs come in a new random order each time.

    Example::

        ds = CacheData(MapData(DataFromList(files, shuffle=False), load_image), shuffle=True)
    """

    def __init__(self, ds: Any, shuffle: bool = False):
        super().__init__(check_dataflow(ds, "CacheData"))
        self.shuffle = bool(shuffle)
        self.buffer: Optional[list] = None
        self.rng = None
        self._guard = DataFlowReentrantGuard("CacheData")

    def reset_state(self) -> None:
        super().reset_state()
        self.rng = get_rng(self)

    def __len__(self) -> int:
        if self.buffer is not None:
            return len(self.buffer)
        return _size_of(self.ds)

    def __iter__(self) -> Iterator[Any]:
        with self._guard:
            if self.buffer is not None:
                if not self.shuffle:
                    yield from self.buffer
                    return
                if self.rng is None:
                    self.rng = get_rng(self)
                for k in self.rng.permutation(len(self.buffer)):
                    yield self.buffer[k]
                return
            buf = []
            for dp in self.ds:
                buf.append(dp)
                yield dp
            self.buffer = buf


# ---------------------------------------------------------------------------------------------
# several DataFlows

class ConcatData(_MultiDataFlow):
    """Yield all datapoints of the first DataFlow, then of the second, and so on.

    Example::

        ds = ConcatData([train_a, train_b])   # len(train_a) + len(train_b)
    """

    def __init__(self, df_lists: Sequence[Any]):
        super().__init__(df_lists, "ConcatData")

    def __len__(self) -> int:
        return sum(_size_of(d) for d in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        for d in self.df_lists:
            yield from d


class JoinData(_MultiDataFlow):
    """Join datapoints of several DataFlows side by side.

    List datapoints are concatenated (``[a] + [b, c]`` gives ``[a, b, c]``); dict
    datapoints are merged (a key present in two of them is an error). The
    DataFlows must have the same size: a known mismatch fails at construction,
    and one that ends before the others fails when it does.

    Example::

        ds = JoinData([images, labels])   # [img] and [label] -> [img, label]
    """

    def __init__(self, df_lists: Sequence[Any]):
        super().__init__(df_lists, "JoinData")
        sizes = [_try_size(d) for d in self.df_lists]
        known = {i: s for i, s in enumerate(sizes) if s is not None}
        if len(set(known.values())) > 1:
            listed = ", ".join(f"#{i} ({type(self.df_lists[i]).__name__}): {s}" for i, s in known.items())
            raise ValueError(f"JoinData needs DataFlows of the same size, got {listed}")

    def __len__(self) -> int:
        for d in self.df_lists:
            size = _try_size(d)
            if size is not None:
                return size
        raise DataFlowSizeUnknown("JoinData: none of the joined DataFlows knows its size")

    def __iter__(self) -> Iterator[Any]:
        itrs = [iter(d) for d in self.df_lists]
        count = 0
        while True:
            dps = [next(it, _END) for it in itrs]
            ended = [i for i, dp in enumerate(dps) if dp is _END]
            if ended:
                if len(ended) == len(itrs):
                    return
                going = [i for i in range(len(itrs)) if i not in ended]
                raise ValueError(f"JoinData: DataFlow #{ended[0]} ({type(self.df_lists[ended[0]]).__name__}) "
                                 f"ended after {count} datapoints while #{going[0]} still had data; "
                                 "the joined DataFlows must have the same size")
            yield self._join(dps)
            count += 1

    @staticmethod
    def _join(dps: list) -> Any:
        if all(isinstance(dp, dict) for dp in dps):
            out = {}
            for i, dp in enumerate(dps):
                for k, v in dp.items():
                    if k in out:
                        raise ValueError(f"JoinData: key {k!r} of DataFlow #{i} is also in an earlier DataFlow; "
                                         "rename it (MapData) before joining")
                    out[k] = v
            return out
        if all(isinstance(dp, (list, tuple)) for dp in dps):
            out = []
            for dp in dps:
                out.extend(dp)
            return out
        kinds = ", ".join(f"#{i}: {type(dp).__name__}" for i, dp in enumerate(dps))
        raise TypeError(f"JoinData needs all datapoints to be lists, or all dicts; got {kinds}")


def _normalized_probs(probs: Sequence[float], who: str) -> np.ndarray:
    p = np.asarray(probs, dtype=np.float64)
    if p.ndim != 1 or not np.all(np.isfinite(p)) or np.any(p < 0) or p.sum() <= 0:
        raise ValueError(f"{who} probabilities must be non-negative numbers with a positive sum, got {list(probs)}")
    return p / p.sum()


class RandomChooseData(_MultiDataFlow):
    """Yield, at each step, the next datapoint of a DataFlow chosen at random.

    ``df_lists`` is a list of DataFlows (chosen with equal probability) or of
    ``(DataFlow, probability)`` pairs. The epoch ends when the chosen DataFlow
    has no datapoint left, so the size is unknown.

    Example::

        ds = RandomChooseData([(real, 0.7), (synthetic, 0.3)])
    """

    def __init__(self, df_lists: Sequence[Any]):
        pairs = isinstance(df_lists, Sequence) and df_lists and all(
            isinstance(d, tuple) and len(d) == 2 and not is_dataflow(d) for d in df_lists)
        if pairs:
            super().__init__([d for d, _ in df_lists], "RandomChooseData")
            self.probs = _normalized_probs([p for _, p in df_lists], "RandomChooseData")
        else:
            super().__init__(df_lists, "RandomChooseData")
            self.probs = np.full(len(self.df_lists), 1.0 / len(self.df_lists))
        self.rng = None

    def reset_state(self) -> None:
        super().reset_state()
        self.rng = get_rng(self)

    def __len__(self) -> int:
        raise DataFlowSizeUnknown("RandomChooseData ends when a chosen DataFlow runs out, so its size is unknown")

    def __iter__(self) -> Iterator[Any]:
        if self.rng is None:
            self.rng = get_rng(self)
        itrs = [iter(d) for d in self.df_lists]
        cdf = np.cumsum(self.probs)
        while True:
            # choose 1024 flows per RNG call; clip guards the rounding of the last cdf value
            choices = np.minimum(np.searchsorted(cdf, self.rng.random_sample(1024), side="right"), len(itrs) - 1)
            for k in choices:
                dp = next(itrs[k], _END)
                if dp is _END:
                    return
                yield dp


class RandomMixData(_MultiDataFlow):
    """Yield every datapoint of every DataFlow once per epoch, interleaved at random.

    Each DataFlow keeps its own order; which one gives the next datapoint is
    random. All DataFlows must know their size.

    Example::

        ds = RandomMixData([ds_a, ds_b])   # len(ds_a) + len(ds_b)
    """

    def __init__(self, df_lists: Sequence[Any]):
        super().__init__(df_lists, "RandomMixData")
        for i, d in enumerate(self.df_lists):
            if _try_size(d) is None:
                raise ValueError(f"RandomMixData needs DataFlows that know their size; #{i} "
                                 f"({type(d).__name__}) does not. Use RandomChooseData, "
                                 "or FixedSizeData to give it one.")
        self.rng = None

    def reset_state(self) -> None:
        super().reset_state()
        self.rng = get_rng(self)

    def __len__(self) -> int:
        return sum(_size_of(d) for d in self.df_lists)

    def __iter__(self) -> Iterator[Any]:
        if self.rng is None:
            self.rng = get_rng(self)
        sizes = [_size_of(d) for d in self.df_lists]
        order = np.repeat(np.arange(len(sizes)), sizes)
        self.rng.shuffle(order)
        itrs = [iter(d) for d in self.df_lists]
        for k in order:
            dp = next(itrs[k], _END)
            if dp is _END:
                raise ValueError(f"RandomMixData: DataFlow #{k} ({type(self.df_lists[k]).__name__}) ended before "
                                 f"giving the {sizes[k]} datapoints its len() promised")
            yield dp


# ---------------------------------------------------------------------------------------------
# inspection

def _range_text(arr: np.ndarray) -> str:
    if arr.size == 0 or arr.dtype.kind not in "biuf":
        return ""
    if arr.dtype.kind == "f" and not np.all(np.isfinite(arr)):
        finite = arr[np.isfinite(arr)]
        extra = " (has NaN/Inf)"
        if finite.size == 0:
            return " range [non-finite]"
        arr = finite
    else:
        extra = ""
    return f" range [{arr.min():.4g}, {arr.max():.4g}]{extra}"


def _describe(obj: Any, depth: int, max_depth: int, max_list: int, indent: str) -> List[str]:
    """Lines describing ``obj``'s type, dtype, shape and value range, nested up to ``max_depth``."""
    if isinstance(obj, np.ndarray):
        return [f"ndarray {obj.dtype} shape {obj.shape}{_range_text(obj)}"]
    if isinstance(obj, (bool, int, float, complex, np.generic)):
        return [f"{type(obj).__name__} {obj}"]
    if isinstance(obj, (str, bytes)):
        text = repr(obj) if len(obj) <= 40 else repr(obj[:40]) + "..."
        return [f"{type(obj).__name__} of length {len(obj)}: {text}"]
    if isinstance(obj, (list, tuple, dict)):
        kind = "dict" if isinstance(obj, dict) else type(obj).__name__
        head = [f"{kind} of {len(obj)}"]
        if depth >= max_depth:
            return head
        items = list(obj.items()) if isinstance(obj, dict) else list(enumerate(obj))
        lines = head
        for k, v in items[:max_list]:
            sub = _describe(v, depth + 1, max_depth, max_list, indent + "  ")
            lines.append(f"{indent}  [{k!r}] {sub[0]}")
            lines.extend(sub[1:])
        if len(items) > max_list:
            lines.append(f"{indent}  ... {len(items) - max_list} more")
        return lines
    shape, dtype = getattr(obj, "shape", None), getattr(obj, "dtype", None)
    if shape is not None and dtype is not None:  # a tensor of another library
        return [f"{type(obj).__name__} {dtype} shape {tuple(shape)}"]
    text = repr(obj)
    return [f"{type(obj).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"]


class PrintData(ProxyDataFlow):
    """Log the structure of the first ``num`` datapoints (types, dtypes, shapes, value ranges).

    It prints during the first epoch after each ``reset_state()`` (not every
    epoch) through the ``kerastrainer`` logger, and passes datapoints through.

    Args:
        num: how many datapoints to describe.
        name: a label for the log lines (default: the wrapped DataFlow's class).
        max_depth: how deep to describe nested lists and dicts.
        max_list: how many elements of a list or dict to describe.

    Example::

        ds = PrintData(ds, num=2, name='train')
    """

    def __init__(self, ds: Any, num: int = 1, name: Optional[str] = None, max_depth: int = 3, max_list: int = 3):
        super().__init__(check_dataflow(ds, "PrintData"))
        self.num = _check_int(num, "PrintData num", 0)
        self.name = name if name is not None else type(ds).__name__
        self.max_depth = _check_int(max_depth, "PrintData max_depth", 0)
        self.max_list = _check_int(max_list, "PrintData max_list", 0)
        self._printed = False

    def reset_state(self) -> None:
        super().reset_state()
        self._printed = False

    def describe(self, dp: Any, index: int = 0) -> str:
        """The text logged for datapoint number ``index``."""
        lines = _describe(dp, 0, self.max_depth, self.max_list, "")
        return f"DataFlow Info ({self.name}): datapoint {index}: " + "\n".join(lines)

    def __iter__(self) -> Iterator[Any]:
        if self._printed or self.num == 0:
            yield from self.ds
            return
        self._printed = True
        for i, dp in enumerate(self.ds):
            if i < self.num:
                logger.info("%s", self.describe(dp, i))
            yield dp


class TestDataSpeed(ProxyDataFlow):
    """Measure how many datapoints per second a DataFlow produces.

    ``start()`` calls ``reset_state()`` (once), skips ``warmup`` datapoints, then
    times ``size`` datapoints with a tqdm progress bar, restarting the DataFlow
    when an epoch ends; it logs and returns the rate. Iterating this DataFlow runs
    the test first, then yields the input's datapoints.

    Example::

        speed = TestDataSpeed(BatchData(ds, 32), size=200, warmup=10).start()
    """

    __test__ = False  # not a pytest test class

    def __init__(self, ds: Any, size: int = 5000, warmup: int = 0):
        super().__init__(check_dataflow(ds, "TestDataSpeed"))
        self.test_size = _check_int(size, "TestDataSpeed size", 1)
        self.warmup = _check_int(warmup, "TestDataSpeed warmup", 0)
        self._reset_done = False

    def reset_state(self) -> None:
        super().reset_state()
        self._reset_done = True

    def _endless(self) -> Iterator[Any]:
        while True:
            empty = True
            for dp in self.ds:
                empty = False
                yield dp
            if empty:
                raise ValueError("TestDataSpeed: the DataFlow yielded no datapoint")

    def start(self) -> float:
        """Run the test; return datapoints per second."""
        from tqdm import tqdm

        if not self._reset_done:
            self.reset_state()
        itr = self._endless()
        try:
            for _ in range(self.warmup):
                next(itr)
            with tqdm(total=self.test_size, file=sys.stderr, smoothing=0.1, dynamic_ncols=True,
                      desc=f"TestDataSpeed({type(self.ds).__name__})") as pbar:
                t0 = time.perf_counter()
                for _ in range(self.test_size):
                    next(itr)
                    pbar.update(1)
                elapsed = time.perf_counter() - t0
        finally:
            itr.close()
        speed = self.test_size / max(elapsed, 1e-9)
        logger.info("TestDataSpeed: %d datapoints in %.3f s: %.2f datapoints/s", self.test_size, elapsed, speed)
        return speed

    def __iter__(self) -> Iterator[Any]:
        self.start()
        yield from self.ds
