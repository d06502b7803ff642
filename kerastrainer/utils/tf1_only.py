"""TF1-only tensorpack names: they exist at their tensorpack path and, when used, raise.

tensorpack 0.11 has names that stand for things TF2 does not have (sessions, session creators,
``SessionRunHook``s, graph collections, custom getters, Caffe model import, the parameter-server
trainers). A program that merely imports them must keep importing; a program that uses them
must stop at once with an error that names the TF2 way. This module makes those names:
:func:`tf1_only_class` and :func:`tf1_only_function` build an object that raises
:class:`TF2UnsupportedError` when instantiated or called, and mark it with
``__tensorpack_status__ = ("raises", why and advice)``, which ``tools/tensorpack_api.py`` reads into the
API list (docs/tensorpack-api.md). :func:`mark_status` marks an object that works but warns.

Nothing here imports TensorFlow (``kerastrainer.dataflow`` uses it too).
"""
from typing import Any, Callable, Tuple

__all__ = ["TF2UnsupportedError", "tf1_only_class", "tf1_only_function", "mark_status", "status_of"]


class TF2UnsupportedError(NotImplementedError):
    """A tensorpack name whose concept TensorFlow 2 / Keras 3 does not have was used.

    The message names the tensorpack object and what to do instead.
    """


def _note(why: str, advice: str) -> str:
    """Why the name raises and the way out (the API list's note; part of the error's message)."""
    return f"{why} in TensorFlow 2 / kerastrainer. {advice}"


def _message(qualname: str, why: str, advice: str) -> str:
    return f"{qualname}: {_note(why, advice)}"


def tf1_only_class(name: str, module: str, why: str, advice: str, base: type = object) -> type:
    """A class named ``name`` (in ``module``) whose construction raises :class:`TF2UnsupportedError`.

    ``why`` says what TF2 lacks; ``advice`` says what to write instead. Subclassing the result
    works (a program may define subclasses at import time); instantiating any subclass raises.

    Example::

        NewSessionCreator = tf1_only_class(
            "NewSessionCreator", __name__, "there are no sessions",
            "Configure the runtime with tf.config (threading, memory growth) instead.")
        NewSessionCreator()   # raises TF2UnsupportedError naming tf.config
    """
    msg = _message(f"{module.replace('kerastrainer', 'tensorpack', 1)}.{name}", why, advice)
    note = _note(why, advice)

    def __new__(cls, *args: Any, **kwargs: Any):  # before any base's checks (an abstract DataFlow)
        raise TF2UnsupportedError(msg)

    cls = type(name, (base,), {"__new__": __new__, "__module__": module,
                               "__doc__": f"TF1 only: {why}. {advice}\n\nUsing it raises "
                                          f":class:`TF2UnsupportedError`.",
                               "__tensorpack_status__": ("raises", note)})
    return cls


def tf1_only_function(name: str, module: str, why: str, advice: str) -> Callable[..., Any]:
    """A function named ``name`` (in ``module``) that raises :class:`TF2UnsupportedError`.

    Example::

        backup_collection = tf1_only_function(
            "backup_collection", __name__, "there are no graph collections",
            "Keep the objects in a Python list.")
        backup_collection()   # raises TF2UnsupportedError
    """
    msg = _message(f"{module.replace('kerastrainer', 'tensorpack', 1)}.{name}", why, advice)
    note = _note(why, advice)

    def fn(*args: Any, **kwargs: Any) -> Any:
        raise TF2UnsupportedError(msg)

    fn.__name__ = fn.__qualname__ = name
    fn.__module__ = module
    fn.__doc__ = f"TF1 only: {why}. {advice}\n\nCalling it raises :class:`TF2UnsupportedError`."
    fn.__tensorpack_status__ = ("raises", note)
    return fn


def mark_status(status: str, note: str) -> Callable[[Any], Any]:
    """A decorator declaring how a tensorpack name behaves here (``'warns'``: accepted, warns).

    Example::

        @mark_status("warns", "runs the thread as is: TF2 has no session to share")
        class ShareSessionThread(threading.Thread): ...
    """
    if status not in ("warns", "raises"):
        raise ValueError(f"mark_status: status must be 'warns' or 'raises', got {status!r}")

    def mark(obj: Any) -> Any:
        obj.__tensorpack_status__ = (status, note)
        return obj
    return mark


def status_of(obj: Any) -> Tuple[str, str]:
    """``(status, note)`` declared on ``obj``, or ``('ok', '')``."""
    return getattr(obj, "__tensorpack_status__", ("ok", ""))
