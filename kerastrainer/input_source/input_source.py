"""Mirrors ``tensorpack.input_source.input_source``: the input sources."""
from .dataset import TFDatasetInput
from .dummy import DummyConstantInput
from .feed import FeedInput
from .queue import BatchQueueInput, QueueInput
from .staging import StagingInput
from .tensor import FeedfreeInput, PlaceholderInput, TensorInput
from .zmq import ZMQInput

__all__ = ["PlaceholderInput", "FeedInput", "FeedfreeInput", "QueueInput", "BatchQueueInput",
           "DummyConstantInput", "TensorInput", "ZMQInput", "TFDatasetInput", "StagingInput"]
