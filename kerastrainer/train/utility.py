"""Mirrors ``tensorpack.train.utility`` (kept there for old imports): ``LeastLoadedDeviceSetter``
(``graph_builder/utils.py``) and the ``LOCAL_VARIABLES`` helpers of between-graph training
(``graph_builder/distributed.py``, which raise: TF2 has none)."""
from ..graph_builder.distributed import OverrideToLocalVariable, override_to_local_variable  # noqa: F401
from ..graph_builder.utils import LeastLoadedDeviceSetter  # noqa: F401
