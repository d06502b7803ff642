"""DataFlow sources: DataFromList, DataFromGenerator, DataFromIterable, FakeData."""
import numpy as np
import pytest

from kerastrainer.dataflow import DataFlow, DataFromGenerator, DataFromIterable, DataFromList, FakeData


def epoch(ds):
    return list(ds)


# ------------------------------------------------------------------ DataFromList

def test_data_from_list_in_order_without_shuffle():
    ds = DataFromList([[i] for i in range(7)], shuffle=False)
    ds.reset_state()
    assert len(ds) == 7
    assert epoch(ds) == [[i] for i in range(7)]
    assert epoch(ds) == [[i] for i in range(7)]


def test_data_from_list_shuffles_each_epoch():
    lst = [[i] for i in range(60)]
    ds = DataFromList(lst, shuffle=True)
    ds.reset_state()
    a, b = epoch(ds), epoch(ds)
    assert sorted(a) == lst and sorted(b) == lst
    assert a != lst and a != b  # 60! orders: a repeat by chance is impossible in practice


def test_data_from_list_shuffles_without_reset_state():
    ds = DataFromList([[i] for i in range(10)])
    assert sorted(epoch(ds)) == [[i] for i in range(10)]


def test_data_from_list_is_a_dataflow_with_tensorpack_aliases():
    ds = DataFromList([[1], [2]], shuffle=False)
    assert isinstance(ds, DataFlow)
    assert ds.size() == 2
    assert list(ds.get_data()) == [[1], [2]]


@pytest.mark.parametrize("bad", [iter([1, 2]), "abc", 5, {"a": 1}])
def test_data_from_list_rejects_non_lists(bad):
    with pytest.raises(TypeError, match="DataFromList"):
        DataFromList(bad)


# ------------------------------------------------------------------ DataFromGenerator

def test_data_from_generator_callable_is_reiterable():
    def gen():
        for i in range(4):
            yield [i]

    ds = DataFromGenerator(gen, size=4)
    ds.reset_state()
    assert len(ds) == 4
    assert epoch(ds) == epoch(ds) == [[0], [1], [2], [3]]


def test_data_from_generator_object_iterates_once_then_raises():
    ds = DataFromGenerator(([i] for i in range(3)))
    ds.reset_state()
    assert epoch(ds) == [[0], [1], [2]]
    with pytest.raises(RuntimeError, match="only once"):
        epoch(ds)


def test_data_from_generator_size_unknown():
    ds = DataFromGenerator(lambda: iter([[1]]))
    with pytest.raises(NotImplementedError, match="size"):
        len(ds)


def test_data_from_generator_bad_input():
    with pytest.raises(TypeError, match="DataFromGenerator"):
        DataFromGenerator([1, 2, 3])
    with pytest.raises(ValueError, match="size"):
        DataFromGenerator(lambda: iter([]), size=-1)
    with pytest.raises(TypeError, match="returned int"):
        epoch(DataFromGenerator(lambda: 3))


# ------------------------------------------------------------------ DataFromIterable

def test_data_from_iterable_with_len():
    ds = DataFromIterable(range(5))
    ds.reset_state()
    assert len(ds) == 5
    assert epoch(ds) == epoch(ds) == [0, 1, 2, 3, 4]


def test_data_from_iterable_without_len():
    class Words:
        def __iter__(self):
            return iter([["a"], ["b"]])

    ds = DataFromIterable(Words())
    assert epoch(ds) == [["a"], ["b"]]
    with pytest.raises(NotImplementedError, match="Words"):
        len(ds)


def test_data_from_iterable_rejects_iterators():
    with pytest.raises(TypeError, match="DataFromGenerator"):
        DataFromIterable(iter([1, 2]))
    with pytest.raises(TypeError, match="iterable"):
        DataFromIterable(3)


# ------------------------------------------------------------------ FakeData

def test_fake_data_shapes_dtypes_and_domains():
    ds = FakeData([[4, 3], [], [2]], size=50, dtype=["float16", "int32", "uint8"],
                  domain=[(-2, 2), (0, 10), (5, 7)])
    ds.reset_state()
    assert len(ds) == 50
    dps = epoch(ds)
    assert len(dps) == 50
    img, label, small = dps[0]
    assert img.shape == (4, 3) and img.dtype == np.float16
    assert label.shape == () and label.dtype == np.int32
    assert small.shape == (2,) and small.dtype == np.uint8
    imgs = np.stack([d[0] for d in dps]).astype(np.float64)
    labels = np.array([d[1] for d in dps])
    smalls = np.stack([d[2] for d in dps])
    assert imgs.min() >= -2 and imgs.max() <= 2
    assert set(labels.tolist()) <= set(range(10)) and len(set(labels.tolist())) > 3
    assert set(smalls.ravel().tolist()) <= {5, 6}


def test_fake_data_random_changes_values_fixed_does_not():
    rand = FakeData([[8]], size=3)
    rand.reset_state()
    a, b = epoch(rand)[:2]
    assert not np.array_equal(a[0], b[0])
    fixed = FakeData([[8]], size=3, random=False)
    fixed.reset_state()
    dps = epoch(fixed) + epoch(fixed)
    assert all(np.array_equal(dps[0][0], d[0]) for d in dps)
    dps[0][0] = "edited"  # each datapoint is its own list
    assert isinstance(epoch(fixed)[0][0], np.ndarray)


def test_fake_data_bool_component():
    ds = FakeData([[100]], size=1, dtype="bool")
    ds.reset_state()
    (x,), = epoch(ds)
    assert x.dtype == np.bool_ and x.any() and not x.all()


@pytest.mark.parametrize("kwargs, err, match", [
    (dict(shapes=[3, 4]), ValueError, "component 0"),
    (dict(shapes=[]), TypeError, "non-empty"),
    (dict(shapes=[[2], [3]], dtype=["float32"]), ValueError, "1 dtypes for 2 shapes"),
    (dict(shapes=[[2]], dtype="int32", domain=(0.2, 0.8)), ValueError, "holds no integer"),
    (dict(shapes=[[2]], domain=(1, 1)), ValueError, "low < high"),
    (dict(shapes=[[2]], dtype="str"), TypeError, "dtype"),
    (dict(shapes=[[2]], size=-3), ValueError, "size"),
])
def test_fake_data_bad_arguments(kwargs, err, match):
    with pytest.raises(err, match=match):
        FakeData(**kwargs)
