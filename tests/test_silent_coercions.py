"""Arguments and values that used to be changed silently (truncated, wrapped, dropped, overflowed)
and now either keep their value or raise an error naming the argument and the value."""
import glob
import os

import numpy as np
import pytest

from kerastrainer.callbacks import ModelSaver, Monitors, TFEventWriter
from kerastrainer.dataflow import DataFromList
from kerastrainer.dataflow import imgaug
from kerastrainer.dataflow.imgaug import CropTransform, FlipTransform, ResizeTransform
from kerastrainer.dataflow.parallel import MultiProcessRunner, MultiProcessRunnerZMQ, MultiThreadRunner
from kerastrainer.dataflow.parallel_map import MultiProcessMapDataZMQ, MultiThreadMapData
from kerastrainer.utils.casting import whole_number
from kerastrainer.callbacks.trainer_view import TrainerView

NOT_WHOLE = [(2.7, ValueError), ("3", TypeError), (True, TypeError), (float("nan"), ValueError)]


def _ds():
    return DataFromList([[1], [2]], shuffle=False)


def _ident(dp):
    return dp


# --- the helper ----------------------------------------------------------------------------------
def test_whole_number_accepts_ints_numpy_ints_and_whole_floats():
    assert [whole_number(v, "x") for v in (3, np.int64(3), np.uint8(3), 3.0, np.float32(3))] == [3] * 5
    assert all(type(whole_number(v, "x")) is int for v in (np.int64(3), 3.0))
    for value, error in NOT_WHOLE:
        with pytest.raises(error, match=r"Thing\(n=\.\.\.\) must be a whole number"):
            whole_number(value, "Thing(n=...)")
    with pytest.raises(ValueError, match=r"Thing\(n=\.\.\.\) must be >= 1, got 0"):
        whole_number(0, "Thing(n=...)", minimum=1)


# --- 1. int() truncation of counts ---------------------------------------------------------------
@pytest.mark.parametrize("value,error", NOT_WHOLE)
def test_model_saver_max_to_keep_is_not_truncated(value, error):
    # before: ModelSaver(max_to_keep=2.7).max_to_keep == 2, and "3" became 3, True became 1
    with pytest.raises(error, match=r"ModelSaver\(max_to_keep=\.\.\.\).*" + repr(value)[:3].replace("(", r"\(")):
        ModelSaver(max_to_keep=value)


def test_model_saver_max_to_keep_accepts_whole_values():
    assert ModelSaver(max_to_keep=3.0).max_to_keep == 3
    assert ModelSaver(max_to_keep=np.int64(2)).max_to_keep == 2


def test_tf_event_writer_max_queue_and_flush_secs_are_not_truncated():
    # before: max_queue=2.7 became 2; flush_secs=0.0004 became flush_millis=0; flush_secs=True
    # became one second
    with pytest.raises(ValueError, match=r"TFEventWriter\(max_queue=\.\.\.\).*2\.7"):
        TFEventWriter(max_queue=2.7)
    with pytest.raises(TypeError, match=r"TFEventWriter\(max_queue=\.\.\.\).*'3'"):
        TFEventWriter(max_queue="3")
    with pytest.raises(ValueError, match=r"TFEventWriter\(flush_secs=\.\.\.\).*0\.0004.*millisecond"):
        TFEventWriter(flush_secs=0.0004)
    with pytest.raises(TypeError, match=r"TFEventWriter\(flush_secs=\.\.\.\).*True"):
        TFEventWriter(flush_secs=True)
    with pytest.raises(ValueError, match=r"TFEventWriter\(flush_secs=\.\.\.\).*inf"):
        TFEventWriter(flush_secs=float("inf"))
    w = TFEventWriter(max_queue=np.int32(5), flush_secs=2.5)
    assert (w._max_queue, w._flush_millis) == (5, 2500)


@pytest.mark.parametrize("make,arg", [
    (lambda v: MultiProcessRunnerZMQ(_ds(), num_proc=v), "num_proc"),
    (lambda v: MultiProcessRunnerZMQ(_ds(), hwm=v), "hwm"),
    (lambda v: MultiProcessRunner(_ds(), num_prefetch=v, num_proc=1), "num_prefetch"),
    (lambda v: MultiProcessRunner(_ds(), num_prefetch=1, num_proc=v), "num_proc"),
    (lambda v: MultiThreadRunner(_ds, num_prefetch=v, num_thread=1), "num_prefetch"),
    (lambda v: MultiThreadRunner(_ds, num_prefetch=1, num_thread=v), "num_thread"),
    (lambda v: MultiProcessMapDataZMQ(_ds(), num_proc=v, map_func=_ident), "num_proc"),
    (lambda v: MultiProcessMapDataZMQ(_ds(), 1, map_func=_ident, buffer_size=v), "buffer_size"),
    (lambda v: MultiThreadMapData(_ds(), num_thread=v, map_func=_ident), "num_thread"),
    (lambda v: MultiThreadMapData(_ds(), 1, map_func=_ident, buffer_size=v), "buffer_size"),
])
def test_dataflow_runner_counts_are_not_truncated(make, arg):
    # before: num_proc=2.7 ran 2 processes, buffer_size=2.7 buffered 2, and so on
    with pytest.raises(ValueError, match=rf"\({arg}=\.\.\.\) must be a whole number, got 2\.7"):
        make(2.7)
    with pytest.raises(TypeError, match=rf"\({arg}=\.\.\.\) must be a whole number"):
        make(True)
    ds = make(np.int64(2))   # numpy integers and whole floats are fine
    getattr(ds, "close", lambda: None)()
    ds = make(2.0)
    getattr(ds, "close", lambda: None)()


def test_max_message_bytes_is_not_truncated():
    # before: max_message_bytes=4096.7 became a limit of 4096 bytes
    for make in (lambda v: MultiProcessRunnerZMQ(_ds(), max_message_bytes=v),
                 lambda v: MultiProcessMapDataZMQ(_ds(), 1, map_func=_ident, max_message_bytes=v)):
        with pytest.raises(ValueError, match=r"\(max_message_bytes=\.\.\.\) must be a whole number, got 4096\.7"):
            make(4096.7)
        with pytest.raises(TypeError, match=r"\(max_message_bytes=\.\.\.\) must be a whole number"):
            make("4096")
        assert make(np.int64(4096)).max_message_bytes == 4096
        assert make(None).max_message_bytes is None


def test_runner_counts_keep_their_value():
    r = MultiProcessRunnerZMQ(_ds(), num_proc=np.int64(3), hwm=7.0)
    assert (r.num_proc, r.hwm) == (3, 7) and type(r.num_proc) is int
    m = MultiThreadMapData(_ds(), num_thread=2.0, map_func=_ident, buffer_size=np.uint16(5))
    assert (m.num_thread, m.buffer_size) == (2, 5)


@pytest.mark.parametrize("make,arg", [
    (lambda v: imgaug.Resize((v, 8)), "shape"),
    (lambda v: imgaug.RandomCrop(v), "crop_shape"),
    (lambda v: imgaug.ResizeShortestEdge(v), "size"),
    (lambda v: imgaug.GaussianBlur(size_range=(0, v)), "size_range"),
    (lambda v: imgaug.JpegNoise(quality_range=(v, 100)), "quality_range"),
    (lambda v: imgaug.RandomCropRandomShape(wmin=v, hmin=2), "wmin"),
    (lambda v: imgaug.RandomCropRandomShape(wmin=2, hmin=2, hmax=v), "hmax"),
    (lambda v: imgaug.RandomCutout((1, v), 2), "h_range"),
    (lambda v: imgaug.RandomCutout(2, v), "w_range"),
    (lambda v: imgaug.GaussianDeform([(0.5, 0.5)], (v, 8)), "shape"),
    (lambda v: CropTransform(0, v, 4, 4), "x0"),
    (lambda v: ResizeTransform(8, 8, v, 4), "new_h"),
    (lambda v: FlipTransform(v, 8), "h"),
])
def test_imgaug_sizes_are_not_truncated(make, arg):
    # before: Resize((32.5, 8)) resized to 32 rows, ResizeShortestEdge(224.7) to 224, ...
    with pytest.raises(ValueError, match=rf"{arg}.*2\.7"):
        make(2.7)
    make(np.int64(3))
    make(3.0)


def test_numpy_int_shape_is_accepted():
    # before: Resize(np.int64(4)) was "must be an int or a pair" (only a Python int was a size)
    out = imgaug.Resize(np.int64(4)).augment(np.zeros((8, 8, 3), np.uint8))
    assert out.shape == (4, 4, 3)


# --- 2. TFEventWriter dropped images past 8 -----------------------------------------------------
class _Stub(TrainerView):
    global_step, epoch_num, is_chief = 7, 1, True


def _images_written(d, tf):
    from tensorflow.core.util import event_pb2
    counts = {}
    for path in glob.glob(os.path.join(d, "events.out.tfevents.*")):
        for rec in tf.data.TFRecordDataset(path):
            for v in event_pb2.Event.FromString(rec.numpy()).summary.value:
                # an image summary is a string tensor [width, height, png, png, ...]
                counts[v.tag] = counts.get(v.tag, 0) + len(v.tensor.string_val) - 2
    return counts


def _put_images(d, n, **kwargs):
    mons = Monitors([TFEventWriter(logdir=d, **kwargs)])
    mons.setup_graph(_Stub())
    mons.put_image("batch", np.zeros((n, 6, 6, 3), np.uint8))
    mons.put_image("batch", np.zeros((n, 6, 6, 3), np.uint8))
    mons.after_train()


def test_tf_event_writer_says_when_it_drops_images(tf, tmp_path, kt_log):
    # before: 12 images put, 8 written, nothing said; now all of them (tensorpack's rule) unless
    # max_images= says otherwise, and then a warning says what was dropped
    _put_images(str(tmp_path / "a"), 12, max_images=8)
    assert _images_written(str(tmp_path / "a"), tf) == {"batch": 16}
    warns = [m for m in kt_log.messages if "max_images" in m]
    assert len(warns) == 1 and "'batch'" in warns[0] and "12" in warns[0] and "8" in warns[0], kt_log.messages
    kt_log.clear()
    _put_images(str(tmp_path / "b"), 12)   # the default: all of them
    assert _images_written(str(tmp_path / "b"), tf) == {"batch": 24}
    assert not [m for m in kt_log.messages if "max_images" in m]
    _put_images(str(tmp_path / "c"), 5, max_images=3)
    assert _images_written(str(tmp_path / "c"), tf) == {"batch": 6}
    assert len([m for m in kt_log.messages if "max_images=3" in m]) == 1
    with pytest.raises(ValueError, match=r"TFEventWriter\(max_images=\.\.\.\).*2\.5"):
        TFEventWriter(max_images=2.5)


# --- 3. imgaug dtypes and values ------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint16, np.int16, np.int32])
def test_hue_keeps_integer_values(dtype):
    # before: Hue((0, 0)) on a uint16 image of (3000, 1000, 1000) gave (3000, 999, 999): the float
    # result was truncated by astype
    img = np.zeros((4, 4, 3), dtype)
    img[...] = (3000, 1000, 1000)
    out = imgaug.Hue((0, 0)).augment(img)
    assert out.dtype == img.dtype
    np.testing.assert_array_equal(out, img)
    out = imgaug.Hue((60, 60)).augment(np.full((4, 4, 3), (1000, 10, 10), dtype))   # hue +120 degrees
    assert out.dtype == dtype and sorted(out[0, 0].tolist()) == [10, 10, 1000]      # was 9, 9, 1000


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_hue_float_keeps_dtype(dtype):
    img = (np.random.RandomState(0).rand(4, 4, 3) * 255).astype(dtype)
    out = imgaug.Hue((0, 0)).augment(img)
    assert out.dtype == dtype
    np.testing.assert_allclose(out.astype(np.float64), img.astype(np.float64), rtol=1e-3)


def test_hue_float64_beyond_float32_is_an_error():
    # before: a float64 value of 1e300 became inf (and its neighbours nan), silently
    img = np.full((2, 2, 3), (1e300, 10.0, 10.0))
    with pytest.raises(ValueError, match=r"Hue.*float64.*float32"):
        imgaug.Hue((0, 0)).augment(img)


@pytest.mark.parametrize("aug", [
    imgaug.BrightnessScale((400, 400), clip=False),
    imgaug.Brightness(1e9, clip=False),   # |draw| < 65304 with probability 7e-5
    imgaug.GaussianNoise(1e6, clip=False),
    imgaug.Lighting(1e6, clip=False),
])
def test_float16_overflow_is_an_error(aug):
    # before: a float16 image of 200s came back as inf (or -inf), with only numpy's RuntimeWarning
    aug.rng = np.random.RandomState(1)   # draws far past 65504, every run
    with pytest.raises(ValueError, match=rf"{type(aug).__name__}.*float16.*65504.*clip=True"):
        aug.augment(np.full((4, 4, 3), 200, np.float16))


def test_float_overflow_of_the_float32_computation_is_an_error():
    # before: a float64 image times 2 came back as inf: the computation runs in float32
    with pytest.raises(ValueError, match=r"BrightnessScale.*float64.*float32"):
        imgaug.BrightnessScale((2, 2), clip=False).augment(np.full((2, 2, 3), 1e300))


def test_float16_in_range_and_clipped_results_are_unchanged():
    img = np.full((4, 4, 3), 200, np.float16)
    out = imgaug.BrightnessScale((2, 2), clip=False).augment(img)
    assert out.dtype == np.float16 and (out == 400).all()
    out = imgaug.BrightnessScale((400, 400)).augment(img)   # clip=True: clipped to 255 as before
    assert out.dtype == np.float16 and (out == 255).all()
    # an input that already holds inf is the user's: no error for it
    img[0, 0, 0] = np.inf
    out = imgaug.BrightnessScale((2, 2), clip=False).augment(img)
    assert np.isinf(out[0, 0, 0]) and (out.ravel()[1:] == 400).all()


@pytest.mark.parametrize("aug", [imgaug.Gamma((0.5, 0.5)), imgaug.JpegNoise((95, 96))])
def test_uint8_level_augmentors_do_not_wrap_int8(aug):
    # before: Gamma on an int8 image of 100s gave -120 (a uint8 200 wrapped into int8)
    img = np.full((8, 8, 3), 100, np.int8)
    if isinstance(aug, imgaug.JpegNoise):
        img[...] = 127
        img[0, 0] = 0
    try:
        out = aug.augment(img)
    except ValueError as e:
        assert type(aug).__name__ in str(e) and "int8" in str(e)
    else:
        assert out.dtype == np.int8 and (out >= 0).all()


def test_clip_honours_its_bounds_in_the_image_dtype():
    # before: Clip(0.5, 99.5) on uint8 left 0 as 0 (0.5 truncated); Clip(1e6, 1e7) on float16 gave inf
    img = np.array([[0, 50, 100]], np.uint8)
    out = imgaug.Clip(0.5, 99.5).augment(img)
    assert out.dtype == np.uint8 and out.tolist() == [[1, 50, 99]]
    with pytest.raises(ValueError, match=r"Clip.*1000000.*float16"):
        imgaug.Clip(1e6, 1e7).augment(np.zeros((2, 2), np.float16))
    out = imgaug.Clip(0, 1e6).augment(np.full((2, 2), 300, np.float16))   # a bound past the dtype's range is no bound
    assert out.dtype == np.float16 and (out == 300).all()
