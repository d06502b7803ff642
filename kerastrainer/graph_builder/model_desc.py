"""Mirrors ``tensorpack.graph_builder.model_desc`` (kept there for old imports): ``ModelDesc`` and
``ModelDescBase``, whose home is ``train/model_desc.py``."""
from ..train.model_desc import ModelDesc, ModelDescBase  # noqa: F401

__all__ = []
