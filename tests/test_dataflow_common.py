"""DataFlow combinators of kerastrainer.dataflow.common."""
import itertools
import logging
import threading
from collections import Counter

import numpy as np
import pytest

from kerastrainer.dataflow import (BatchData, BatchDataByShape, CacheData, ConcatData, DataFromGenerator,
                                   DataFromList, FixedSizeData, JoinData, LocallyShuffleData, MapData,
                                   MapDataComponent, PrintData, RandomChooseData, RandomMixData, RepeatedData,
                                   RepeatedDataPoint, SelectComponent, TestDataSpeed)


class Counting:
    """A duck-typed DataFlow (no base class) that counts reset_state() calls and epochs."""

    def __init__(self, dps, with_len=True):
        self.dps = list(dps)
        self.with_len = with_len
        self.resets = 0
        self.epochs = 0
        self.closed = False

    def reset_state(self):
        self.resets += 1

    def __iter__(self):
        self.epochs += 1
        return iter(self.dps)

    def __len__(self):
        if not self.with_len:
            raise NotImplementedError("no size")
        return len(self.dps)

    def close(self):
        self.closed = True


def ordered(n, make=lambda i: [i]):
    return DataFromList([make(i) for i in range(n)], shuffle=False)


def run(ds):
    ds.reset_state()
    return list(ds)


# ------------------------------------------------------------------ BatchData

def test_batch_data_stacks_and_keeps_array_dtypes():
    ds = ordered(6, lambda i: [np.full((2, 3), i, np.uint8), np.float64(i), np.arange(2, dtype=np.float16)])
    (a, b, c), = run(BatchData(ds, 6))
    assert a.shape == (6, 2, 3) and a.dtype == np.uint8
    assert b.shape == (6,) and b.dtype == np.float64
    assert c.shape == (6, 2) and c.dtype == np.float16
    np.testing.assert_array_equal(a[:, 0, 0], np.arange(6))


def test_batch_data_python_scalars_follow_tensorpack_dtypes():
    ds = ordered(4, lambda i: [i, i * 0.5, i % 2 == 0, f"s{i}", b"x"])
    (ints, floats, bools, strs, raw), = run(BatchData(ds, 4))
    assert ints.dtype == np.int32 and ints.tolist() == [0, 1, 2, 3]
    assert floats.dtype == np.float32
    assert bools.dtype == np.bool_ and bools.tolist() == [True, False, True, False]
    assert strs.tolist() == ["s0", "s1", "s2", "s3"]
    assert raw.dtype.kind == "S"
    (big,), = run(BatchData(DataFromList([[1], [2 ** 40]], shuffle=False), 2))
    assert big.dtype == np.int64 and big[1] == 2 ** 40


def test_batch_data_dict_and_nested_components():
    ds = ordered(5, lambda i: {"img": np.zeros((2, 2), np.float32) + i,
                               "meta": {"id": i, "box": [np.ones(4) * i, i * 1.0]}})
    batches = run(BatchData(ds, 2, remainder=True))
    assert len(batches) == 3
    first = batches[0]
    assert set(first) == {"img", "meta"}
    assert first["img"].shape == (2, 2, 2)
    assert first["meta"]["id"].tolist() == [0, 1]
    box, score = first["meta"]["box"]
    assert box.shape == (2, 4) and score.dtype == np.float32
    assert batches[2]["img"].shape == (1, 2, 2)


@pytest.mark.parametrize("n, bs, remainder, expected", [
    (10, 3, False, [3, 3, 3]), (10, 3, True, [3, 3, 3, 1]), (9, 3, True, [3, 3, 3]), (9, 3, False, [3, 3, 3]),
    (2, 5, True, [2]),
])
def test_batch_data_len_matches_batches(n, bs, remainder, expected):
    ds = BatchData(ordered(n), bs, remainder=remainder)
    batches = run(ds)
    assert [len(b[0]) for b in batches] == expected
    assert len(ds) == len(expected)


def test_batch_data_shape_mismatch_names_component_and_shapes():
    ds = ordered(4, lambda i: [np.zeros(2), np.zeros((3, 4 + (i == 2)))])
    with pytest.raises(ValueError) as e:
        run(BatchData(ds, 4))
    msg = str(e.value)
    assert "component [1]" in msg and "(3, 4)" in msg and "(3, 5) at datapoint 2" in msg


def test_batch_data_shape_mismatch_names_dict_key():
    ds = ordered(2, lambda i: {"x": np.zeros(i + 1)})
    with pytest.raises(ValueError, match=r"component \['x'\].*\(1,\).*\(2,\)"):
        run(BatchData(ds, 2))


def test_batch_data_use_list():
    ds = ordered(4, lambda i: [np.zeros(i + 1), i])
    (ragged, labels), = run(BatchData(ds, 4, use_list=True))
    assert isinstance(ragged, list) and [len(x) for x in ragged] == [1, 2, 3, 4]
    assert labels == [0, 1, 2, 3]
    (ragged, labels), = run(BatchData(ds, 4, use_list=[True, False]))
    assert isinstance(ragged, list) and labels.dtype == np.int32
    dds = ordered(2, lambda i: {"a": np.zeros(i + 1), "b": i})
    b, = run(BatchData(dds, 2, use_list={"a": True}))
    assert isinstance(b["a"], list) and isinstance(b["b"], np.ndarray)
    with pytest.raises(ValueError, match="use_list has 1 entries"):
        run(BatchData(ds, 4, use_list=[True]))


def test_batch_data_bad_input():
    with pytest.raises(ValueError, match="larger than the DataFlow's size 3"):
        BatchData(ordered(3), 4)
    with pytest.raises(ValueError, match="batch_size"):
        BatchData(ordered(3), 0)
    with pytest.raises(TypeError, match="DataFromList"):
        BatchData([[1], [2]], 1)
    with pytest.raises(ValueError, match="datapoint 1 is a list of 1"):
        run(BatchData(DataFromList([[1, 2], [3]], shuffle=False), 2))
    with pytest.raises(TypeError, match="list or dict datapoints"):
        run(BatchData(DataFromList([1, 2], shuffle=False), 2))
    with pytest.raises(TypeError, match=r"component \[0\] of type object.*use_list"):
        run(BatchData(DataFromList([[object()], [object()]], shuffle=False), 2))


def test_batch_data_of_unknown_size():
    ds = BatchData(DataFromGenerator(lambda: iter([[i] for i in range(5)])), 2)
    with pytest.raises(NotImplementedError):
        len(ds)
    assert len(run(ds)) == 2  # list() works although len() is unknown


# ------------------------------------------------------------------ BatchDataByShape

def test_batch_data_by_shape_groups_and_keeps_leftovers():
    shapes = [(2,), (3,), (2,), (3,), (2,)]
    ds = BatchDataByShape(DataFromList([[np.zeros(s), i] for i, s in enumerate(shapes)], shuffle=False), 2, idx=0)
    ds.reset_state()
    first = list(ds)
    assert [(b[0].shape, b[1].tolist()) for b in first] == [((2, 2), [0, 2]), ((2, 3), [1, 3])]
    second = list(ds)  # the (2,) left over from epoch 1 pairs with the first (2,) of epoch 2
    assert [b[1].tolist() for b in second][0] == [4, 0]
    assert len(ds) == 5 // 2   # tensorpack's: BatchData's len, what a pass makes on average


def test_batch_data_by_shape_bad_index():
    ds = BatchDataByShape(ordered(4), 2, idx=3)
    with pytest.raises(IndexError, match="component 3 does not exist in a datapoint with 1 components"):
        run(ds)


# ------------------------------------------------------------------ MapData / MapDataComponent

def test_map_data_transforms_and_drops():
    ds = MapData(ordered(6), lambda dp: None if dp[0] % 2 else [dp[0] * 10])
    assert run(ds) == [[0], [20], [40]]
    assert len(ds) == 6  # the input's size: an upper bound


def test_map_data_does_not_change_the_producers_datapoints():
    lst = [[1, 2], [3, 4]]

    def edit(dp):
        dp[0] = "x"
        return dp

    assert run(MapData(DataFromList(lst, shuffle=False), edit)) == [["x", 2], ["x", 4]]
    assert lst == [[1, 2], [3, 4]]


def test_map_data_component_list_dict_and_tuple():
    lst = [[np.ones(2) * i, i] for i in range(3)]
    out = run(MapDataComponent(DataFromList(lst, shuffle=False), lambda x: x + 1, index=1))
    assert [dp[1] for dp in out] == [1, 2, 3]
    assert [dp[1] for dp in lst] == [0, 1, 2]  # the input datapoints are untouched
    assert all(out[i] is not lst[i] for i in range(3))
    dicts = [{"a": i, "b": -i} for i in range(3)]
    out = run(MapDataComponent(DataFromList(dicts, shuffle=False), lambda b: b * 2, index="b"))
    assert out == [{"a": i, "b": -2 * i} for i in range(3)] and dicts[1] == {"a": 1, "b": -1}
    out = run(MapDataComponent(DataFromList([(1, 2)], shuffle=False), str, index=0))
    assert out == [["1", 2]]


def test_map_data_component_none_drops_and_bad_index():
    ds = MapDataComponent(ordered(5), lambda x: x if x > 2 else None)
    assert run(ds) == [[3], [4]]
    with pytest.raises(IndexError, match="component 'z' does not exist in a dict datapoint with keys"):
        run(MapDataComponent(DataFromList([{"a": 1}], shuffle=False), str, index="z"))
    with pytest.raises(TypeError, match="callable"):
        MapDataComponent(ordered(2), "not a function")


# ------------------------------------------------------------------ SelectComponent

def test_select_component():
    ds = SelectComponent(ordered(3, lambda i: [i, -i, 10 * i]), [2, 0])
    assert run(ds) == [[0, 0], [10, 1], [20, 2]] and len(ds) == 3
    ds = SelectComponent(DataFromList([{"a": 1, "b": 2}], shuffle=False), ["b", "a"])
    assert run(ds) == [[2, 1]]
    with pytest.raises(IndexError, match="component 5"):
        run(SelectComponent(ordered(2), [0, 5]))


# ------------------------------------------------------------------ FixedSizeData, RepeatedData, RepeatedDataPoint

def test_fixed_size_data_keeps_state_across_epochs():
    ds = FixedSizeData(ordered(5), 3)
    ds.reset_state()
    assert len(ds) == 3
    assert [list(ds) for _ in range(3)] == [[[0], [1], [2]], [[3], [4], [0]], [[1], [2], [3]]]


def test_fixed_size_data_without_keep_state_restarts():
    ds = FixedSizeData(ordered(5), 7, keep_state=False)
    ds.reset_state()
    assert list(ds) == list(ds) == [[0], [1], [2], [3], [4], [0], [1]]


def test_fixed_size_data_empty_input_raises():
    with pytest.raises(ValueError, match="yielded no datapoint"):
        run(FixedSizeData(DataFromList([], shuffle=False), 3))


def test_fixed_size_data_is_not_reentrant():
    ds = FixedSizeData(ordered(5), 4)
    ds.reset_state()
    first = iter(ds)
    next(first)
    with pytest.raises(threading.ThreadError, match="FixedSizeData"):
        next(iter(ds))
    first.close()
    assert len(list(ds)) == 4


def test_repeated_data():
    ds = RepeatedData(ordered(3), 2)
    assert run(ds) == [[0], [1], [2]] * 2 and len(ds) == 6
    assert run(RepeatedData(ordered(3), 0)) == []
    forever = RepeatedData(ordered(3), -1)
    forever.reset_state()
    assert list(itertools.islice(forever, 10)) == ([[0], [1], [2]] * 4)[:10]
    with pytest.raises(NotImplementedError, match="infinite"):
        len(forever)
    with pytest.raises(ValueError, match="loop forever"):
        next(iter(RepeatedData(DataFromList([]), -1)))
    with pytest.raises(ValueError, match="-1 for forever"):
        RepeatedData(ordered(3), -2)


def test_repeated_datapoint():
    ds = RepeatedDataPoint(ordered(3), 2)
    assert run(ds) == [[0], [0], [1], [1], [2], [2]] and len(ds) == 6
    with pytest.raises(ValueError, match="num"):
        RepeatedDataPoint(ordered(3), 0)


# ------------------------------------------------------------------ LocallyShuffleData

@pytest.mark.parametrize("interval", [None, 4])
def test_locally_shuffle_data_is_a_local_permutation(interval):
    n, buf = 200, 16
    ds = LocallyShuffleData(ordered(n), buf, shuffle_interval=interval)
    ds.reset_state()
    out = [dp[0] for dp in ds]
    assert sorted(out) == list(range(n)) and len(ds) == n
    assert out != list(range(n))
    # a datapoint cannot come out before it entered the buffer
    assert all(pos >= v - buf for pos, v in enumerate(out))
    second = [dp[0] for dp in ds]
    assert sorted(second) == list(range(n)) and second != out


def test_locally_shuffle_data_num_reuse_and_small_input():
    ds = LocallyShuffleData(ordered(10), 100, num_reuse=3)
    ds.reset_state()
    out = [dp[0] for dp in ds]
    assert Counter(out) == {i: 3 for i in range(10)} and len(ds) == 30
    with pytest.raises(ValueError, match="buffer_size"):
        LocallyShuffleData(ordered(10), 0)


# ------------------------------------------------------------------ CacheData

def test_cache_data_reads_input_once():
    src = Counting([[i] for i in range(5)])
    ds = CacheData(src)
    ds.reset_state()
    assert len(ds) == 5
    assert list(ds) == list(ds) == list(ds) == [[i] for i in range(5)]
    assert src.epochs == 1


def test_cache_data_shuffles_replays_and_skips_incomplete_epochs():
    src = Counting([[i] for i in range(50)])
    ds = CacheData(src, shuffle=True)
    ds.reset_state()
    itr = iter(ds)
    next(itr)
    itr.close()  # stopped early: not cached
    first = list(ds)
    assert first == [[i] for i in range(50)] and src.epochs == 2
    again = list(ds)
    assert sorted(again) == first and again != first and src.epochs == 2


def test_cache_data_is_not_reentrant():
    ds = CacheData(ordered(3))
    ds.reset_state()
    itr = iter(ds)
    next(itr)
    with pytest.raises(threading.ThreadError):
        next(iter(ds))


# ------------------------------------------------------------------ several DataFlows

def test_concat_data_forwards_protocol():
    a, b = Counting([[1], [2]]), Counting([[3]])
    ds = ConcatData([a, b])
    assert run(ds) == [[1], [2], [3]] and len(ds) == 3
    assert a.resets == b.resets == 1
    ds.close()
    assert a.closed and b.closed
    with pytest.raises(TypeError, match=r"ConcatData \(DataFlow #1\)"):
        ConcatData([a, [1, 2]])


def test_join_data_lists_and_dicts():
    ds = JoinData([ordered(3), ordered(3, lambda i: [-i, "x"])])
    assert run(ds) == [[0, 0, "x"], [1, -1, "x"], [2, -2, "x"]] and len(ds) == 3
    dds = JoinData([ordered(2, lambda i: {"a": i}), ordered(2, lambda i: {"b": -i})])
    assert run(dds) == [{"a": 0, "b": 0}, {"a": 1, "b": -1}]


def test_join_data_size_errors():
    with pytest.raises(ValueError, match=r"same size.*#0 \(DataFromList\): 3, #1 \(DataFromList\): 4"):
        JoinData([ordered(3), ordered(4)])
    short = Counting([[0], [1]], with_len=False)
    with pytest.raises(ValueError, match=r"#1 \(Counting\) ended after 2 datapoints while #0 still had data"):
        run(JoinData([ordered(3), short]))
    with pytest.raises(ValueError, match="key 'a' of DataFlow #1"):
        run(JoinData([ordered(1, lambda i: {"a": 1}), ordered(1, lambda i: {"a": 2})]))
    with pytest.raises(TypeError, match="to be lists, or all dicts; got #0: list, #1: dict"):
        run(JoinData([ordered(1), ordered(1, lambda i: {"a": 2})]))


def test_random_choose_data():
    ds = RandomChooseData([(ordered(5), 1.0), (ordered(5, lambda i: [-1]), 0.0)])
    assert run(ds) == [[i] for i in range(5)]  # stops when the chosen DataFlow runs out
    with pytest.raises(NotImplementedError):
        len(ds)
    mixed = run(RandomChooseData([ordered(300), ordered(300, lambda i: [-1])]))
    assert 0 < sum(dp[0] == -1 for dp in mixed) < len(mixed)
    with pytest.raises(ValueError, match="probabilities"):
        RandomChooseData([(ordered(2), -1.0), (ordered(2), 2.0)])


def test_random_mix_data_keeps_each_order_and_every_datapoint():
    ds = RandomMixData([ordered(30), ordered(20, lambda i: [100 + i])])
    out = [dp[0] for dp in run(ds)]
    assert len(ds) == 50 and sorted(out) == list(range(30)) + list(range(100, 120))
    assert [v for v in out if v < 100] == list(range(30))
    assert out != sorted(out)
    with pytest.raises(ValueError, match=r"#1 \(Counting\) does not"):
        RandomMixData([ordered(3), Counting([[1]], with_len=False)])

    class Liar(Counting):
        def __len__(self):
            return 5

    with pytest.raises(ValueError, match="ended before giving the 5 datapoints"):
        run(RandomMixData([ordered(2), Liar([[1]])]))


# ------------------------------------------------------------------ PrintData, TestDataSpeed

@pytest.fixture
def log_lines():
    lines = []

    class Grab(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())

    lg = logging.getLogger("kerastrainer")
    handler = Grab()
    lg.addHandler(handler)
    yield lines
    lg.removeHandler(handler)


def test_print_data_describes_first_datapoints(log_lines):
    dp = [np.linspace(-1, 3, 12, dtype=np.float32).reshape(3, 4), {"name": "cat", "ids": list(range(10))},
          7, "extra"]
    ds = PrintData(DataFromList([dp, dp, dp], shuffle=False), num=2, name="train", max_list=3)
    assert run(ds) == [dp] * 3
    text = "\n".join(log_lines)
    assert len(log_lines) == 2 and "DataFlow Info (train): datapoint 1" in text
    assert "ndarray float32 shape (3, 4) range [-1, 3]" in text
    assert "int 7" in text and "['name'] str of length 3: 'cat'" in text and "['ids'] list of 10" in text
    assert "... 7 more" in text and "... 1 more" in text  # max_list=3 of 10 ids, of 4 components
    assert "extra" not in text
    list(ds)
    assert len(log_lines) == 2  # only the first epoch after reset_state prints


def test_print_data_max_depth(log_lines):
    run(PrintData(DataFromList([[[[np.zeros(2)]]]], shuffle=False), max_depth=1))
    assert "ndarray" not in log_lines[0] and "list of 1" in log_lines[0]


def test_test_data_speed(log_lines):
    src = Counting([[i] for i in range(7)])
    tester = TestDataSpeed(src, size=20, warmup=3)
    speed = tester.start()
    assert speed > 0 and src.resets == 1 and src.epochs >= 3  # restarted the 7-datapoint input
    assert any("datapoints/s" in line for line in log_lines)
    assert list(tester) == src.dps and src.resets == 1
    with pytest.raises(ValueError, match="no datapoint"):
        TestDataSpeed(DataFromList([]), size=5).start()
