"""kerastrainer: tensorpack-style training for TensorFlow 2 and Keras 3.

``from kerastrainer import *`` gives the tensorpack names: ``ModelDesc``,
``TrainConfig``, ``launch_train_with_config``, the trainers, the callbacks, the
functional layers and the DataFlows.

Importing the package or :mod:`kerastrainer.dataflow` does not import TensorFlow;
the TF-side names are loaded on first use.
"""
import importlib

from ._version import __version__
from .utils.xla_flags import apply_default_xla_flags as _apply_default_xla_flags

_apply_default_xla_flags()  # before TensorFlow starts: XLA reads XLA_FLAGS once
from .utils import logger
from . import dataflow
from .dataflow import *  # noqa: F401,F403  (TF-free)

# Subpackages whose public names are re-exported here, loaded on first access.
_TF_MODULES = ("kerastrainer.utils", "kerastrainer.tfutils", "kerastrainer.input_source", "kerastrainer.models",
               "kerastrainer.callbacks", "kerastrainer.train", "kerastrainer.predict",
               "kerastrainer.keras", "kerastrainer.lms",
               "kerastrainer.compat")
_tf_names = None
# tensorpack's `from tensorpack import *` also gives its subpackages (bound by its imports)
_STAR_SUBMODULES = ("utils", "dataflow", "models", "callbacks", "tfutils", "train", "input_source", "predict",
                    "compat", "libinfo", "graph_builder")


def _tf_name_map():
    global _tf_names
    if _tf_names is None:
        names = {}
        for modname in _TF_MODULES:
            try:
                mod = importlib.import_module(modname)
            except ModuleNotFoundError as e:
                if e.name == modname:  # that part is not written yet
                    continue
                raise
            for n in getattr(mod, "__all__", []):
                names.setdefault(n, mod)
        _tf_names = names
    return _tf_names


def __getattr__(name):
    if name == "__all__":
        # computed on demand (by a star-import), so that `import kerastrainer` stays TF-free
        return list(dataflow.__all__) + ["logger"] + list(_tf_name_map()) + list(_STAR_SUBMODULES)
    if name.startswith("__"):
        raise AttributeError(name)
    mod = _tf_name_map().get(name)
    if mod is None:
        raise AttributeError(f"module 'kerastrainer' has no attribute {name!r}")
    return getattr(mod, name)


def __dir__():
    return sorted(set(globals()) | set(_tf_name_map()))
