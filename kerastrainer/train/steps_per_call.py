"""How many steps the next call of the train function runs: one concern, out of the Trainer.

``steps_per_call='auto'`` grows the count until a call takes about ``target_seconds`` (a call
costs a few ms of host time, so half a second keeps that near 1%), at most 4x per call and
``max_steps``; an int fixes it. Either way a call never runs past the end of the epoch or past
a step a callback asked to see (``steps_to_next_trigger``), and a fed input (``FeedInput``)
gets one step per call. The trainer owns the counters and the callbacks; this owns the count.

Example (what ``Trainer`` does)::

    steps = StepsPerCall('auto', target_seconds=0.5, max_steps=1000)
    k = steps.choose(remaining=steps_per_epoch - local_step, callbacks_wish=None, fed=False)
    ... run k steps, taking `seconds` ...
    steps.update(k, seconds)
"""
from __future__ import annotations

from typing import Optional, Union

__all__ = ["StepsPerCall"]


class StepsPerCall:
    """The steps of the next call (see the module docstring)."""

    def __init__(self, steps_per_call: Union[str, int] = "auto", target_seconds: float = 0.5,
                 max_steps: int = 1000):
        if steps_per_call != "auto" and (isinstance(steps_per_call, bool) or not isinstance(steps_per_call, int)
                                         or steps_per_call < 1):
            raise ValueError(f"steps_per_call must be 'auto' or a positive int; got {steps_per_call!r}")
        self.steps_per_call = steps_per_call
        self.target_seconds = target_seconds
        self.max_steps = max_steps
        self.calls = 0                               # calls run so far (the first one traces)
        self.auto_k = 1                              # 'auto': the count the timing asks for now
        self.step_seconds: Optional[float] = None    # a moving average of one step's time

    def choose(self, remaining: int, callbacks_wish: Optional[int], fed: bool) -> int:
        """Steps for the next call: ``remaining`` in the epoch, at most what the callbacks wish."""
        if fed:
            return 1
        k = remaining
        if callbacks_wish is not None:
            k = min(k, max(1, int(callbacks_wish)))
        k = min(k, self.auto_k if self.steps_per_call == "auto" else self.steps_per_call)
        return max(1, k)

    def update(self, k: int, seconds: float) -> None:
        """A call of ``k`` steps took ``seconds``."""
        self.calls += 1
        if self.calls <= 1:  # the first call includes tracing
            return
        per_step = seconds / k
        self.step_seconds = per_step if self.step_seconds is None else 0.7 * self.step_seconds + 0.3 * per_step
        want = self.target_seconds / max(self.step_seconds, 1e-7)
        self.auto_k = int(min(self.max_steps, max(1, want), self.auto_k * 4))
