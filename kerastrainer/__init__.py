"""kerastrainer: tensorpack-style training for TensorFlow 2 and Keras 3.

``from kerastrainer import *`` gives the tensorpack names: ``ModelDesc``,
``TrainConfig``, ``launch_train_with_config``, the trainers, the callbacks, the
functional layers and the DataFlows.

Importing the package or :mod:`kerastrainer.dataflow` does not import TensorFlow;
the TF-side names are loaded on first use. The TF1 layer (:mod:`kerastrainer.compat`: ``tfv1``,
the translations of TF1 idioms) is loaded by ``from kerastrainer import *`` (tensorpack's
idiom), by a name of its own (``kerastrainer.tfv1``), by importing it, or when a program that
uses TF1 APIs trains; a program that names what it uses (``from kerastrainer import
KerasModel``) and trains a Keras model or a TF2-native ModelDesc never loads it.
"""
import importlib

from ._version import __version__
from .utils.cpu_allocator import apply_default_cpu_allocator as _apply_default_cpu_allocator
from .utils.xla_flags import apply_default_xla_flags as _apply_default_xla_flags

# before TensorFlow starts: XLA reads XLA_FLAGS once, TF picks its CPU allocator once
_apply_default_xla_flags()
_apply_default_cpu_allocator()
from .utils import logger
from . import dataflow
from .dataflow import *  # noqa: F401,F403  (TF-free)

# Subpackages whose public names are re-exported here, loaded on first access.
_TF_MODULES = ("kerastrainer.utils", "kerastrainer.tfutils", "kerastrainer.input_source", "kerastrainer.models",
               "kerastrainer.callbacks", "kerastrainer.train", "kerastrainer.predict",
               "kerastrainer.keras", "kerastrainer.lms")
# The TF1 layer's own names (kerastrainer.compat's __all__ less the core's): it is loaded when one is used.
_COMPAT_MODULE = "kerastrainer.compat"
_COMPAT_NAMES = ("tfv1", "is_tfv2", "get_op_tensor_name")
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
        # a program that uses TF1's API gets the TF1 layer now, before its next line runs
        from .tfutils.extensions import load_extensions
        load_extensions()
    return _tf_names


def __getattr__(name):
    if name == "__all__":
        # computed on demand (by a star-import), so that `import kerastrainer` stays TF-free; a
        # star-import is tensorpack's idiom and gives the TF1 layer's names too
        return list(dataflow.__all__) + ["logger"] + list(_tf_name_map()) + list(_COMPAT_NAMES) \
            + list(_STAR_SUBMODULES)
    if name.startswith("__"):
        raise AttributeError(name)
    mod = _tf_name_map().get(name)
    if mod is None and name in _COMPAT_NAMES:
        mod = importlib.import_module(_COMPAT_MODULE)
    if mod is None and name in _STAR_SUBMODULES:
        return importlib.import_module(f"kerastrainer.{name}")
    if mod is None:
        raise AttributeError(f"module 'kerastrainer' has no attribute {name!r}")
    return getattr(mod, name)


def __dir__():
    return sorted(set(globals()) | set(_tf_name_map()) | set(_COMPAT_NAMES))
