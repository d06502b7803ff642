"""Keras programs used as test clients of ``KerasModel`` (ported ones name their origin and edits)."""
