"""Augmentors made of other augmentors: a sequence, a random order, a random choice, a
random application; and the augmentor that does nothing. (The sequence, ``AugmentorList``,
is defined in ``base.py``, its tensorpack path, and listed here.)"""
from __future__ import annotations

from typing import Optional, Sequence

import numpy as np

from ._transforms import NoOpTransform
from .base import AugmentorList, ImageAugmentor, _as_augmentor_list

__all__ = ["AugmentorList", "RandomOrderAug", "RandomChooseAug", "RandomApplyAug", "Identity"]


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
