"""tensorpack's ``tfutils.dependency``: TF1 graph fetch analysis. TF2 has no fetches; these raise."""
from ..utils.tf1_only import tf1_only_function

__all__ = ["dependency_of_targets", "dependency_of_fetches"]

_WHY = "there are no session fetches to analyse (ops run eagerly or inside a tf.function)"
_INSTEAD = ("Compute what you need in the tower and name it (tf.identity(x, name='x')); a predictor "
            "(trainer.get_predictor / PredictConfig) prunes the graph to the named outputs itself.")

dependency_of_targets = tf1_only_function("dependency_of_targets", __name__, _WHY, _INSTEAD)
dependency_of_fetches = tf1_only_function("dependency_of_fetches", __name__, _WHY, _INSTEAD)
