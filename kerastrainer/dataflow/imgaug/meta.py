"""tensorpack's ``dataflow.imgaug.meta`` path: augmentors made of augmentors."""
from .compose import Identity, RandomApplyAug, RandomChooseAug, RandomOrderAug
from .convert import MapImage

__all__ = ["RandomChooseAug", "MapImage", "Identity", "RandomApplyAug", "RandomOrderAug"]
