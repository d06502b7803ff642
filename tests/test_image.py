"""ImageFromFile, AugmentImageComponent(s) on real image files made in tmp dirs."""
import logging

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from kerastrainer.dataflow import imgaug  # noqa: E402
from kerastrainer.dataflow.base import DataFlow  # noqa: E402
from kerastrainer.dataflow.image import (AugmentImageComponent, AugmentImageComponents,  # noqa: E402
                                         BadImageError, ImageFromFile, decode_image, is_truncated_jpeg,
                                         read_image)
from kerastrainer.utils import rng as rng_mod  # noqa: E402


class ListFlow(DataFlow):
    def __init__(self, dps):
        self.dps = dps
        self.resets = 0

    def reset_state(self):
        self.resets += 1

    def __iter__(self):
        return iter(self.dps)

    def __len__(self):
        return len(self.dps)


def _write_images(tmp_path, n=4):
    paths = []
    r = np.random.RandomState(0)
    for i in range(n):
        img = np.zeros((20 + i, 30, 3), np.uint8)
        img[:, :, 0] = 200  # blue in BGR
        img[:, :, 2] = r.randint(0, 50)
        p = str(tmp_path / f"img{i}.png")
        assert cv2.imwrite(p, img)
        paths.append(p)
    return paths


def test_image_from_file_rgb_gray_resize(tmp_path):
    paths = _write_images(tmp_path)
    ds = ImageFromFile(paths)
    ds.reset_state()
    imgs = [dp[0] for dp in ds]
    assert len(imgs) == len(ds) == 4
    assert imgs[1].shape == (21, 30, 3) and imgs[1].dtype == np.uint8
    assert (imgs[0][:, :, 2] == 200).all()  # RGB: blue is last
    bgr = next(iter(ImageFromFile(paths, rgb=False)))[0]
    assert (bgr[:, :, 0] == 200).all()
    gray = next(iter(ImageFromFile(paths, channel=1, resize=(8, 10))))[0]
    assert gray.shape == (8, 10, 1)


def test_image_from_file_shuffle_keeps_user_list(tmp_path):
    paths = _write_images(tmp_path, 6)
    original = list(paths)
    ds = ImageFromFile(paths, shuffle=True)
    ds.reset_state()
    shapes = [dp[0].shape[0] for dp in ds]
    assert sorted(shapes) == list(range(20, 26))
    assert paths == original


def test_corrupt_file_raises_naming_it(tmp_path):
    paths = _write_images(tmp_path, 2)
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    ds = ImageFromFile(paths + [str(bad)])
    ds.reset_state()
    with pytest.raises(BadImageError, match="broken.jpg"):
        list(ds)
    with pytest.raises(BadImageError, match="no such file"):
        read_image(str(tmp_path / "missing.jpg"))


def _photo_jpeg(progressive=False):
    img = (np.random.RandomState(3).rand(48, 64, 3) * 255).astype(np.uint8)
    flags = [cv2.IMWRITE_JPEG_PROGRESSIVE, 1] if progressive else [cv2.IMWRITE_JPEG_QUALITY, 90]
    return cv2.imencode(".jpg", img, flags)[1].tobytes()


@pytest.mark.parametrize("progressive", [False, True])
def test_is_truncated_jpeg_finds_every_cut(progressive):
    good = _photo_jpeg(progressive)
    assert not is_truncated_jpeg(good)
    assert not is_truncated_jpeg(good + b"\0" * 16 + b"trailer after EOI")
    assert not is_truncated_jpeg(cv2.imencode(".png", np.zeros((4, 4, 3), np.uint8))[1].tobytes())
    for cut in range(2, len(good) - 1, 7):
        assert is_truncated_jpeg(good[:cut]), cut
    assert is_truncated_jpeg(np.frombuffer(good[:len(good) // 2], np.uint8))


def test_truncated_jpeg_is_an_error_or_skipped(tmp_path):
    paths = _write_images(tmp_path, 2)
    good = _photo_jpeg()
    cut = tmp_path / "cut.jpg"
    cut.write_bytes(good[:len(good) // 2])  # OpenCV alone decodes this half grey
    assert cv2.imread(str(cut)) is not None
    with pytest.raises(BadImageError, match="cut.jpg.*truncated JPEG"):
        read_image(str(cut))
    with pytest.raises(BadImageError, match="mem.jpg.*truncated"):
        decode_image(good[:100], name="mem.jpg")
    assert decode_image(good, rgb=True).shape == (48, 64, 3)
    ds = ImageFromFile([paths[0], str(cut), paths[1]], skip_bad=True)
    ds.reset_state()
    assert len(list(ds)) == 2 and ds.num_skipped == 1


class _Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def test_skip_bad_counts_and_warns(tmp_path):
    paths = _write_images(tmp_path, 2)
    bad = tmp_path / "broken.jpg"
    bad.write_bytes(b"garbage")
    ds = ImageFromFile([paths[0], str(bad), str(tmp_path / "gone.png"), paths[1]], skip_bad=True)
    ds.reset_state()
    handler = _Records()
    logging.getLogger("kerastrainer").addHandler(handler)
    try:
        assert len(list(ds)) == 2
    finally:
        logging.getLogger("kerastrainer").removeHandler(handler)
    assert ds.num_skipped == 2
    assert len(handler.messages) == 2 and "broken.jpg" in handler.messages[0]


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="empty"):
        ImageFromFile([])
    with pytest.raises(ValueError, match="channel"):
        ImageFromFile(["a.png"], channel=4)


def test_augment_image_component_copy_and_index():
    src = np.arange(8 * 8, dtype=np.uint8).reshape(8, 8)
    flow = ListFlow([[src, 1], [src, 2]])
    ds = AugmentImageComponent(flow, imgaug.MapImage(lambda im: np.add(im, 1, out=im)), index=0)
    ds.reset_state()
    out = list(ds)
    assert flow.resets == 1
    assert [dp[1] for dp in out] == [1, 2]
    np.testing.assert_array_equal(out[0][0], src + 1)
    np.testing.assert_array_equal(src, np.arange(64).reshape(8, 8))  # upstream untouched


def test_augment_image_component_dict_datapoints():
    img = np.zeros((10, 12, 3), np.uint8)
    ds = AugmentImageComponent(ListFlow([{"image": img, "label": 3}]), [imgaug.CenterCrop(4)], index="image")
    ds.reset_state()
    (dp,) = list(ds)
    assert dp["image"].shape == (4, 4, 3) and dp["label"] == 3
    bad = AugmentImageComponent(ListFlow([{"img": img}]), [imgaug.CenterCrop(4)], index="image")
    with pytest.raises(IndexError, match="'image'"):
        list(bad)


def test_catch_exceptions_skips():
    small = np.zeros((3, 3), np.uint8)
    big = np.zeros((10, 10), np.uint8)
    flow = ListFlow([[big], [small], [big]])
    with pytest.raises(ValueError, match="cannot crop"):
        list(AugmentImageComponent(flow, [imgaug.RandomCrop(5)]))
    ds = AugmentImageComponent(flow, [imgaug.RandomCrop(5)], catch_exceptions=True)
    ds.reset_state()
    assert len(list(ds)) == 2 and ds.num_skipped == 1


def test_components_share_one_transform():
    r = np.random.RandomState(1)
    img = r.randint(0, 255, (32, 32, 3)).astype(np.uint8)
    mask = np.tile(np.arange(32, dtype=np.uint8), (32, 1))
    pts = np.array([[15.5, 16.5]], np.float32)  # inside every 20x20 crop
    flow = ListFlow([[img, img.copy(), mask, pts]] * 20)
    augs = [imgaug.RandomCrop(20), imgaug.Flip(horiz=True), imgaug.Resize(40), imgaug.Brightness(40)]
    ds = AugmentImageComponents(flow, augs, index=(0, 1), mask_index=(2,), coords_index=(3,))
    ds.reset_state()
    for a, b, m, p in ds:
        np.testing.assert_array_equal(a, b)  # identical images stay identical
        assert m.shape == (40, 40) and set(np.unique(m)) <= set(range(32))
        assert p.shape == (1, 2)
        assert m[int(p[0, 1]), int(p[0, 0])] == 15  # the point lands on its own source column


def test_components_size_mismatch_is_clear():
    flow = ListFlow([[np.zeros((8, 8), np.uint8), np.zeros((6, 8), np.uint8)]])
    ds = AugmentImageComponents(flow, [imgaug.Flip()], index=(0, 1))
    with pytest.raises(ValueError, match="component 1"):
        list(ds)


def test_fixed_seed_gives_repeatable_stream(tmp_path):
    paths = _write_images(tmp_path, 4)

    def run():
        ds = AugmentImageComponent(ImageFromFile(paths, shuffle=True), [imgaug.RandomCrop(10), imgaug.Flip()])
        ds.reset_state()
        return [dp[0] for dp in ds]

    rng_mod.fix_rng_seed(7)
    try:
        first, second = run(), run()
    finally:
        rng_mod._RNG_SEED = None
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
