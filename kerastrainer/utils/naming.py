"""tensorpack's names of graph keys (``tensorpack.utils.naming``), with the same values.

``MOVING_SUMMARY_OPS_KEY`` is the key of ``add_moving_summary``'s values, which
``tfutils.collection`` (``freeze_collection`` / ``backup_collection``) understands as tensorpack's
collection; ``GLOBAL_STEP_INCR_OP_NAME`` the name tensorpack gave the op that increments the
global step.

Example::

    from kerastrainer.tfutils.collection import freeze_collection
    from kerastrainer.utils.naming import MOVING_SUMMARY_OPS_KEY
    with freeze_collection([MOVING_SUMMARY_OPS_KEY]):
        add_moving_summary(tf.identity(x, name='not_logged'))
"""
GLOBAL_STEP_INCR_OP_NAME = "global_step_incr"

# extra variables to summarize during training in a moving-average way
MOVING_SUMMARY_OPS_KEY = "MOVING_SUMMARY_OPS"
