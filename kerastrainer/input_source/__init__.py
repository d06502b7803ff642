"""Input sources: DataFlow, tf.data or constants -> the tensors of the traced step."""
from .base import InputSource, InputSourceError, check_datapoint
from .dataset import TFDatasetInput
from .dummy import DummyConstantInput
from .feed import FeedInput
from .queue import DataFlowEndedError, QueueInput
from .staging import StagingInput
from .queue import BatchQueueInput
from .remap import remap_input_source
from .tensor import FeedfreeInput, PlaceholderInput, TensorInput
from .zmq import ZMQInput
from . import input_source, input_source_base  # tensorpack's module paths

__all__ = ["InputSource", "InputSourceError", "check_datapoint", "FeedInput", "QueueInput",
           "DataFlowEndedError", "TFDatasetInput", "DummyConstantInput", "StagingInput",
           "BatchQueueInput", "remap_input_source", "FeedfreeInput", "PlaceholderInput", "TensorInput", "ZMQInput"]
