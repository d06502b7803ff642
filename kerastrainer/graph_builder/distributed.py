"""tensorpack's ``graph_builder.distributed``: the builders of between-graph distributed training
(parameter servers or replicated variables on a ``tf.train.Server`` cluster, run by TF1 sessions),
and ``graph_builder.utils``' helpers that put a worker's copies of the variables in
``LOCAL_VARIABLES`` for them.

TensorFlow 2 has no between-graph training with sessions: these raise ``TF2UnsupportedError``
naming the way to train on several processes or hosts, ``MultiWorkerTrainer`` (TF's collective
all-reduce) or ``HorovodTrainer`` (docs/multi-node.md), as the trainers that used them do
(``DistributedTrainerReplicated``, ``DistributedTrainerParameterServer``).

Example::

    from kerastrainer.train import MultiWorkerTrainer
    launch_train_with_config(config, MultiWorkerTrainer())   # instead of DistributedReplicatedBuilder
"""
from ..utils.tf1_only import tf1_only_class, tf1_only_function
from .training import DataParallelBuilder, GraphBuilder

__all__ = []   # as tensorpack's: imported by path

_WHY = "TF2 has no between-graph training on a tf.train.Server cluster (sessions, per-worker graphs)"
_ADVICE = ("For several processes or hosts use MultiWorkerTrainer (TF's collective all-reduce) or "
           "HorovodTrainer (docs/multi-node.md); for several GPUs in one process, "
           "SyncMultiGPUTrainerReplicated.")

DistributedBuilderBase = tf1_only_class("DistributedBuilderBase", __name__, _WHY, _ADVICE, base=GraphBuilder)
DistributedParameterServerBuilder = tf1_only_class(
    "DistributedParameterServerBuilder", __name__, _WHY, _ADVICE, base=DataParallelBuilder)
DistributedReplicatedBuilder = tf1_only_class(
    "DistributedReplicatedBuilder", __name__, _WHY, _ADVICE, base=DataParallelBuilder)

_LOCAL_WHY = ("a worker's local copies of the variables (LOCAL_VARIABLES) belong to between-graph "
              "distributed training, which TF2 does not have")
OverrideToLocalVariable = tf1_only_class("OverrideToLocalVariable", "kerastrainer.graph_builder.utils",
                                         _LOCAL_WHY, _ADVICE)
override_to_local_variable = tf1_only_function("override_to_local_variable", "kerastrainer.graph_builder.utils",
                                               _LOCAL_WHY, _ADVICE)
