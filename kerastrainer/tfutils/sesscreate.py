"""tensorpack's ``tfutils.sesscreate``: TF1 session creators. TF2 has no sessions; these raise.

``get_default_sess_config`` (tensorpack's ``tfutils.common``) lives here too: a session config
is a session's. What they configured is ``tf.config`` in TF2 (threads, memory growth, devices).
"""
from ..utils.tf1_only import tf1_only_class, tf1_only_function

__all__ = ["NewSessionCreator", "ReuseSessionCreator", "SessionCreatorAdapter", "get_default_sess_config"]

_WHY = "there are no sessions (TF2 runs eagerly and in tf.function)"
_INSTEAD = ("Drop the session creator (trainers need none; `session_creator=` is accepted and "
            "warned about); configure the runtime with tf.config.threading.set_*_parallelism_threads "
            "and tf.config.experimental.set_memory_growth before training.")

NewSessionCreator = tf1_only_class("NewSessionCreator", __name__, _WHY, _INSTEAD)
ReuseSessionCreator = tf1_only_class("ReuseSessionCreator", __name__, _WHY, _INSTEAD)
SessionCreatorAdapter = tf1_only_class("SessionCreatorAdapter", __name__, _WHY, _INSTEAD)
get_default_sess_config = tf1_only_function(
    "get_default_sess_config", __name__, "there is no tf.ConfigProto for a session",
    "Use tf.config.threading.set_intra_op_parallelism_threads / set_inter_op_parallelism_threads "
    "and tf.config.experimental.set_memory_growth(gpu, True).")
