"""Reading MATLAB ``.mat`` files with scipy, imported only when a reader needs it.

scipy is optional (``pip install kerastrainer[mat]``): ``kerastrainer.dataflow.dataset``
imports without it, and only constructing a ``.mat``-based reader asks for it.
"""
from __future__ import annotations

from typing import Dict, Sequence

import numpy as np

__all__ = ["load_mat"]

_INSTALL_HINT = ("reading MATLAB .mat files needs scipy, which could not be imported. "
                 "Install it with `pip install kerastrainer[mat]` (or `pip install scipy`).")


def _scipy_io():
    try:
        import scipy.io
    except ImportError as e:
        raise ImportError(f"{_INSTALL_HINT} Original error: {e}") from e
    return scipy.io


def load_mat(path: str, variables: Sequence[str], dataset: str) -> Dict[str, np.ndarray]:
    """The named variables of the MATLAB file ``path``, as numpy arrays.

    Raises ValueError naming ``path`` when the file cannot be read as a .mat file or lacks
    one of ``variables``.

    Example::

        d = load_mat('/data/svhn/train_32x32.mat', ['X', 'y'], 'SVHNDigit')
    """
    sio = _scipy_io()
    try:
        # variable_names: skip the parts of a large file that are not asked for.
        data = sio.loadmat(path, variable_names=list(variables))
    except NotImplementedError as e:  # scipy says this for v7.3 (HDF5-based) files
        raise ValueError(f"{dataset}: '{path}' is a MATLAB v7.3 file, which scipy cannot read ({e}). "
                         "Use the dataset's original file, or re-save it in MATLAB with '-v7'.") from e
    except (sio.matlab.MatReadError, ValueError, TypeError, OSError, EOFError, KeyError, IndexError) as e:
        raise ValueError(f"{dataset}: '{path}' is not a readable MATLAB .mat file ({e}); it is corrupt "
                         "or not the expected file. Delete it and download again.") from e
    missing = [v for v in variables if v not in data]
    if missing:
        try:  # only the names and shapes are read: cheap, and it tells what the file does hold
            have = sorted(name for name, _, _ in sio.whosmat(path))
        except Exception:  # noqa: BLE001 - only a hint; the error below is what matters
            have = sorted(k for k in data if not k.startswith("__"))
        raise ValueError(f"{dataset}: '{path}' has no variable(s) {missing} (it has {have}); "
                         "it is not the expected dataset file.")
    return {v: np.asarray(data[v]) for v in variables}
