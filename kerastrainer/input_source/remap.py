"""``remap_input_source``: an input source whose components are some of the model's inputs, by name."""
from __future__ import annotations

from typing import List, Sequence

from .base import InputSource

__all__ = ["remap_input_source"]


class _RemappedInput(InputSource):
    def __init__(self, input: InputSource, names: Sequence[str]):
        if getattr(input, "requires_feed", False):
            raise TypeError("remap_input_source: a fed source (FeedInput) cannot be remapped; give its "
                            "DataFlow the inputs' order instead (MapData(df, lambda dp: [...]))")
        self._input = input
        self._names = list(names)
        self._order: List[int] = []

    def _setup(self, signature):
        by_name = {s.name: s for s in signature}
        unknown = [n for n in self._names if n not in by_name]
        if unknown:
            raise ValueError(f"remap_input_source: {unknown} are not inputs of the model ({sorted(by_name)})")
        missing = [s.name for s in signature if s.name not in self._names]
        if missing:
            raise ValueError(f"remap_input_source: the inputs {missing} get no tensor. TF2 has no placeholders "
                             f"to feed them: the source must give every input of inputs().")
        self._input.setup([by_name[n] for n in self._names])
        self._order = [self._names.index(s.name) for s in signature]
        self.batch_size = self._input.batch_size

    def _get_input_tensors(self):
        got = self._input.get_input_tensors()
        return [got[i] for i in self._order]

    def get_callbacks(self):
        return self._input.get_callbacks()

    def size(self) -> int:
        return self._input.size()

    def start(self, strategy=None) -> None:
        self._input.start(strategy)

    def close(self) -> None:
        self._input.close()

    def raise_pending_error(self) -> None:
        self._input.raise_pending_error()

    def cancel(self) -> None:
        self._input.cancel()

    def fill_level(self):
        return self._input.fill_level()


def remap_input_source(input: InputSource, names: Sequence[str]) -> InputSource:
    """An input source that gives ``input``'s components, named ``names`` in their order, to the
    model's inputs of those names, in the model's order (``inputs()``). Every input must be
    named (TF2 has no placeholders to feed the others).

    Example::

        # the DataFlow gives [label, image]; inputs() declares image, then label
        remap_input_source(QueueInput(df), ['label', 'image'])
    """
    if isinstance(names, str) or not all(isinstance(n, str) for n in names):
        raise TypeError(f"remap_input_source: names must be a list of input names, got {names!r}")
    return _RemappedInput(input, names)
