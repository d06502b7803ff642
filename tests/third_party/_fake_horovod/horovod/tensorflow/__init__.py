"""A one-process stand-in for ``horovod.tensorflow`` (tests only; see tests/third_party/_run.py).

Horovod's last release (0.28.1) does not build against TF 2.21, so the ported Horovod programs run
here as a job of one rank: ``size() == 1``, ``rank() == local_rank() == 0``, and ``allreduce`` /
``broadcast`` are what Horovod's ops compute on one rank (the tensor itself; an average over one rank
is the tensor too). Only the part of Horovod's TF API that the ports and kerastrainer's
HorovodTrainer call is here.
"""
import tensorflow as tf

Sum, Average = "Sum", "Average"


class Compression:
    none = "none"
    fp16 = "fp16"


_state = {"init": False}


def init(*args, **kwargs):
    _state["init"] = True


def is_initialized():
    return _state["init"]


def _need_init():
    if not _state["init"]:
        raise ValueError("Horovod has not been initialized; use hvd.init().")


def size():
    _need_init()
    return 1


def rank():
    _need_init()
    return 0


def local_size():
    return size()


def local_rank():
    _need_init()
    return 0


def allreduce(tensor, average=None, device_dense="", device_sparse="", compression=None, op=None, name=None,
              **kwargs):
    _need_init()
    return tf.identity(tensor, name=name)


def broadcast(tensor, root_rank, name=None, **kwargs):
    _need_init()
    return tf.identity(tensor, name=name)
