"""One fence for Keras/TF internals: the package ``kerastrainer/_internals/`` (one module per concern)
is the only place that imports ``keras.src`` / ``tensorflow.python`` or touches a private attribute of
a Keras or TF object, and it checks the installed versions against the tested range."""
import os
import re
import warnings

import pytest

from kerastrainer import _internals
from kerastrainer._internals import versions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = os.path.join(REPO, "kerastrainer")
FENCE = os.path.join(PKG, "_internals")

# Private attributes of Keras/TF objects that kerastrainer uses (all in the fence). A new use of
# one of these names elsewhere in the package fails below; a new internal goes in the fence.
FOREIGN_PRIVATE_NAMES = [
    "_value", "_update_input", "_set_attr", "_distribution_strategy", "_trainable_variables_indices",
    "_var_key", "_trainable_variables", "_get_variable_index", "_velocities", "_moments",
    "_reduction_axes", "_inputs_struct", "_keras_history", "_clear_losses", "_flatten_layers",
    "_context_handle", "_VariableStore", "_use_locking", "_lr", "_learning_rate",
    "_momentum", "_use_nesterov", "_beta1", "_beta2", "_epsilon", "_decay", "_centered",
    "_initial_accumulator_value", "_rho",
]
_INTERNAL_IMPORT = re.compile(r"^\s*(from|import)\s+(keras\.src|tensorflow\.python|tensorflow\.core)\b", re.M)


def _sources():
    for dirpath, dirnames, filenames in os.walk(PKG):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for f in filenames:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                if os.path.commonpath([path, FENCE]) != FENCE:
                    with open(path, encoding="utf-8") as fh:
                        yield os.path.relpath(path, REPO), fh.read()


def _code_lines(text):
    for i, line in enumerate(text.splitlines(), 1):
        code = line.split("#", 1)[0]
        if code.strip():
            yield i, code


def _fence_text():
    texts = []
    for f in sorted(os.listdir(FENCE)):
        if f.endswith(".py"):
            with open(os.path.join(FENCE, f), encoding="utf-8") as fh:
                texts.append(fh.read())
    return "\n".join(texts)


def test_the_fence_is_one_package_of_small_modules():
    assert os.path.isdir(FENCE) and not os.path.exists(FENCE + ".py")
    assert all(getattr(_internals, name, None) is not None for name in _internals.__all__)


def test_the_grep_finds_something_in_the_fence():
    text = _fence_text()
    assert _INTERNAL_IMPORT.search(text)
    assert "._value" in text and "._update_input" in text


def test_no_internal_imports_outside_the_fence():
    bad = [f"{path}:{m.group(0).strip()}" for path, text in _sources() for m in _INTERNAL_IMPORT.finditer(text)]
    # also a dotted string handed to importlib
    bad += [f"{path}:{i}" for path, text in _sources() for i, code in _code_lines(text)
            if re.search(r"[\"'](keras\.src|tensorflow\.python)\b", code)]
    assert not bad, "keras.src / tensorflow.python used outside kerastrainer/_internals/:\n" + "\n".join(bad)


def test_no_foreign_private_attributes_outside_the_fence():
    names = "|".join(re.escape(n) for n in FOREIGN_PRIVATE_NAMES)
    attr = re.compile(rf"\.({names})\b|[\"']({names})[\"']")
    bad = [f"{path}:{i}: {code.strip()}" for path, text in _sources() for i, code in _code_lines(text)
           if attr.search(code)]
    assert not bad, ("a private attribute of a Keras/TF object is touched outside kerastrainer/_internals/ "
                     "(add a named function there):\n" + "\n".join(bad))


def test_every_fence_function_says_why():
    for name in _internals.__all__:
        obj = getattr(_internals, name)
        if callable(obj) and not isinstance(obj, type):
            assert (obj.__doc__ or "").strip(), f"_internals.{name} has no note of why no public API serves"


@pytest.fixture
def fresh_check(monkeypatch):
    monkeypatch.setitem(versions._checked, "done", False)
    yield
    versions._checked["done"] = True


def test_versions_in_range_do_not_warn(fresh_check, monkeypatch):
    monkeypatch.setattr(versions, "installed_versions", lambda: ("2.21.3", "3.15.0"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _internals.check_versions()


def test_versions_out_of_range_warn_once_naming_both(fresh_check, monkeypatch):
    monkeypatch.setattr(versions, "installed_versions", lambda: ("2.22.0", "3.16.1"))
    with pytest.warns(RuntimeWarning, match=r"TensorFlow 2\.22\.0 and Keras 3\.16\.1"):
        _internals.check_versions()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _internals.check_versions()  # once per process


def test_a_moved_internal_that_changes_numbers_raises(fresh_check, monkeypatch):
    import builtins
    monkeypatch.setattr(versions, "installed_versions", lambda: ("2.22.0", "3.16.1"))
    real_import = builtins.__import__

    def no_keras_src(name, *args, **kwargs):
        if name.startswith("keras.src"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_keras_src)
    from kerastrainer._internals import keras_calls
    monkeypatch.setitem(keras_calls._per_replica_patch, "done", False)   # as in a fresh process
    with pytest.warns(RuntimeWarning):
        with pytest.raises(_internals.InternalsError, match=r"scale_loss_for_distribution.*TensorFlow 2\.22\.0 / "
                                                            r"Keras 3\.16\.1.*share of the batch"):
            with _internals.keras_losses_scaled_by(0.5):
                pass
    with pytest.raises(_internals.InternalsError, match=r"CallContext.*is_training"):
        with _internals.keras_training_phase(True):
            pass
    # a fallback that changes nothing keeps Keras's own behaviour
    fn = lambda: 1  # noqa: E731
    assert _internals.with_keras_random_state(fn) is fn


def test_the_inner_variable_is_found_once():
    import keras
    import tensorflow as tf
    v = keras.Variable(1.0)
    inner = _internals.tf_variable_of(v)
    assert isinstance(inner, tf.Variable) and inner is not v
    plain = tf.Variable(2.0)
    assert _internals.tf_variable_of(plain) is plain
