"""Augmentors made of other augmentors: a sequence, a random order, a random choice, a
random application; and the augmentor that does nothing."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import numpy as np

from .base import ImageAugmentor, check_image
from .transform import LazyTransform, NoOpTransform, Transform, TransformList

__all__ = ["AugmentorList", "RandomOrderAug", "RandomChooseAug", "RandomApplyAug", "Identity"]


def _as_augmentor_list(augmentors, who: str):
    if isinstance(augmentors, ImageAugmentor):
        augmentors = [augmentors]
    augmentors = list(augmentors)
    for i, a in enumerate(augmentors):
        if not isinstance(a, ImageAugmentor):
            raise TypeError(f"{who}: item {i} is a {type(a).__name__}, not an ImageAugmentor.")
    return augmentors


class AugmentorList(ImageAugmentor):
    """Apply several augmentors in order; the drawn transform is a :class:`TransformList`.

    Each augmentor draws its transform from the output of the previous one, so
    sizes chain correctly (e.g. ``ResizeShortestEdge`` then ``CenterCrop``).

    Example::

        augs = AugmentorList([ResizeShortestEdge(256), CenterCrop(224)])
        augs.reset_state()
        out, tfm = augs.augment_return_params(img)
        mask_out = tfm.apply_mask(mask)
    """

    def __init__(self, augmentors: Sequence[ImageAugmentor]):
        self.augmentors = _as_augmentor_list(augmentors, type(self).__name__)
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        for a in self.augmentors:
            a.reset_state()

    def _ordered(self):
        return self.augmentors

    def augment_return_params(self, img: np.ndarray) -> Tuple[np.ndarray, Transform]:
        check_image(img, type(self).__name__)
        tfms = []
        for a in self._ordered():
            t = a.get_transform(img)
            img = t.apply_image(img)
            tfms.append(t)
        return img, TransformList(tfms)

    def get_transform(self, img: np.ndarray) -> Transform:
        """The transforms of the list, without computing the image: the first is drawn
        from ``img``, each later one from its input when the list is first applied to an
        image (:class:`LazyTransform`), so ``get_transform(img).apply_image(img)`` does the
        work once. Apply it to an image before replaying it on coordinates or masks."""
        check_image(img, type(self).__name__)
        augs = self._ordered()
        if not augs:
            return TransformList([])
        return TransformList([augs[0].get_transform(img)] + [LazyTransform(a.get_transform) for a in augs[1:]])


class RandomOrderAug(AugmentorList):
    """Apply several augmentors in a random order drawn for each image.

    Each augmentor draws from the previous one's output (tensorpack draws them all from
    the input, assuming they keep its shape; for such augmentors the two agree).

    Example::

        jitter = RandomOrderAug([BrightnessScale((0.6, 1.4)), Contrast((0.6, 1.4)), Saturation(0.4)])
    """

    def __init__(self, augmentors: Optional[Sequence[ImageAugmentor]] = None,
                 aug_lists: Optional[Sequence[ImageAugmentor]] = None):
        if (augmentors is None) == (aug_lists is None):
            raise TypeError("RandomOrderAug: give the augmentors (aug_lists= is tensorpack's name), once.")
        super().__init__(augmentors if augmentors is not None else aug_lists)

    def _ordered(self):
        return [self.augmentors[i] for i in self.rng.permutation(len(self.augmentors))]


class Identity(ImageAugmentor):
    """Does nothing (a placeholder, e.g. one of the choices of :class:`RandomChooseAug`).

    Example::

        RandomChooseAug([Identity(), GaussianBlur(3)])
    """

    def get_transform(self, img):
        return NoOpTransform()


class RandomApplyAug(ImageAugmentor):
    """Apply ``aug`` with probability ``prob``, else do nothing.

    Example::

        RandomApplyAug(GaussianBlur(3), 0.3)
    """

    def __init__(self, aug: ImageAugmentor, prob: float):
        self.aug = _as_augmentor_list(aug, "RandomApplyAug")[0]
        if not 0.0 <= float(prob) <= 1.0:
            raise ValueError(f"RandomApplyAug: prob must be in [0, 1], got {prob!r}.")
        self.prob = float(prob)
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        self.aug.reset_state()

    def get_transform(self, img):
        if self.rng.rand() < self.prob:
            return self.aug.get_transform(img)
        return NoOpTransform()


class RandomChooseAug(ImageAugmentor):
    """Apply one augmentor chosen at random for each image: uniformly from a list, or
    from ``(augmentor, probability)`` pairs (the probabilities are normalised).

    Example::

        RandomChooseAug([(Identity(), 0.5), (Flip(horiz=True, prob=1), 0.5)])
    """

    def __init__(self, aug_lists):
        aug_lists = list(aug_lists)
        if not aug_lists:
            raise ValueError("RandomChooseAug: the list of augmentors is empty.")
        if isinstance(aug_lists[0], (tuple, list)):
            prob = np.array([float(p) for _, p in aug_lists])
            aug_lists = [a for a, _ in aug_lists]
            if (prob < 0).any() or prob.sum() <= 0:
                raise ValueError(f"RandomChooseAug: probabilities must be >= 0 with a positive sum, got {prob}.")
            prob = prob / prob.sum()
        else:
            prob = np.full(len(aug_lists), 1.0 / len(aug_lists))
        self.aug_lists = _as_augmentor_list(aug_lists, "RandomChooseAug")
        self.prob = prob
        super().__init__()

    def reset_state(self) -> None:
        super().reset_state()
        for a in self.aug_lists:
            a.reset_state()

    def get_transform(self, img):
        return self.aug_lists[self.rng.choice(len(self.aug_lists), p=self.prob)].get_transform(img)
