"""``ZMQInput``: batches sent by ``send_dataflow_zmq`` from other processes or hosts."""
from __future__ import annotations

from ..dataflow.remote import RemoteDataZMQ
from .queue import QueueInput

__all__ = ["ZMQInput"]


class ZMQInput(QueueInput):
    """Receive batches on a ZeroMQ PULL socket at ``end_point`` and train on them through a queue.
    The senders run ``send_dataflow_zmq(df, end_point)`` (kerastrainer's wire format; tensorpack's
    ``format='zmq_ops'`` is not needed). The stream has no end: give ``steps_per_epoch``.

    Args:
        end_point: a ZeroMQ address, ``'ipc:///tmp/train-data'`` or ``'tcp://0.0.0.0:5555'``.
        hwm: the socket's high-water mark (messages buffered).
        bind: bind the address (the senders connect), else connect to it.

    Example::

        # sender processes: send_dataflow_zmq(BatchData(df, 64), 'ipc:///tmp/data')
        launch_train_with_config(TrainConfig(model=M(), data=ZMQInput('ipc:///tmp/data', 50),
                                             steps_per_epoch=500), SimpleTrainer())
    """

    def __init__(self, end_point: str, hwm: int, bind: bool = True):
        self.end_point, self.hwm, self.bind = end_point, hwm, bind
        super().__init__(RemoteDataZMQ(end_point, hwm=hwm, bind=bind), name="ZMQInput")
