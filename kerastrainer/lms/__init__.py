"""Large model support: train models whose activations do not fit in device memory.

``LMS`` recomputes blocks of a model in the backward pass, or moves the tensors
they keep to host memory and back, or both; ``'auto'`` picks per block from the
estimated activation sizes and the memory budget. See docs/lms.md.

Example::

    from kerastrainer.lms import LMS, lms_block
    config = TrainConfig(model=Model(), dataflow=df, callbacks=[LMS('recompute')])
"""
from .blocks import current_block_key, lms_block
from .planner import Plan, device_memory_budget
from .policy import LMS, POLICIES
from .recompute import LMSBlockError

__all__ = ["LMS", "POLICIES", "lms_block", "current_block_key", "LMSBlockError", "Plan",
           "device_memory_budget"]
