"""Mirrors ``tensorpack.tfutils.export``: ModelExporter."""
from ..predict.export import ModelExporter

__all__ = ["ModelExporter"]
