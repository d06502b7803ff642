"""tensorpack's ``tfutils.distributed``: ``get_distributed_session_creator(server)``, the TF1 session
of a worker of a ``tf.train.Server`` cluster. TensorFlow 2 has no such sessions: it raises
``TF2UnsupportedError`` naming ``MultiWorkerTrainer`` / ``HorovodTrainer`` (docs/multi-node.md).

Example::

    launch_train_with_config(config, MultiWorkerTrainer())   # each rank started by kerastrainer-run
"""
from ..utils.tf1_only import tf1_only_function

__all__ = []   # as tensorpack's: imported by path

get_distributed_session_creator = tf1_only_function(
    "get_distributed_session_creator", __name__,
    "TF2 has no sessions on a tf.train.Server cluster to create",
    "Train on several processes or hosts with MultiWorkerTrainer (TF's collective all-reduce, TF_CONFIG "
    "or kerastrainer-run) or HorovodTrainer (docs/multi-node.md); no session is needed.")
