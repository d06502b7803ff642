"""tensorpack's ``callbacks.hooks``: adapters to TF1 ``SessionRunHook``. TF2 has none; these raise."""
from ..utils.tf1_only import tf1_only_class
from .base import Callback

__all__ = ["CallbackToHook", "HookToCallback", "TFLocalCLIDebugHook"]

_WHY = "there are no tf.train.SessionRunHooks (no MonitoredSession)"
_INSTEAD = ("Write the hook's work as a kerastrainer Callback (before_train, trigger_step, "
            "trigger_epoch, after_train); for debugging, tf.debugging.enable_check_numerics() or "
            "tf.debugging.experimental.enable_dump_debug_info(logdir) with TensorBoard's debugger.")

CallbackToHook = tf1_only_class("CallbackToHook", __name__, _WHY, _INSTEAD)
HookToCallback = tf1_only_class("HookToCallback", __name__, _WHY, _INSTEAD, base=Callback)
TFLocalCLIDebugHook = tf1_only_class("TFLocalCLIDebugHook", __name__, _WHY, _INSTEAD, base=Callback)
