"""Where checkpoints live in a log directory, and which one is the latest.

``ModelSaver`` writes ``checkpoint-<step>`` prefixes and TF's ``checkpoint`` pointer
file; weight loading and auto-resume find the latest one here. The pointer is trusted
when the checkpoint it names exists; otherwise the highest complete step is used, so a
lost or stale pointer does not lose the run.

Example::

    path = latest_checkpoint('train_log/mnist')   # '.../checkpoint-2000' or None
"""
from __future__ import annotations

import os
import re
from typing import List, Optional

from ..utils import logger

__all__ = ["CHECKPOINT_PREFIX", "POINTER_FILE", "latest_checkpoint", "get_checkpoint_path", "read_pointer",
           "checkpoint_exists", "list_checkpoints", "get_all_checkpoints"]

CHECKPOINT_PREFIX = "checkpoint"
POINTER_FILE = "checkpoint"
_STEP_RE = re.compile(r"^" + CHECKPOINT_PREFIX + r"-(\d+)\.index$")


def read_pointer(directory: str):
    """TF's CheckpointState proto of ``directory``, or None when missing or unreadable."""
    import tensorflow as tf
    if not os.path.isfile(os.path.join(directory, POINTER_FILE)):
        return None
    try:
        return tf.train.get_checkpoint_state(directory)
    except Exception as e:  # a damaged pointer: recover from the files
        logger.warn("Cannot parse the checkpoint pointer in %s (%s); looking at the files instead.",
                    directory, e)
        return None


def checkpoint_exists(prefix: str) -> bool:
    return os.path.isfile(prefix + ".index")


def _scan_steps(directory: str) -> List[int]:
    steps = []
    for name in os.listdir(directory):
        m = _STEP_RE.match(name)
        if m:
            steps.append(int(m.group(1)))
    return sorted(steps)


def _pointed(directory: str, warn: bool = True) -> Optional[str]:
    """The checkpoint the pointer names, when it exists (``directory`` absolute)."""
    state = read_pointer(directory)
    if state is None or not state.model_checkpoint_path:
        return None
    # TF joins a relative path in the pointer with the directory already
    path = state.model_checkpoint_path
    if not os.path.isabs(path):
        path = os.path.join(directory, path)
    if checkpoint_exists(path):
        return path
    moved = os.path.join(directory, os.path.basename(path))  # a log dir that was moved or copied
    if checkpoint_exists(moved):
        return moved
    if warn:
        logger.warn("The checkpoint pointer in %s names %s, which does not exist; using the newest "
                    "checkpoint file instead.", directory, path)
    return None


def latest_checkpoint(directory: Optional[str] = None) -> Optional[str]:
    """The path prefix of the newest complete checkpoint in ``directory``, or None.

    ``directory`` defaults to the log directory. The pointer file is trusted when the
    checkpoint it names exists; otherwise the highest ``checkpoint-<step>`` is used.
    The path is absolute.

    Example::

        path = latest_checkpoint('train_log/mnist')   # '.../checkpoint-2000' or None
    """
    directory = directory or logger.get_logger_dir()
    if directory is None or not os.path.isdir(directory):
        return None
    directory = os.path.abspath(directory)
    path = _pointed(directory)
    if path is not None:
        return path
    steps = _scan_steps(directory)
    if not steps:
        return None
    return os.path.join(directory, f"{CHECKPOINT_PREFIX}-{steps[-1]}")


def list_checkpoints(directory: str) -> List[str]:
    """Every complete checkpoint of ``directory``, the one to try first first: the pointer's,
    then ``checkpoint-<step>`` from the highest step down. Absolute path prefixes.

    Example::

        for prefix in list_checkpoints('train_log/mnist'): ...
    """
    if not os.path.isdir(directory):
        return []
    directory = os.path.abspath(directory)
    out = []
    first = _pointed(directory)
    if first is not None:
        out.append(first)
    for step in reversed(_scan_steps(directory)):
        p = os.path.join(directory, f"{CHECKPOINT_PREFIX}-{step}")
        if p not in out:
            out.append(p)
    return out


def get_checkpoint_path(path: str) -> str:
    """Resolve a log dir (its latest checkpoint) or a checkpoint prefix to a prefix."""
    if os.path.basename(path) == "checkpoint" and os.path.isfile(path) and not os.path.isfile(path + ".index"):
        path = os.path.dirname(path) or "."  # tensorpack's `--load <dir>/checkpoint`: the pointer file
    if os.path.isdir(path):
        latest = latest_checkpoint(path)
        if latest is None:
            raise FileNotFoundError(f"No checkpoint in directory '{path}' (no 'checkpoint' state file "
                                    "pointing at a complete checkpoint).")
        return latest
    if path.endswith(".index"):
        path = path[: -len(".index")]
    if not os.path.isfile(path + ".index"):
        raise FileNotFoundError(f"Checkpoint '{path}' does not exist ({path}.index is missing).")
    return path


def get_all_checkpoints(directory: str) -> List[str]:
    """The complete checkpoints of ``directory``, oldest first (tensorpack's order).

    Example::

        for prefix in get_all_checkpoints('train_log/mnist'): print(prefix)
    """
    return list(reversed(list_checkpoints(directory)))
