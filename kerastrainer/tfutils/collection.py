"""tensorpack's ``tfutils.collection``: TF1 graph collections. TF2 has none; these raise."""
from ..utils.tf1_only import tf1_only_function

__all__ = ["backup_collection", "restore_collection", "freeze_collection"]

_WHY = "there are no graph collections"
_INSTEAD = ("Keep the objects in Python (a list, or the layer store: trainer.named_variables()); "
            "kerastrainer's layers never add to TF1 collections, so nothing needs saving or freezing.")

backup_collection = tf1_only_function("backup_collection", __name__, _WHY, _INSTEAD)
restore_collection = tf1_only_function("restore_collection", __name__, _WHY, _INSTEAD)
freeze_collection = tf1_only_function("freeze_collection", __name__, _WHY, _INSTEAD)
