"""tensorpack's ``tfutils.sesscreate``: TF1 session creators, for programs that run TF1 sessions.

``get_default_sess_config`` (tensorpack's ``tfutils.common``) lives here too: a session config
is a session's. It returns a ``tf.compat.v1.ConfigProto``, which ``TrainConfig(session_config=...)``
and :func:`apply_session_config` apply through ``tf.config`` (``tfutils/session_config.py``).
"""
import tensorflow as tf

from .session_config import apply_session_config

__all__ = ["NewSessionCreator", "ReuseSessionCreator", "SessionCreatorAdapter", "get_default_sess_config",
           "apply_session_config"]

class NewSessionCreator(tf.compat.v1.train.SessionCreator):
    """A new ``tf.compat.v1.Session`` with ``config`` (tensorpack's default when None), its graph's
    variables, local variables and tables initialised (tensorpack's). For a TF1 graph-mode program;
    kerastrainer's trainers need no session (give them ``TrainConfig(session_config=...)``).

    Example::

        with graph.as_default():
            sess = NewSessionCreator(config=get_default_sess_config()).create_session()
    """

    def __init__(self, target: str = "", config=None):
        self.target = target
        self.user_provided_config = config is not None
        self.config = get_default_sess_config() if config is None else config

    def create_session(self):
        v1 = tf.compat.v1
        sess = v1.Session(target=self.target, config=self.config)
        with sess.graph.as_default():
            init = tf.group(v1.global_variables_initializer(), v1.local_variables_initializer(),
                            v1.tables_initializer())
        sess.run(init)
        return sess


class ReuseSessionCreator(tf.compat.v1.train.SessionCreator):
    """Returns the session it was given (tensorpack's).

    Example::

        ReuseSessionCreator(sess).create_session() is sess
    """

    def __init__(self, sess):
        self.sess = sess

    def create_session(self):
        return self.sess


class SessionCreatorAdapter(tf.compat.v1.train.SessionCreator):
    """``func(session)`` of the session ``session_creator`` makes (tensorpack's).

    Example::

        SessionCreatorAdapter(NewSessionCreator(), lambda sess: tf_debug.LocalCLIDebugWrapperSession(sess))
    """

    def __init__(self, session_creator, func):
        self._creator = session_creator
        self._func = func

    def create_session(self):
        return self._func(self._creator.create_session())


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
