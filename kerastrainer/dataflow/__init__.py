"""DataFlows: composable data pipelines run in worker processes. No TensorFlow here.

Every public name of the modules below is re-exported.
"""
from . import base, common, dataset, image, imgaug, parallel, parallel_map, raw, remote, serialize
from .base import *  # noqa: F401,F403
from .common import *  # noqa: F401,F403
from .image import *  # noqa: F401,F403
from .parallel import *  # noqa: F401,F403
from .parallel_map import *  # noqa: F401,F403
from .raw import *  # noqa: F401,F403
from .remote import *  # noqa: F401,F403
from .serialize import *  # noqa: F401,F403
from .format import *  # noqa: F401,F403
from . import format as _format

__all__ = (base.__all__ + raw.__all__ + common.__all__ + serialize.__all__ + parallel.__all__
           + parallel_map.__all__ + remote.__all__ + image.__all__ + ["dataset", "imgaug"])
__all__ += [n for n in _format.__all__ if n not in __all__]
