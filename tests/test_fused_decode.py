"""The fused JPEG decode + random-resized crop (imgaug.DecodeRandomResizedCrop) against the
unfused path: same crop statistics, same pixels at full scale, small error at reduced scale."""
import math
import pickle

import numpy as np
import pytest

cv2 = pytest.importorskip("cv2")

from kerastrainer.dataflow import BadImageError, imgaug  # noqa: E402
from kerastrainer.utils import rng as rng_mod  # noqa: E402


def _photo(h, w, seed=0):
    """A photo-like image: smooth colour fields plus mild texture."""
    r = np.random.RandomState(seed)
    img = cv2.resize(r.randint(0, 256, (6, 8, 3)).astype(np.uint8), (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(img.astype(np.int16) + r.randint(-6, 7, img.shape), 0, 255).astype(np.uint8)


def _jpeg(img, quality=92):
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    return buf.tobytes()


@pytest.fixture(scope="module")
def big_jpeg():
    return _jpeg(_photo(900, 1200))


@pytest.fixture(scope="module")
def small_jpeg():
    return _jpeg(_photo(375, 500, seed=1))


@pytest.fixture
def fixed_seed():
    rng_mod.fix_rng_seed(4321)
    yield
    rng_mod._RNG_SEED = None


def test_jpeg_size(big_jpeg, small_jpeg):
    assert imgaug.jpeg_size(big_jpeg) == (900, 1200)
    assert imgaug.jpeg_size(np.frombuffer(small_jpeg, np.uint8)) == (375, 500)
    assert imgaug.jpeg_size(cv2.imencode(".png", _photo(10, 12))[1].tobytes()) is None
    assert imgaug.jpeg_size(b"") is None
    assert imgaug.jpeg_size(big_jpeg[:20]) is None   # cut before the frame header
    ok, prog = cv2.imencode(".jpg", _photo(30, 50), [cv2.IMWRITE_JPEG_PROGRESSIVE, 1])
    assert imgaug.jpeg_size(prog.tobytes()) == (30, 50)


def test_crop_windows_are_the_unfused_ones(big_jpeg, fixed_seed):
    """Same seed -> the same windows and flips as GoogleNetRandomCropAndResize + Flip."""
    fused = imgaug.DecodeRandomResizedCrop(224, color_jitter=False)
    crop, flip = imgaug.GoogleNetRandomCropAndResize(target_shape=224), imgaug.Flip(horiz=True)
    for a in (fused, crop, flip):
        a.reset_state()
    for _ in range(12):
        _, params = fused.decode_with_params(big_jpeg)
        want = crop.draw_box(900, 1200)
        assert params["box"] == want
        assert params["flip"] == (flip.rng.rand() < 0.5)


def test_crop_statistics_match_the_unfused_path(big_jpeg):
    """Independent draws: area fraction and aspect ratio have the same distribution."""
    fused = imgaug.DecodeRandomResizedCrop(64, color_jitter=False)
    fused.reset_state()
    ref = imgaug.GoogleNetRandomCropAndResize(target_shape=64)
    ref.reset_state()
    n = 150
    got = [fused.decode_with_params(big_jpeg)[1] for _ in range(n)]
    want = [ref.draw_box(900, 1200) for _ in range(4000)]

    def stats(boxes):
        area = np.array([b[2] * b[3] / (900 * 1200) for b in boxes])
        log_ratio = np.array([math.log(b[3] / b[2]) for b in boxes])
        return area, log_ratio

    (a1, r1), (a2, r2) = stats([g["box"] for g in got]), stats(want)
    # means within 4 standard errors; uniform area in [0.08, 1] has sd 0.27
    assert abs(a1.mean() - a2.mean()) < 4 * a2.std() / math.sqrt(n)
    assert abs(r1.mean() - r2.mean()) < 4 * r2.std() / math.sqrt(n)
    assert abs(np.median(a1) - np.median(a2)) < 0.12
    assert abs(r1.std() - r2.std()) < 0.25 * r2.std()
    flips = np.mean([g["flip"] for g in got])
    assert 0.3 < flips < 0.7
    scales = {g["scale"] for g in got}
    assert {4, 8} <= scales <= {1, 2, 4, 8}    # a 64 px output lets most windows decode scaled


def _unfused(buf, box, interp=cv2.INTER_LINEAR, size=224):
    y0, x0, hh, ww = box
    full = cv2.imdecode(np.frombuffer(buf, np.uint8), cv2.IMREAD_COLOR)
    return cv2.resize(full[y0:y0 + hh, x0:x0 + ww], (size, size), interpolation=interp)


@pytest.mark.parametrize("interp", [cv2.INTER_LINEAR, cv2.INTER_CUBIC])
def test_pixels_match_the_full_decode_on_the_same_window(big_jpeg, interp):
    aug = imgaug.DecodeRandomResizedCrop(160, interp=interp, color_jitter=False, flip=False)
    aug.reset_state()
    seen = {}
    for _ in range(60):
        out, p = aug.decode_with_params(big_jpeg)
        ref = _unfused(big_jpeg, p["box"], interp, 160)
        err = np.abs(out.astype(np.int16) - ref).mean()
        if p["scale"] == 1:
            np.testing.assert_array_equal(out, ref)    # full scale: the same operations
        else:
            assert err < 2.5, (p, err)                 # DCT scaling: a few grey levels at most
        seen.setdefault(p["scale"], []).append(err)
        if len(seen) >= 2 and min(len(v) for v in seen.values()) >= 4:
            break
    assert {2, 4} <= set(seen)


def test_full_scale_equals_the_unfused_augmentors_bit_for_bit(small_jpeg, fixed_seed):
    """Jitter and flip included: with the same seed, the output is the unfused pipeline's."""
    fused = imgaug.DecodeRandomResizedCrop(96, interp=cv2.INTER_CUBIC, reduced_decode=False)
    unfused = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(target_shape=96, interp=cv2.INTER_CUBIC),
                                    imgaug.FusedColorJitter(), imgaug.Flip(horiz=True)])
    fused.reset_state()
    unfused.reset_state()
    img = cv2.imdecode(np.frombuffer(small_jpeg, np.uint8), cv2.IMREAD_COLOR)
    for _ in range(8):
        out, p = fused.decode_with_params(small_jpeg)
        assert p["scale"] == 1
        np.testing.assert_array_equal(out, unfused.augment(img))


def test_reduced_decode_off_is_always_full_scale(big_jpeg):
    aug = imgaug.DecodeRandomResizedCrop(64, color_jitter=False, reduced_decode=False)
    aug.reset_state()
    assert {aug.decode_with_params(big_jpeg)[1]["scale"] for _ in range(10)} == {1}


def test_with_jitter_output_is_close_to_the_unfused_one(big_jpeg, fixed_seed):
    fused = imgaug.DecodeRandomResizedCrop(128)
    unfused = imgaug.AugmentorList([imgaug.GoogleNetRandomCropAndResize(target_shape=128),
                                    imgaug.FusedColorJitter(), imgaug.Flip(horiz=True)])
    fused.reset_state()
    unfused.reset_state()
    img = cv2.imdecode(np.frombuffer(big_jpeg, np.uint8), cv2.IMREAD_COLOR)
    for _ in range(6):
        out, p = fused.decode_with_params(big_jpeg)
        ref = unfused.augment(img)
        assert out.shape == (128, 128, 3) and out.dtype == np.uint8
        assert np.abs(out.astype(np.int16) - ref).mean() < 4, p


def test_other_formats_and_decoded_images(small_jpeg):
    aug = imgaug.DecodeRandomResizedCrop((48, 64))
    aug.reset_state()
    png = cv2.imencode(".png", _photo(60, 80))[1].tobytes()
    out, p = aug.decode_with_params(png)
    assert out.shape == (48, 64, 3) and p["scale"] == 0
    # on an already decoded image it is the unfused augmentation
    img = cv2.imdecode(np.frombuffer(small_jpeg, np.uint8), cv2.IMREAD_COLOR)
    out, tfm = aug.augment_return_params(img)
    assert out.shape == (48, 64, 3)
    np.testing.assert_array_equal(tfm.apply_image(img), out)   # replayable
    grey = cv2.imencode(".jpg", _photo(120, 160)[:, :, 0])[1].tobytes()
    assert aug.decode(grey).shape == (48, 64, 3)


def test_bad_input_is_a_clear_error(small_jpeg):
    aug = imgaug.DecodeRandomResizedCrop(32)
    with pytest.raises(BadImageError, match="truncated JPEG"):
        aug.decode(small_jpeg[: len(small_jpeg) // 2], name="cut.jpg")
    with pytest.raises(BadImageError, match="nonsense.bin"):
        aug.decode(b"certainly not an image", name="nonsense.bin")
    with pytest.raises(BadImageError, match="empty"):
        aug.decode(b"")
    with pytest.raises(TypeError, match="color_jitter"):
        imgaug.DecodeRandomResizedCrop(32, color_jitter="yes")


def test_file_paths(small_jpeg, tmp_path):
    path = tmp_path / "a.JPEG"
    path.write_bytes(small_jpeg)
    aug = imgaug.DecodeRandomResizedCrop(40)
    assert aug(str(path)).shape == (40, 40, 3) and aug.decode(path).shape == (40, 40, 3)
    with pytest.raises(BadImageError, match="missing.JPEG"):
        aug.decode(str(tmp_path / "missing.JPEG"))


def test_pickles_for_worker_processes(small_jpeg):
    aug = pickle.loads(pickle.dumps(imgaug.DecodeRandomResizedCrop(32)))
    assert aug.decode(small_jpeg).shape == (32, 32, 3)


def test_fallback_when_no_window_fits(fixed_seed):
    """A window that can never fit (aspect 3 inside a square): shortest edge + centre crop."""
    buf = _jpeg(_photo(400, 400, seed=2))
    kw = dict(crop_area_fraction=(0.9, 1.0), aspect_ratio_range=(3.0, 3.0), target_shape=64)
    fused = imgaug.DecodeRandomResizedCrop(**kw, color_jitter=False, flip=False, reduced_decode=False)
    unfused = imgaug.GoogleNetRandomCropAndResize(**kw)
    fused.reset_state()
    unfused.reset_state()
    img = cv2.imdecode(np.frombuffer(buf, np.uint8), cv2.IMREAD_COLOR)
    out, p = fused.decode_with_params(buf)
    assert p["box"] is None and p["scale"] == 1
    np.testing.assert_array_equal(out, unfused.augment(img))
    scaled = imgaug.DecodeRandomResizedCrop(**kw, color_jitter=False, flip=False)
    out2, p2 = scaled.decode_with_params(buf)
    assert p2["scale"] == 4 and out2.shape == (64, 64, 3)     # 400 / 4 = 100 >= 64
    assert np.abs(out2.astype(np.int16) - out).mean() < 3
