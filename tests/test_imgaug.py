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


# --- tensorpack 0.11 parity ----------------------------------------------------------------
TP_IMGAUG_NAMES = """Affine Albumentations Augmentor AugmentorList BackgroundFiller Brightness BrightnessScale
CenterCrop CenterPaste Clip ColorSpace ConstantBackgroundFiller Contrast CropTransform Flip FlipTransform Gamma
GaussianBlur GaussianNoise GoogleNetRandomCropAndResize Grayscale Hue IAAugmentor Identity ImageAugmentor
JpegNoise Lighting MapImage MeanVarianceNormalize MinMaxNormalize PhotometricAugmentor RandomApplyAug
RandomChooseAug RandomCrop RandomCropRandomShape RandomCutout RandomOrderAug RandomPaste RandomResize Resize
ResizeShortestEdge ResizeTransform Rotation RotationAndCropValid SaltPepperNoise Saturation Shift ToFloat32
ToUint8 Transform TransformFactory TransformList Transpose""".split()


def test_every_tensorpack_augmentor_and_module_path_exists():
    missing = [n for n in TP_IMGAUG_NAMES if not hasattr(imgaug, n)]
    assert not missing
    from kerastrainer.dataflow.imgaug import imgproc, meta, misc, noise
    from kerastrainer.dataflow.imgaug.base import AugmentorList
    from kerastrainer.dataflow.imgaug.transform import TransformAugmentorBase, WarpAffineTransform  # noqa: F401
    assert AugmentorList is imgaug.AugmentorList and TransformAugmentorBase is imgaug.ImageAugmentor
    assert imgproc.Contrast is imgaug.Contrast and misc.Flip is imgaug.Flip and meta.MapImage is imgaug.MapImage
    assert noise.SaltPepperNoise is imgaug.SaltPepperNoise


def _float_img(shape=(20, 24, 3), seed=0):
    return np.random.RandomState(seed).uniform(0, 255, shape).astype(np.float32)


def test_normalizers(img):
    out = imgaug.MeanVarianceNormalize().augment(img)
    assert out.dtype == np.float32 and abs(out.mean()) < 1e-4 and abs(out.std() - 1) < 1e-3
    out = imgaug.MeanVarianceNormalize(all_channel=False).augment(img)
    np.testing.assert_allclose(out.mean(axis=(0, 1)), 0, atol=1e-4)
    np.testing.assert_allclose(out.std(axis=(0, 1)), 1, atol=1e-3)
    out = imgaug.MinMaxNormalize(-1, 1).augment(img)
    assert out.min() == pytest.approx(-1) and out.max() == pytest.approx(1)
    out = imgaug.MinMaxNormalize(0, 1, all_channel=False).augment(img)
    np.testing.assert_allclose(out.max(axis=(0, 1)), 1, atol=1e-6)
    assert (imgaug.MinMaxNormalize(3, 5).augment(np.full((4, 4), 7.0, np.float32)) == 3).all()  # constant
    out = imgaug.Clip(10, 20).augment(img)
    assert out.dtype == np.uint8 and out.min() == 10 and out.max() == 20


def test_noise_augmentors(img):
    big = np.full((100, 100, 3), 128, np.uint8)
    orig = big.copy()
    out = imgaug.SaltPepperNoise(0.1, 0.2).augment(big)
    np.testing.assert_array_equal(big, orig)                       # the input is left alone
    assert 0.06 < (out == 255).mean() < 0.14 and 0.15 < (out == 0).mean() < 0.25
    with pytest.raises(ValueError, match="sum <= 1"):
        imgaug.SaltPepperNoise(0.6, 0.6)
    f = np.full((100, 100), 100.0, np.float32)
    diff = imgaug.GaussianNoise(sigma=5).augment(f) - f
    assert 4.5 < diff.std() < 5.5 and abs(diff.mean()) < 0.5
    out = imgaug.GaussianNoise(sigma=50).augment(img)
    assert out.dtype == np.uint8 and not np.array_equal(out, img)
    out = imgaug.JpegNoise((10, 11)).augment(_photo_like())
    assert out.dtype == np.uint8 and out.shape == (48, 64, 3)
    grey = imgaug.JpegNoise((50, 60)).augment(_photo_like()[:, :, :1])
    assert grey.shape == (48, 64, 1)


def _photo_like():
    r = np.random.RandomState(3)
    return cv2.resize(r.randint(0, 256, (4, 5, 3)).astype(np.uint8), (64, 48), interpolation=cv2.INTER_CUBIC)


def test_blur_hue_gamma_colorspace():
    img = _photo_like()
    np.testing.assert_array_equal(imgaug.GaussianBlur(size_range=(0, 1)).augment(img), img)  # 1x1 window
    blurred = imgaug.GaussianBlur(size_range=(3, 4)).augment(img)
    assert blurred.shape == img.shape and np.abs(np.diff(blurred.astype(int), axis=1)).mean() < \
        np.abs(np.diff(img.astype(int), axis=1)).mean()
    # a zero turn: only the 8-bit HSV round trip's rounding
    assert np.abs(imgaug.Hue((0, 0), rgb=False).augment(img).astype(int) - img).max() <= 6
    shifted = imgaug.Hue((60, 60), rgb=False).augment(img)
    assert np.abs(shifted.astype(int) - img).mean() > 10
    grey = np.full((8, 8, 3), 90, np.uint8)
    np.testing.assert_array_equal(imgaug.Hue((30, 30)).augment(grey), grey)  # no hue to turn
    fimg = img.astype(np.float32)
    fout = imgaug.Hue((0, 0)).augment(fimg)
    assert fout.dtype == np.float32 and np.abs(fout - fimg).max() < 1e-2
    np.testing.assert_array_equal(imgaug.Gamma((0, 0)).augment(img), img)
    assert imgaug.Gamma((0.5, 0.5)).augment(img).mean() > img.mean()      # 1 / 1.5 < 1: brighter
    assert imgaug.Grayscale().augment(img).shape == (48, 64, 1)
    assert imgaug.Grayscale(keepdims=False).augment(img).shape == (48, 64)
    assert imgaug.Grayscale(keepshape=True).augment(img).shape == (48, 64, 3)
    hsv = imgaug.ColorSpace(cv2.COLOR_BGR2HSV).augment(img)
    np.testing.assert_array_equal(hsv, cv2.cvtColor(img, cv2.COLOR_BGR2HSV))


def _dot_image(h=40, w=50, y=12, x=30):
    img = np.zeros((h, w), np.float32)
    img[y, x] = 255.0
    return img, np.array([[x + 0.5, y + 0.5]], np.float32)


@pytest.mark.parametrize("aug", [
    imgaug.Shift(0.3, 0.3, border=cv2.BORDER_CONSTANT),
    imgaug.Rotation(40, border=cv2.BORDER_CONSTANT),
    imgaug.Affine(scale=(0.9, 1.1), translate_frac=(0.1, 0.1), rotate_max_deg=30, shear=10,
                  border=cv2.BORDER_CONSTANT),
    imgaug.Transpose(prob=1.0),
    imgaug.CenterPaste((60, 70)),
    imgaug.RandomPaste((60, 70)),
], ids=lambda a: type(a).__name__)
def test_geometry_moves_pixels_and_coordinates_together(aug):
    aug.reset_state()
    for _ in range(5):
        img, pt = _dot_image()
        out, tfm = aug.augment_return_params(img)
        moved = tfm.apply_coords(pt.copy())[0]
        h, w = out.shape[:2]
        if not (-1 <= moved[0] <= w + 1 and -1 <= moved[1] <= h + 1):
            assert out.max() < 128      # turned out of the picture (a random rotation centre)
        if not (1 <= moved[0] <= w - 1 and 1 <= moved[1] <= h - 1):
            continue                    # at or beyond the edge: partly cut off
        y, x = np.unravel_index(np.argmax(out), out.shape[:2])
        # the brightest output pixel holds the dot; its centre is where the coordinates went
        assert abs(x + 0.5 - moved[0]) <= 1.0 and abs(y + 0.5 - moved[1]) <= 1.0, (tfm, moved, (x, y))


def test_rotation_and_crop_valid_leaves_no_border():
    aug = imgaug.RotationAndCropValid(30)
    aug.reset_state()
    img = np.full((60, 80, 3), 200, np.uint8)
    for _ in range(5):
        out = aug.augment(img)
        # only the crop's outermost pixels may blend with the (black) outside
        assert out.shape[0] <= 60 and out.shape[1] <= 80 and out[1:-1, 1:-1].min() == 200


def test_paste_canvas_and_mask(img):
    out, tfm = imgaug.CenterPaste((60, 70), imgaug.ConstantBackgroundFiller(7)).augment_return_params(img)
    assert out.shape == (60, 70, 3) and out[0, 0, 0] == 7
    np.testing.assert_array_equal(out[6:54, 3:67], img)
    mask = tfm.apply_mask(np.ones((48, 64), np.uint8))
    assert mask.shape == (60, 70) and mask.sum() == 48 * 64
    with pytest.raises(ValueError, match="smaller than the image"):
        imgaug.CenterPaste((10, 10)).augment(img)


def test_random_crops_resize_and_cutout(img):
    aug = imgaug.RandomCropRandomShape(10, 12, wmax=30, hmax=20)
    aug.reset_state()
    shapes = {aug.augment(img).shape[:2] for _ in range(30)}
    assert len(shapes) > 3 and all(12 <= h <= 20 and 10 <= w <= 30 for h, w in shapes)
    out = imgaug.RandomCutout(5, (3, 6), fill=0).augment(np.full((20, 20), 9, np.uint8))
    zeros = np.argwhere(out == 0)
    assert np.ptp(zeros[:, 0]) == 4 and 2 <= np.ptp(zeros[:, 1]) <= 4
    rr = imgaug.RandomResize((0.5, 2.0), (0.5, 2.0), aspect_ratio_thres=0.1)
    rr.reset_state()
    for _ in range(5):
        h, w = rr.augment(img).shape[:2]
        assert abs((w / h) / (64 / 48) - 1) < 0.12
    keep = imgaug.RandomResize((30, 90), aspect_ratio_thres=0)
    h, w = keep.augment(img).shape[:2]
    assert 30 <= w <= 90 and abs(h / w - 48 / 64) < 0.05


def test_choose_apply_identity(img):
    flip = imgaug.Flip(horiz=True, prob=1.0)
    choose = imgaug.RandomChooseAug([(imgaug.Identity(), 1), (flip, 3)])
    choose.reset_state()
    flipped = sum(not np.array_equal(choose.augment(img), img) for _ in range(200))
    assert 120 < flipped < 180
    apply = imgaug.RandomApplyAug(flip, 0.0)
    np.testing.assert_array_equal(apply.augment(img), img)
    assert not np.array_equal(imgaug.RandomApplyAug(flip, 1.0).augment(img), img)
    assert isinstance(imgaug.RandomOrderAug(aug_lists=[flip]), imgaug.AugmentorList)


def test_gaussian_deform():
    aug = imgaug.GaussianDeform([(0.2, 0.2), (0.7, 0.2), (0.8, 0.8), (0.5, 0.5)], (32, 32), 0.2, 3)
    aug.reset_state()
    img = _photo_like()[:32, :32]
    out, tfm = aug.augment_return_params(img)
    assert out.shape == img.shape and out.dtype == np.uint8 and not np.array_equal(out, img)
    labels = (np.arange(32 * 32).reshape(32, 32) % 3).astype(np.uint8)
    assert set(np.unique(tfm.apply_mask(labels))) <= {0, 1, 2}         # nearest-neighbour on masks


def test_external_wrappers_with_stand_ins(img):
    class FakeAlbu:
        def get_params(self):
            return {"k": 1}

        def apply(self, im, k):
            return np.rot90(im, k)

    np.testing.assert_array_equal(imgaug.Albumentations(FakeAlbu()).augment(img), np.rot90(img))

    class FakeIAA:
        def to_deterministic(self):
            return self

        def augment_image(self, im):
            return im[::-1]

    np.testing.assert_array_equal(imgaug.IAAugmentor(FakeIAA()).augment(img), img[::-1])
    with pytest.raises(TypeError, match="albumentations transform"):
        imgaug.Albumentations(object())


class _TpInvert(imgaug.PhotometricAugmentor):
    """A PhotometricAugmentor written against tensorpack (``_get_augment_params``/``_augment``)."""

    def __init__(self, prob=1.0):
        super().__init__()
        self._init(locals())

    def _get_augment_params(self, _):
        return self.rng.rand() < self.prob

    def _augment(self, img, do):
        return 255 - img if do else img


class _NoSuperInit(imgaug.ImageAugmentor):
    """tensorpack's Clip / CenterPaste style: __init__ never calls the base class's."""

    def __init__(self, delta):
        self._init(locals())

    def _get_augment_params(self, img):
        return self.rng.randint(0, self.delta)

    def _augment(self, img, v):
        return img + v


class _ReturnsTransform(imgaug.ImageAugmentor):
    def _get_augment_params(self, img):
        return imgaug.CropTransform(0, 0, 2, 3)

    def _augment(self, img, whatever):
        raise AssertionError("not called: the parameter is a Transform")


def test_tensorpack_style_subclasses(img):
    inv = _TpInvert()
    assert inv.prob == 1.0
    out, tfm = inv.augment_return_params(img)
    np.testing.assert_array_equal(out, 255 - img)
    coords = np.array([[1.0, 2.0]], np.float32)
    np.testing.assert_array_equal(tfm.apply_coords(coords), coords)
    assert _ReturnsTransform().augment(img).shape == (2, 3, 3)
    no_super = _NoSuperInit(1)
    no_super.reset_state()
    np.testing.assert_array_equal(imgaug.AugmentorList([no_super]).augment(img), img)
    legacy = _LegacyShift()
    legacy.__class__ = type("NoCoords", (imgaug.ImageAugmentor,),
                            {"_augment": lambda self, im, shift_by: np.roll(im, shift_by, axis=1),
                             "_get_augment_params": lambda self, im: 1})
    out, tfm = legacy.augment_return_params(img)
    np.testing.assert_array_equal(out, np.roll(img, 1, axis=1))
    np.testing.assert_array_equal(tfm.apply_coords(coords), coords)   # tensorpack's old default


def test_flip_and_transform_conventions_of_tensorpack(img):
    v = imgaug.Flip(vert=True, prob=1.0)
    np.testing.assert_array_equal(v.augment(img), img[::-1])
    np.testing.assert_array_equal(imgaug.Flip(prob=1.0).augment(img), img[:, ::-1])
    np.testing.assert_array_equal(imgaug.FlipTransform(48, 64, False).apply_image(img), img[::-1])
    t = imgaug.TransformFactory(name="neg", apply_image=lambda im: 255 - im)
    np.testing.assert_array_equal(t.apply_image(img), 255 - img)
    with pytest.raises(KeyError, match="unknown argument"):
        imgaug.TransformFactory(image=lambda im: im)
    lst = imgaug.TransformList([t]) + t
    assert len(lst.tfms) == 2
    np.testing.assert_array_equal(lst.apply_image(img), img)
    lazy = imgaug.LazyTransform(lambda im: imgaug.CropTransform(1, 2, 3, 4))
    with pytest.raises(RuntimeError, match="apply_image first"):
        lazy.apply_coords(np.zeros((1, 2), np.float32))
    assert lazy.apply_image(img).shape == (3, 4, 3)
    np.testing.assert_array_equal(lazy.apply_coords(np.array([[2.0, 1.0]], np.float32)), [[0.0, 0.0]])


def test_map_image_takes_tensorpack_coord_func(img):
    m = imgaug.MapImage(lambda im: im, coord_func=lambda c: c + 1)
    _, tfm = m.augment_return_params(img)
    np.testing.assert_array_equal(tfm.apply_coords(np.zeros((1, 2), np.float32)), [[1.0, 1.0]])


@pytest.fixture
def warnings_logged(monkeypatch):
    from kerastrainer.utils import logger
    logged = []
    monkeypatch.setattr(logger, "warning", lambda msg, *args: logged.append(msg % args))
    return logged


@pytest.mark.parametrize("dtype,value", [(np.uint16, 40000), (np.int16, -5), (np.int16, 30000),
                                         (np.int32, -70000)])
@pytest.mark.parametrize("clip", [True, False])
def test_photometric_keeps_other_integer_dtypes_exact(dtype, value, clip, warnings_logged):
    # an identity gives the image back exactly: no [0, 255] clip, no wrap
    a = np.full((4, 5, 3), value, dtype)
    out = imgaug.BrightnessScale((1, 1), clip=clip).augment(a)
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, a)
    assert warnings_logged == []


@pytest.mark.parametrize("clip", [True, False])
def test_photometric_saturates_other_integer_dtypes(clip, warnings_logged):
    # results past the dtype's range are clipped to it, never wrapped
    hi = np.full((4, 5, 3), 30000, np.int16)
    brightness = imgaug.Brightness(1e6, clip=clip)
    # a fixed draw past the range (+97627: 1 in 30 draws of the seeded-by-time default stays inside it)
    brightness.rng = np.random.RandomState(0)
    out = brightness.augment(hi)
    assert out.dtype == np.int16 and ((out == 32767).all() or (out == -32768).all())
    spread = np.dstack([np.full((4, 5), v, np.int16) for v in (-30000, 0, 30000)])
    out = imgaug.Contrast((50, 50), rgb=True, clip=clip).augment(spread)
    assert out.dtype == np.int16 and out[..., 0].min() == -32768 and out[..., 2].max() == 32767
    u = imgaug.BrightnessScale((3, 3), clip=clip).augment(np.full((4, 5, 3), 40000, np.uint16))
    assert u.dtype == np.uint16 and (u == 65535).all()
    if clip:  # asked for: clipped to the dtype's range, silently
        assert warnings_logged == []
    else:     # clip=False, but int16 cannot hold the results: said once per augmentor
        assert len(warnings_logged) == 3
        assert "Brightness" in warnings_logged[0] and "int16" in warnings_logged[0]
        assert "Contrast" in warnings_logged[1] and "clipped to [-32768, 32767]" in warnings_logged[1]
        assert "BrightnessScale" in warnings_logged[2] and "uint16" in warnings_logged[2]


@pytest.mark.parametrize("aug", [imgaug.Gamma((0, 0)), imgaug.JpegNoise((95, 96))], ids=lambda a: type(a).__name__)
def test_uint8_only_augmentors_on_float_images(aug, warnings_logged):
    # [0, 255] float images work as in tensorpack, without a warning
    img = _photo_like().astype(np.float32)
    out = aug.augment(img)
    assert out.dtype == np.float32 and np.abs(out - img).max() <= (0 if isinstance(aug, imgaug.Gamma) else 40)
    assert warnings_logged == []
    # a [0, 1] image is quantised to 0s and 1s: warned, once per augmentor instance
    unit = img / 255
    for _ in range(3):
        out = aug.augment(unit)
    assert out.dtype == np.float32 and (out == np.rint(out)).all() and out.max() <= 8  # 0s and 1s (+ JPEG)
    assert len(warnings_logged) == 1
    assert type(aug).__name__ in warnings_logged[0] and "float32" in warnings_logged[0]
    assert "[0, 1]" in warnings_logged[0] and "scale it to [0, 255]" in warnings_logged[0]
    # values outside [0, 255] are clipped: said too
    aug.augment(np.full((8, 8, 3), 300, np.uint16))
    assert len(warnings_logged) == 2 and "uint16" in warnings_logged[1] and "clipped" in warnings_logged[1]
