"""Dataset readers: local files in their standard formats; downloading only when asked.

Each reader takes ``dir=`` (``data_dir=`` for SVHNDigit, tensorpack's name; default
``$KERASTRAINER_DATASET/<name>`` or ``~/kerastrainer_data/<name>``) and ``download=False``;
missing files give an error that names the folder, the expected files and how to get them.
SVHNDigit and Caltech101Silhouettes read MATLAB files with scipy (``kerastrainer[mat]``).

Example::

    from kerastrainer.dataflow import dataset
    ds = dataset.Mnist('train', dir='/data/mnist')
"""
import importlib

__all__ = []

for _m in ("files", "mnist", "cifar", "ilsvrc", "svhn", "caltech101", "bsds500", "places"):
    _mod = importlib.import_module(f"{__name__}.{_m}")
    for _n in _mod.__all__:
        globals()[_n] = getattr(_mod, _n)
        __all__.append(_n)
del _m, _mod, _n
