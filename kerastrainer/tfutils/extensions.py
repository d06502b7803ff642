"""The hooks through which a layer above the core (``kerastrainer.compat``: TF1 idioms) reaches it.

The core never imports ``compat/``. It offers these extension points, and ``compat/__init__.py``
registers into them:

- **where a tower is called** (``TowerFunction.__call__``): :func:`tower_contexts` enters every
  context registered with :func:`add_tower_context` (``tfv1.get_variable`` into the layer store);
- **where ``ModelDesc.optimizer()`` is read** (``ModelDesc.get_optimizer``, ``KerasModel.compile``):
  :func:`read_optimizer` / :func:`translate_optimizer` call the functions set with
  :func:`set_optimizer_reader` (a ``tf.compat.v1.train`` optimizer becomes a Keras one);
- **where training is launched** (``launch_train_with_config``): :func:`launch_contexts`
  (training inside a TF1 ``with tf.Graph().as_default():`` block).

A program that never imports ``kerastrainer.compat`` but uses TF1 APIs still gets these
translations: the packages named in :data:`EXTENSIONS` are loaded by name (``importlib``, once)
when a hook is used and :func:`program_uses_tf1` says so. That tuple is the one place the core
names compat; no core module imports it. A Keras program or a TF2-native ModelDesc never loads
it, so none of its process-wide patches (``tf.compat.v1`` stand-ins) are made for them.

The learning-rate variable of a translated optimizer (a TF1 ``tf.Variable`` the Keras optimizer
reads through a callable) is kept here too (:func:`set_learning_rate_variable`), so that
``Trainer.get_hyperparam_var('learning_rate')`` finds it without asking compat.
"""
from __future__ import annotations

import importlib
import inspect
import os
import re
import sys
import sysconfig
import threading
from contextlib import ExitStack
from typing import Callable, List, Optional

__all__ = ["EXTENSIONS", "program_uses_tf1", "code_names_tf1", "add_tower_context", "tower_contexts", "add_launch_context", "launch_contexts",
           "set_optimizer_reader", "read_optimizer", "translate_optimizer", "set_learning_rate_variable",
           "learning_rate_variable"]

# packages that register into these hooks, loaded at the first use of one
EXTENSIONS = ("kerastrainer.compat",)

_lock = threading.Lock()
_loaded = {"done": False}
_tower_contexts: List[Callable] = []
_launch_contexts: List[Callable] = []
_optimizer = {"read": None, "translate": None}


# what in a program's source says that it uses TF1's API (a comment that names one counts too:
# loading the TF1 layer for a TF2 program costs nothing but its patches; missing it would train
# a TF1 program wrongly)
_TF1_MARKERS = re.compile(r"compat\.v1|\btfv1\b|\btf\.layers\.|\bget_variable\(|\bvariable_scope\(|"
                          r"custom_getter|disable_eager_execution|disable_v2_behavior|\btf\.contrib\b")
_OWN_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_INSTALLED = tuple({os.path.abspath(p) for p in (sysconfig.get_paths().get(k) for k in
                                                  ("stdlib", "platstdlib", "purelib", "platlib")) if p})
_scanned: dict = {}   # module file -> whether it names a TF1 API


def _is_program_file(path: str) -> bool:
    path = os.path.abspath(path)
    if os.path.basename(path).startswith("__autograph_generated"):   # TF's conversions of library code
        return False
    return path.endswith(".py") and not path.startswith(_OWN_DIR + os.sep) and \
        not any(path.startswith(d + os.sep) for d in _INSTALLED) and "site-packages" not in path


def _names_tf1(path: str) -> bool:
    found = _scanned.get(path)
    if found is None:
        try:
            with open(path, encoding="utf-8", errors="replace") as f:
                found = bool(_TF1_MARKERS.search(f.read()))
        except OSError:
            found = False
        _scanned[path] = found
    return found


def _source_names_tf1(obj) -> bool:
    try:
        path = inspect.getsourcefile(obj)
        if not path or not _is_program_file(path):
            return False
        return bool(_TF1_MARKERS.search(inspect.getsource(obj)))
    except (OSError, TypeError):
        return False


def code_names_tf1(fn: Callable) -> bool:
    """Whether the code of a tower function names a TF1 API: the classes of its object (a
    ModelDesc's ``build_graph``) outside kerastrainer, or the function and the functions it holds
    (tensorpack's ``get_cost_fn``). Such a tower names and shares variables by TF1's variable scope."""
    owner = getattr(fn, "__self__", None)
    candidates = [fn] if owner is None else [c for c in type(owner).__mro__ if c is not object]
    if owner is not None:
        candidates += [v for v in vars(owner).values() if inspect.isfunction(v) or inspect.ismethod(v)]
    # a closure made by a model's method (an inference tower of ``get_inference_func(attacker)``):
    # the functions it holds and the classes of the objects it holds (that model) count too
    for cell in getattr(fn, "__closure__", None) or ():
        try:
            held = cell.cell_contents
        except ValueError:   # an empty cell
            continue
        if inspect.isfunction(held) or inspect.ismethod(held):
            candidates.append(held)
        elif not isinstance(held, type):
            candidates += [c for c in type(held).__mro__ if c is not object]
    return any(_source_names_tf1(c) for c in candidates)


def program_uses_tf1() -> bool:
    """Whether the running program uses TF1's API, so the TF1 layer must be loaded: it imported
    ``tensorflow.compat.v1`` or the TF1 layer itself, or one of its own source files (the
    ``__main__`` script and every module loaded from outside the installed packages) names a TF1
    API (``tf.compat.v1``, ``tfv1``, ``tf.layers``, ``get_variable``, ``variable_scope``...)."""
    if _loaded["done"] or "tensorflow.compat.v1" in sys.modules or any(n in sys.modules for n in EXTENSIONS):
        return True
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if path and _is_program_file(path) and _names_tf1(path):
            return True
    return False


def load_extensions(force: bool = False) -> None:
    """Import the packages of :data:`EXTENSIONS` once (they register their hooks when imported),
    if the program uses TF1's API (:func:`program_uses_tf1`) or ``force``."""
    if _loaded["done"] or not (force or program_uses_tf1()):
        return
    with _lock:
        if _loaded["done"]:
            return
        _loaded["done"] = True
        for name in EXTENSIONS:
            importlib.import_module(name)


def add_tower_context(factory: Callable) -> None:
    """``factory(layer_store)`` -> a context manager entered around every tower call."""
    if factory not in _tower_contexts:
        _tower_contexts.append(factory)


def tower_contexts(layer_store) -> ExitStack:
    """The registered tower contexts for ``layer_store``, entered (use as ``with``)."""
    load_extensions()
    stack = ExitStack()
    try:
        for factory in _tower_contexts:
            stack.enter_context(factory(layer_store))
    except BaseException:
        stack.close()
        raise
    return stack


def add_launch_context(factory: Callable) -> None:
    """``factory(who)`` -> a context manager entered around ``launch_train_with_config``."""
    if factory not in _launch_contexts:
        _launch_contexts.append(factory)


def launch_contexts(who: str = "launch_train_with_config") -> ExitStack:
    """The registered launch contexts, entered (use as ``with``)."""
    load_extensions()
    stack = ExitStack()
    try:
        for factory in _launch_contexts:
            stack.enter_context(factory(who))
    except BaseException:
        stack.close()
        raise
    return stack


def set_optimizer_reader(read: Callable, translate: Callable) -> None:
    """``read(optimizer_fn, layer_store)`` calls ``ModelDesc.optimizer`` and returns a Keras
    optimizer; ``translate(opt)`` turns a non-Keras optimizer object into one."""
    _optimizer["read"], _optimizer["translate"] = read, translate


def read_optimizer(optimizer_fn: Callable, layer_store):
    """The Keras optimizer of ``ModelDesc.optimizer`` (called once, as the registered reader does)."""
    load_extensions()
    if _optimizer["read"] is not None:
        return _optimizer["read"](optimizer_fn, layer_store)
    opt = optimizer_fn()
    # a TF1 optimizer from a program that the source scan did not show to use TF1 (its code
    # lives in an installed package): the TF1 layer translates it
    return translate_optimizer(opt) if hasattr(opt, "compute_gradients") and not _is_keras_optimizer(opt) else opt


def translate_optimizer(opt):
    """``opt`` as a Keras optimizer (a Keras optimizer is returned as is)."""
    if _is_keras_optimizer(opt):
        return opt
    load_extensions(force=True)   # another kind of optimizer: the TF1 layer translates it, or says why not
    if _optimizer["translate"] is not None:
        return _optimizer["translate"](opt)
    return opt


def _is_keras_optimizer(opt) -> bool:
    keras = sys.modules.get("keras")
    return keras is not None and isinstance(opt, keras.optimizers.Optimizer)


def set_learning_rate_variable(optimizer, variable) -> None:
    """Record the ``tf.Variable`` a (translated) optimizer reads its learning rate from (kept on
    the optimizer, under a name of ours)."""
    optimizer._kerastrainer_lr_variable = variable


def learning_rate_variable(optimizer) -> Optional[object]:
    """The variable recorded by :func:`set_learning_rate_variable`, or None."""
    return getattr(optimizer, "_kerastrainer_lr_variable", None)
