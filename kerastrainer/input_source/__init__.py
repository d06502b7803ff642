"""Input sources: DataFlow, tf.data or constants -> the tensors of the traced step."""
from .base import InputSource, InputSourceError, check_datapoint
from .dataset import TFDatasetInput
from .dummy import DummyConstantInput
from .feed import FeedInput
from .queue import DataFlowEndedError, QueueInput
from .staging import StagingInput

__all__ = ["InputSource", "InputSourceError", "check_datapoint", "FeedInput", "QueueInput",
           "DataFlowEndedError", "TFDatasetInput", "DummyConstantInput", "StagingInput"]
