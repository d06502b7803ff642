"""The msgpack wire format: exact round trips, zero copy, clear errors on bad input."""
import numpy as np
import pytest
import zmq

from kerastrainer.dataflow import wire

ENCODINGS = {
    "buffer": (wire.dumps, wire.loads),
    "frames": (wire.dumps_frames, wire.loads_frames),
}


@pytest.fixture(params=sorted(ENCODINGS))
def codec(request):
    return ENCODINGS[request.param]


def roundtrip(codec, obj):
    enc, dec = codec
    return dec(enc(obj))


def assert_same_array(a, b):
    assert isinstance(b, np.ndarray)
    assert b.dtype == a.dtype
    assert b.shape == a.shape
    assert np.array_equal(a, b) or (a.dtype.kind in "fc" and np.array_equal(a, b, equal_nan=True))


STRUCTURED = np.dtype([("x", "<i4"), ("y", "<f8", (2,)), ("name", "S4")])


@pytest.mark.parametrize("dtype", [np.bool_, np.uint8, np.int8, np.int16, np.uint32, np.int64, np.float16,
                                   np.float32, np.float64, np.complex64, ">i4", "S5", "U3", "datetime64[ms]",
                                   STRUCTURED])
@pytest.mark.parametrize("shape", [(), (0,), (3, 4), (2, 0, 3), (64, 40)])
def test_array_roundtrip(codec, dtype, shape):
    rng = np.random.RandomState(0)
    n = int(np.prod(shape))
    raw = rng.randint(0, 200, size=max(n, 1) * np.dtype(dtype).itemsize).astype(np.uint8).tobytes()
    if np.dtype(dtype).kind in "fc":
        a = np.asarray(rng.randn(*shape)).astype(dtype)
    elif np.dtype(dtype).kind == "U":
        a = np.array(["ab", "ĉd", "e"] * n, dtype=dtype)[:n].reshape(shape)
    else:
        a = np.frombuffer(raw, dtype=dtype, count=n).reshape(shape)
    assert_same_array(a, roundtrip(codec, a))


@pytest.mark.parametrize("make", [
    lambda a: a.T,
    lambda a: a[::2, 1::3],
    lambda a: np.asfortranarray(a),
    lambda a: a[:, ::-1],
])
def test_non_contiguous_arrays(codec, make):
    base = np.arange(200 * 30, dtype=np.float32).reshape(200, 30)
    a = make(base)
    out = roundtrip(codec, a)
    assert_same_array(a, out)
    assert out.flags.c_contiguous


def test_numpy_scalars_stay_numpy_scalars(codec):
    scalars = [np.float64(1.5), np.float32(-2.25), np.int64(-7), np.uint8(255), np.bool_(True),
               np.float16(0.5), np.complex128(1 + 2j), np.str_("hi"), np.bytes_(b"\x00a")]
    out = roundtrip(codec, scalars)
    for s, o in zip(scalars, out):
        assert type(o) is type(s), (s, o)
        assert o == s


def test_python_values_and_nesting(codec):
    obj = {"img": np.ones((20, 20), np.uint8), "meta": {"id": 3, "name": "é", "raw": b"\xff\x00",
                                                       "none": None, "f": 0.1, "ok": False},
           7: [1, [2, (3, np.int32(4))]], "big": -(2 ** 63), "t": (1, "a")}
    out = roundtrip(codec, obj)
    assert out["meta"] == obj["meta"]
    assert type(out["meta"]["ok"]) is bool
    assert out[7] == [1, [2, [3, 4]]]          # tuples come back as lists
    assert type(out[7][1][1][1]) is np.int32
    assert out["t"] == [1, "a"]
    assert out["big"] == -(2 ** 63)
    assert_same_array(obj["img"], out["img"])


def test_object_dtype_is_refused_clearly(codec):
    with pytest.raises(TypeError, match="dtype object"):
        codec[0]([np.array([1, "a"], dtype=object)])


def test_unknown_type_is_refused_clearly(codec):
    with pytest.raises(TypeError, match="set"):
        codec[0]([{1, 2}])


def test_large_array_sent_without_copy():
    a = np.arange(100_000, dtype=np.int32)
    frames = wire.dumps_frames([a, 1])
    assert len(frames) == 2
    assert np.shares_memory(np.frombuffer(frames[1], np.uint8), a)


def test_loads_returns_views_into_the_buffer():
    a = np.arange(10_000, dtype=np.float64)
    buf = bytearray(wire.dumps([a]))
    (out,) = wire.loads(buf)
    assert np.shares_memory(out, np.frombuffer(buf, np.uint8))
    assert out.ctypes.data % 64 == np.frombuffer(buf, np.uint8).ctypes.data % 64  # aligned offset
    assert not wire.loads(bytes(buf))[0].flags.writeable


def test_zmq_frames_zero_copy_roundtrip():
    ctx = zmq.Context()
    a, b = ctx.socket(zmq.PAIR), ctx.socket(zmq.PAIR)
    try:
        a.bind("inproc://wire-test")
        b.connect("inproc://wire-test")
        img = np.random.RandomState(1).randint(0, 255, (8, 64, 64, 3)).astype(np.uint8)
        a.send_multipart(wire.dumps_frames([img, np.int64(3), "x"]), copy=False)
        frames = b.recv_multipart(copy=False)
        out_img, label, s = wire.loads_frames(frames)
        assert_same_array(img, out_img)
        assert np.shares_memory(out_img, np.frombuffer(frames[1].buffer, np.uint8))
        assert out_img.flags.writeable
        assert type(label) is np.int64 and label == 3 and s == "x"
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


@pytest.mark.parametrize("frames", [
    [],
    [b"garbage"],
    [b""],
    [wire.HEADER_MAGIC + b"\xc1"],                         # msgpack reserved byte
    [wire.HEADER_MAGIC + b"\x91"],                         # truncated list
    [wire.HEADER_MAGIC + b"\xc7\x03\x09abc"],              # unknown extension
])
def test_malformed_frames_raise_value_error(frames):
    with pytest.raises(ValueError, match="Malformed"):
        wire.loads_frames(frames)


def test_frame_count_and_size_mismatch_raise_value_error():
    frames = wire.dumps_frames([np.zeros(5000, np.uint8)])
    with pytest.raises(ValueError, match="out of range"):
        wire.loads_frames(frames[:1])
    with pytest.raises(ValueError, match="refers to"):
        wire.loads_frames(frames + [b"extra"])
    with pytest.raises(ValueError, match="expected 5000"):
        wire.loads_frames([frames[0], b"\0" * 10])


def test_malformed_buffer_raises_value_error():
    good = wire.dumps([np.zeros(5000, np.uint8), "x"])
    for bad in (b"", b"garbage", good[:10], good[:-100], b"KTB1" + b"\xff" * 40):
        with pytest.raises(ValueError, match="Malformed"):
            wire.loads(bad)
    assert wire.loads(good)[1] == "x"


def _ext_header(code, payload):
    import msgpack
    return wire.HEADER_MAGIC + msgpack.packb(msgpack.ExtType(code, msgpack.packb(payload, use_bin_type=True)),
                                             use_bin_type=True)


_NESTED = "<i4"
for _ in range(30):
    _NESTED = [["a", _NESTED]]


@pytest.mark.parametrize("payload", [
    ["i4,(", [1], b"\0" * 4],            # numpy would parse this with ast (SyntaxError)
    ["O", [1], b"\0" * 8],               # object dtype
    ["i4,O", [1], b"\0" * 12],
    [[["a", "O"]], [1], b"\0" * 8],      # object field in a structured dtype
    ["(2)i4,f8", [1], b"\0" * 16],       # comma strings are never accepted
    [_NESTED, [1], b"\0" * 4],
    [5, [1], b"\0"],
    ["<i4", [-1], b""],
    ["<i4", [2 ** 62, 4], b""],          # element count past int64
    ["<i4", "abc", b""],
    ["<i4", [1], "text"],
    [[["a", "<i4"], ["a", "<i4"]], [1], b"\0" * 8],
])
def test_hostile_array_headers_raise_value_error(payload):
    with pytest.raises(ValueError, match="Malformed"):
        wire.loads_frames([_ext_header(1, payload)])
    if payload[0] != "<i4":  # a scalar of the same dtype
        with pytest.raises(ValueError, match="Malformed"):
            wire.loads_frames([_ext_header(3, [payload[0], b"\0" * 4])])


def test_random_corruption_only_ever_raises_value_error():
    import random
    rng = random.Random(0)
    dp = [np.zeros((3, 4), np.float32), np.int64(3), "x", {"a": [1, 2.0, None]}, np.zeros(2000, np.uint8),
          np.zeros(2, STRUCTURED)]
    frames = [bytes(f) for f in wire.dumps_frames(dp)]
    buf = wire.dumps(dp)
    for _ in range(3000):
        h = bytearray(frames[0])
        for _ in range(rng.randint(1, 4)):
            h[rng.randrange(4, len(h))] = rng.randrange(256)
        b = bytearray(buf)
        b[rng.randrange(len(b))] = rng.randrange(256)
        for decode, arg in ((wire.loads_frames, [bytes(h)] + frames[1:]), (wire.loads, bytes(b))):
            try:
                decode(arg)
            except ValueError:
                pass


def test_max_bytes_refuses_large_messages():
    dp = [np.zeros(5000, np.uint8)]
    frames = wire.dumps_frames(dp)
    assert wire.message_nbytes(frames) > 5000
    with pytest.raises(ValueError, match="over the limit of 4096"):
        wire.loads_frames(frames, max_bytes=4096)
    with pytest.raises(ValueError, match="over the limit of 4096"):
        wire.loads(wire.dumps(dp), max_bytes=4096)
    assert wire.loads_frames(frames, max_bytes=1 << 20)[0].shape == (5000,)
    with pytest.raises(ValueError, match="max_message_bytes=10"):
        wire.check_message_size(11, 10, "sender")
    wire.check_message_size(11, None, "sender")
