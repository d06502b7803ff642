"""tensorpack's ``tfutils.sesscreate``: TF1 session creators. TF2 has no sessions; these raise.

``get_default_sess_config`` (tensorpack's ``tfutils.common``) lives here too: a session config
is a session's. It returns a ``tf.compat.v1.ConfigProto``, which ``TrainConfig(session_config=...)``
and :func:`apply_session_config` apply through ``tf.config`` (``tfutils/session_config.py``).
"""
import tensorflow as tf

from ..utils.tf1_only import tf1_only_class
from .session_config import apply_session_config

__all__ = ["NewSessionCreator", "ReuseSessionCreator", "SessionCreatorAdapter", "get_default_sess_config",
           "apply_session_config"]

_WHY = "there are no sessions (TF2 runs eagerly and in tf.function)"
_INSTEAD = ("Drop the session creator (trainers need none; `session_creator=` is accepted and "
            "warned about); configure the runtime with tf.config.threading.set_*_parallelism_threads "
            "and tf.config.experimental.set_memory_growth before training.")

NewSessionCreator = tf1_only_class("NewSessionCreator", __name__, _WHY, _INSTEAD)
ReuseSessionCreator = tf1_only_class("ReuseSessionCreator", __name__, _WHY, _INSTEAD)
SessionCreatorAdapter = tf1_only_class("SessionCreatorAdapter", __name__, _WHY, _INSTEAD)


def get_default_sess_config(mem_fraction: float = 0.99) -> tf.compat.v1.ConfigProto:
    """tensorpack's default session config, as a ``tf.compat.v1.ConfigProto``: soft placement, one
    intra-op thread, TF's choice of inter-op threads, GPU memory growth and ``mem_fraction``.

    Give it to ``TrainConfig(session_config=...)`` (or :func:`apply_session_config`): the fields with
    a ``tf.config`` counterpart are applied there, the others named in a warning.

    Example::

        conf = get_default_sess_config()
        conf.intra_op_parallelism_threads = 0     # TF's choice
        TrainConfig(model=M(), dataflow=df, session_config=conf)
    """
    conf = tf.compat.v1.ConfigProto()
    conf.allow_soft_placement = True
    conf.intra_op_parallelism_threads = 1
    conf.inter_op_parallelism_threads = 0
    conf.gpu_options.per_process_gpu_memory_fraction = mem_fraction
    conf.gpu_options.allow_growth = True
    return conf
