"""Mirrors tensorpack's ``tensorpack.contrib`` package path."""
