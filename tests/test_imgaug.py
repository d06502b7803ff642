"""Image augmentors: shapes, dtypes, determinism, replay on image + mask + coordinates."""
import os
import subprocess
import sys

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from kerastrainer.dataflow import imgaug  # noqa: E402
from kerastrainer.utils import rng as rng_mod  # noqa: E402


@pytest.fixture
def img():
    r = np.random.RandomState(0)
    return r.randint(0, 256, size=(48, 64, 3)).astype(np.uint8)


@pytest.fixture
def fixed_seed():
    rng_mod.fix_rng_seed(1234)
    yield
    rng_mod._RNG_SEED = None


def test_resize_and_shortest_edge(img):
    out = imgaug.Resize((20, 30)).augment(img)
    assert out.shape == (20, 30, 3) and out.dtype == np.uint8
    out = imgaug.ResizeShortestEdge(24).augment(img)
    assert out.shape == (24, 32, 3)
    tall = np.zeros((90, 30), np.uint8)
    assert imgaug.ResizeShortestEdge(10).augment(tall).shape == (30, 10)


def test_single_channel_axis_is_kept():
    gray = np.arange(16 * 16, dtype=np.uint8).reshape(16, 16, 1)
    assert imgaug.Resize(8).augment(gray).shape == (8, 8, 1)
    assert imgaug.Flip(horiz=True, prob=1.0).augment(gray).shape == (16, 16, 1)


def test_crops(img):
    out = imgaug.CenterCrop((40, 40)).augment(img)
    np.testing.assert_array_equal(out, img[4:44, 12:52])
    aug = imgaug.RandomCrop(32)
    seen = set()
    for _ in range(20):
        out, tfm = aug.augment_return_params(img)
        assert out.shape == (32, 32, 3)
        np.testing.assert_array_equal(out, img[tfm.y0:tfm.y0 + 32, tfm.x0:tfm.x0 + 32])
        seen.add((tfm.y0, tfm.x0))
    assert len(seen) > 1


def test_crop_too_large_is_a_clear_error(img):
    with pytest.raises(ValueError, match=r"cannot crop 100x100 .* 48x64"):
        imgaug.RandomCrop(100).augment(img)


def test_flip_probability_and_content(img):
    np.testing.assert_array_equal(imgaug.Flip(horiz=True, prob=1.0).augment(img), img[:, ::-1])
    np.testing.assert_array_equal(imgaug.Flip(horiz=False, vert=True, prob=1.0).augment(img), img[::-1])
    np.testing.assert_array_equal(imgaug.Flip(prob=0.0).augment(img), img)
    with pytest.raises(ValueError, match="horiz"):
        imgaug.Flip(horiz=False, vert=False)


def test_googlenet_crop_output_shape(img):
    aug = imgaug.GoogleNetRandomCropAndResize(target_shape=24)
    for _ in range(10):
        out = aug.augment(img)
        assert out.shape == (24, 24, 3) and out.dtype == np.uint8
    # An impossible aspect ratio forces the resize + centre-crop fallback.
    fallback = imgaug.GoogleNetRandomCropAndResize(aspect_ratio_range=(50, 60), target_shape=(24, 16))
    assert fallback.augment(img).shape == (24, 16, 3)


@pytest.mark.parametrize("aug", [
    imgaug.Brightness(100), imgaug.BrightnessScale((0.2, 3.0)), imgaug.Contrast((0.2, 3.0)),
    imgaug.Contrast((0.2, 3.0), rgb=True), imgaug.Saturation(0.9, rgb=False), imgaug.Lighting(5.0),
])
def test_photometric_keeps_uint8_and_clips(aug, img):
    outs = [aug.augment(img) for _ in range(5)]
    for out in outs:
        assert out.dtype == np.uint8 and out.shape == img.shape
    assert any(not np.array_equal(o, img) for o in outs)
    f = aug.augment(img.astype(np.float32))
    assert f.dtype == np.float32 and f.min() >= 0 and f.max() <= 255


def test_brightness_value(img):
    aug = imgaug.Brightness(10)
    out, tfm = aug.augment_return_params(img.astype(np.float32))
    delta = out - img
    # away from the clip bounds every pixel moved by the same drawn amount
    inner = (img > 20) & (img < 235)
    assert np.allclose(delta[inner], delta[inner].flat[0], atol=1e-4)
    assert abs(delta[inner].flat[0]) <= 10


def test_photometric_does_not_change_input(img):
    before = img.copy()
    imgaug.Contrast((2, 2)).augment(img)
    f = img.astype(np.float32)
    f_before = f.copy()
    imgaug.Brightness(50).augment(f)
    np.testing.assert_array_equal(img, before)
    np.testing.assert_array_equal(f, f_before)


def test_saturation_needs_three_channels():
    with pytest.raises(ValueError, match="3-channel"):
        imgaug.Saturation(0.4).augment(np.zeros((8, 8, 1), np.uint8))


def test_lighting_imagenet_bgr_is_rgb_reversed():
    rgb = imgaug.Lighting(0.1, bgr=False)
    bgr = imgaug.Lighting(0.1, bgr=True)
    v = np.array([0.3, -0.2, 0.1])
    inc_rgb = rgb.eigvec @ (v * rgb.eigval)
    inc_bgr = bgr.eigvec @ (v[::-1] * bgr.eigval)
    np.testing.assert_allclose(inc_bgr, inc_rgb[::-1], rtol=1e-5)
    with pytest.raises(ValueError, match="channel"):
        rgb.augment(np.zeros((4, 4, 1), np.float32))


def test_to_uint8_and_float32():
    f = np.array([[-3.0, 12.6, 300.0]], np.float32)
    np.testing.assert_array_equal(imgaug.ToUint8().augment(f), np.array([[0, 13, 255]], np.uint8))
    assert imgaug.ToFloat32().augment(np.zeros((2, 2), np.uint8)).dtype == np.float32


def test_map_image(img):
    out = imgaug.MapImage(lambda im: im[:, :, ::-1]).augment(img)
    np.testing.assert_array_equal(out, img[:, :, ::-1])
    _, tfm = imgaug.MapImage(lambda im: im).augment_return_params(img)
    with pytest.raises(NotImplementedError, match="coords_func"):
        tfm.apply_coords(np.zeros((1, 2)))


def test_augmentor_list_rejects_non_augmentors():
    with pytest.raises(TypeError, match="item 1"):
        imgaug.AugmentorList([imgaug.Flip(), "resize"])


def test_random_order_changes_order(img):
    aug = imgaug.RandomOrderAug([imgaug.Brightness(10), imgaug.Contrast((0.5, 1.5)), imgaug.Saturation(0.3)])
    orders = set()
    for _ in range(30):
        _, tfm = aug.augment_return_params(img)
        orders.add(tuple(t.name.split("(")[0] for t in tfm.transforms))
    assert len(orders) > 1
    assert all(sorted(o) == ["Brightness", "Contrast", "Saturation"] for o in orders)


def _pipeline():
    return imgaug.AugmentorList(imgaug.fbresnet_augmentor(is_training=True, image_size=32))


def test_fixed_seed_repeats(img, fixed_seed):
    a, b = _pipeline(), _pipeline()
    a.reset_state()
    b.reset_state()
    for _ in range(5):
        np.testing.assert_array_equal(a.augment(img), b.augment(img))


def test_unseeded_augmentors_differ(img):
    a, b = _pipeline(), _pipeline()
    a.reset_state()
    b.reset_state()
    assert any(not np.array_equal(a.augment(img), b.augment(img)) for _ in range(5))


def test_rng_reseeds_itself_in_a_new_process(img, monkeypatch):
    from kerastrainer.dataflow.imgaug import base
    aug = imgaug.RandomCrop(8)
    aug.reset_state()
    state = aug.rng.get_state()[1].copy()
    assert np.array_equal(aug.rng.get_state()[1], state)  # same process: same generator
    monkeypatch.setattr(base.os, "getpid", lambda: -12345)  # as seen from a forked worker
    assert not np.array_equal(aug.rng.get_state()[1], state)


def test_replay_on_image_mask_and_coords(img):
    augs = imgaug.AugmentorList([imgaug.RandomCrop((40, 50)), imgaug.Flip(horiz=True, prob=1.0),
                                 imgaug.Resize((80, 100)), imgaug.Brightness(50)])
    # mask: label = column index of the source pixel (only nearest interpolation keeps labels exact)
    mask = np.tile(np.arange(64, dtype=np.uint8), (48, 1))
    out, tfm = augs.augment_return_params(img)
    mask_out = tfm.apply_mask(mask)
    assert out.shape == (80, 100, 3) and mask_out.shape == (80, 100)
    assert set(np.unique(mask_out)) <= set(range(64))  # no blended labels, no brightness change
    crop = tfm.transforms[0]
    # Replaying the transform gives the same image again.
    np.testing.assert_array_equal(augs.augment_with_params(img, tfm), out)
    # A point at the centre of source pixel (row 10, col x0+5) follows the same geometry.
    pt = np.array([[crop.x0 + 5.5, crop.y0 + 10.5]], np.float32)
    x, y = tfm.apply_coords(pt)[0]
    np.testing.assert_allclose([x, y], [(50 - 5.5) * 2, 10.5 * 2], rtol=1e-5)
    # The mask label under the moved point is the source column.
    assert mask_out[int(y), int(x)] == crop.x0 + 5


def test_transform_refuses_other_sizes(img):
    _, tfm = imgaug.Resize(10).augment_return_params(img)
    with pytest.raises(ValueError, match="same height and width"):
        tfm.apply_image(np.zeros((5, 5), np.uint8))


def test_bad_input_types():
    with pytest.raises(TypeError, match="numpy array"):
        imgaug.Flip().augment([[1, 2]])
    with pytest.raises(ValueError, match="shape"):
        imgaug.Flip().augment(np.zeros((2, 2, 2, 2)))
    with pytest.raises(ValueError, match="crop_shape"):
        imgaug.CenterCrop((0, 3))


def test_augmentors_pickle(img):
    import pickle
    aug = pickle.loads(pickle.dumps(_pipeline()))
    _, tfm = aug.augment_return_params(img)
    pickle.dumps(tfm)


def test_eval_preset(img):
    augs = imgaug.AugmentorList(imgaug.fbresnet_augmentor(is_training=False, image_size=32))
    out = augs.augment(img)
    assert out.shape == (32, 32, 3) and out.dtype == np.uint8


def test_dataflow_imports_without_cv2():
    code = ("import sys; sys.modules['cv2'] = None\n"
            "import kerastrainer.dataflow as d\n"
            "from kerastrainer.dataflow import imgaug\n"
            "aug = imgaug.Flip(prob=1.0)\n"
            "import numpy as np\n"
            "try:\n"
            "    aug.augment(np.zeros((4, 4), np.uint8))\n"
            "except ImportError as e:\n"
            "    assert 'kerastrainer[image]' in str(e), e\n"
            "    print('CLEAR-ERROR')\n"
            "assert 'tensorflow' not in sys.modules\n")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert res.returncode == 0, res.stderr
    assert "CLEAR-ERROR" in res.stdout


class _LegacyShift(imgaug.ImageAugmentor):
    """Written against tensorpack's older augmentor API."""

    def _get_augment_params(self, img):
        return int(self.rng.randint(1, 4))

    def _augment(self, img, param):
        return np.roll(img, param, axis=1)

    def _augment_coords(self, coords, param):
        return coords + np.array([param, 0], np.float32)


def test_tensorpack_legacy_api(img):
    aug = _LegacyShift()
    out, tfm = aug.augment_return_params(img)
    shift = int(tfm.apply_coords(np.zeros((1, 2), np.float32))[0, 0])
    assert 1 <= shift <= 3
    np.testing.assert_array_equal(out, np.roll(img, shift, axis=1))
    with pytest.raises(NotImplementedError, match="neither get_transform nor _augment"):
        imgaug.ImageAugmentor().augment(img)


# --- the fused fb.resnet colour jitter ---------------------------------------------------
def _reference_jitter(img, ops):
    """The library's colour augmentors, op by op on float32, then rounded to uint8."""
    from kerastrainer.dataflow import imgaug
    impl = {"brightness": imgaug.BrightnessScale((1, 1), clip=False),
            "contrast": imgaug.Contrast((1, 1), rgb=False, clip=False),
            "saturation": imgaug.Saturation(0.4, rgb=False, clip=False),
            "lighting": imgaug.Lighting(0.1, bgr=True, clip=False)}
    x = img.astype(np.float32)
    for name, value in ops:
        x = impl[name]._impl(x, value)
    return np.rint(np.clip(x, 0, 255)).astype(np.uint8)


def test_fused_color_jitter_equals_the_separate_augmentors():
    rng = np.random.RandomState(1)
    img = rng.randint(0, 256, (37, 53, 3)).astype(np.uint8)
    aug = imgaug.FusedColorJitter()
    orders = set()
    for _ in range(40):
        ops = aug.draw_ops()
        orders.add(tuple(n for n, _ in ops))
        fused = cv2.transform(img, aug.compose(ops, cv2.mean(img)[:3]))
        ref = _reference_jitter(img, ops)
        # same maths, different float rounding: at most 1 grey level apart
        assert np.abs(fused.astype(int) - ref).max() <= 1
    assert len(orders) > 5  # the order is random
    out = aug.augment(img)
    assert out.dtype == np.uint8 and out.shape == img.shape and not np.array_equal(out, img)
    with pytest.raises(ValueError, match="uint8 HxWx3"):
        aug.augment(img.astype(np.float32))
