"""Large model support: train models whose activations do not fit in device memory.

``LMS`` recomputes blocks of a model in the backward pass, or moves the tensors
they keep to host memory and back, or both; ``'auto'`` picks per block from the
estimated activation sizes and the memory budget. See docs/lms.md.

Example::

    from kerastrainer.lms import LMS, lms_block
    config = TrainConfig(model=Model(), dataflow=df, callbacks=[LMS('recompute')])
    keras_model.fit(x, y, callbacks=[LMS(swapout_threshold=2, swapin_ahead=1, swapin_groupby=1)])

IBM TFLMS's names and knobs are accepted (``LMSKerasCallback`` is ``LMS``); see
docs/migration-keras2-tflms.md.
"""
# tfutils (which loads models/, whose resnet uses lms.blocks) first, so that `from kerastrainer.lms
# import LMS` as a program's first import does not meet lms.blocks half-loaded
from ..tfutils import tower as _tower  # noqa: F401,E402
from .blocks import current_block_key, lms_block  # noqa: E402
from .planner import Plan, device_memory_budget
from .policy import LMS, LMSKerasCallback, LMSSessionRunHook, POLICIES
from .recompute import LMSBlockError

__all__ = ["LMS", "LMSKerasCallback", "LMSSessionRunHook", "POLICIES", "lms_block", "current_block_key", "LMSBlockError", "Plan",
           "device_memory_budget"]
