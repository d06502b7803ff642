"""``BlockRunner``: run a selected block under its mode, and report what a trace did.

Owns the step from a mode to :func:`~kerastrainer.lms.recompute.run_block`: the
:class:`~kerastrainer.lms.recompute.BlockConfig` of the knobs, with TFLMS's op-type
filter when one is set; the case of a host device that is the compute device (TFLMS's
knobs then recompute instead, warned once; an explicit offload is warned per block);
the record of the mode each block ran under (``seen_blocks``); and the report once a
trace's backward pass is built (``last_report``, the debug log, the warning when the
swap knobs select nothing).

It leaves the choice of the mode to :class:`~kerastrainer.lms.LMS` (selection and
plan), and the graph work (custom gradient, swaps, segments) to ``recompute.py``
and ``offload.py``.

Example::

    runner = BlockRunner(knobs, selection)
    y = runner.run('res2', res_block, (x,), {}, 'recompute')
    runner.last_report     # after the trace: {'blocks': ..., 'applied': [...], ...}
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, Optional

from ..utils import logger
from .offload import compute_device, same_device
from .recompute import run_block

__all__ = ["BlockRunner"]


class BlockRunner:
    """Runs the blocks of ``knobs`` (an LMSKnobs); ``selection`` counts the blocks found for the report."""

    def __init__(self, knobs, selection):
        self.knobs = knobs
        self.selection = selection
        self.seen_blocks: Dict[str, str] = {}   # key -> mode used at the last trace
        self.last_report: Optional[Dict[str, Any]] = None
        self._reported = False
        self._warned_fallback = False

    def run(self, key: str, fn: Callable, args: tuple, kwargs: dict, mode: str,
            reenter: Optional[Callable] = None):
        """Run ``fn(*args, **kwargs)`` as block ``key`` under ``mode`` (one of ``recompute.MODES``)."""
        knobs = self.knobs
        cfg = knobs.config
        if "offload" in mode and same_device(compute_device(), knobs.host_device):
            if knobs.policy_from_knobs and mode == "offload":
                # TFLMS's knobs on a machine whose host is the compute device: swapping frees
                # nothing, so the blocks it would swap are recomputed (same gradients, lower peak)
                if not self._warned_fallback:
                    self._warned_fallback = True
                    logger.warning("LMS: host device %s is the compute device (no GPU): swapping to it frees "
                                   "nothing, so the blocks TFLMS's knobs select are recomputed instead.",
                                   knobs.host_device)
                mode = "recompute"
                cfg = dataclasses.replace(cfg, keep_last_in_recompute=True)
            elif key not in self.seen_blocks:
                logger.warning("LMS: block '%s' is offloaded to %s, which is the compute device: "
                               "nothing moves. Set host_device to another device.", key, knobs.host_device)
        if "offload" in mode and knobs.has_type_filters():
            cfg = dataclasses.replace(cfg, tensor_filter=knobs.tensor_filter)
        self.seen_blocks[key] = mode
        return run_block(key, fn, args, kwargs, mode, cfg, reenter=reenter, report=self._report)

    def _report(self, state) -> None:
        """Called when the backward pass of a trace's first block is built: every block is known."""
        knobs = self.knobs
        recs = list(state.blocks)
        n = len(recs)
        applied = [r for r in recs if r.get("applied")]
        swapped = sum(r.get("swapped", 0) for r in recs)
        self.last_report = {"blocks": n, "applied": [r["name"] for r in applied], "swapped_tensors": swapped,
                            "modes": {r["name"]: r["mode"] for r in applied}}
        if knobs.debug:
            for r in recs:
                logger.info("LMS debug: block %d '%s': %s%s", r["index"], r["name"],
                            r["mode"] if r.get("applied") else "kept on the device",
                            f", {r.get('swapped', 0)} tensor(s) swapped" if r.get("swapped") else "")
                if knobs.debug_level >= 2 and r.get("swapped_names"):
                    logger.info("LMS debug:   swapped %s", ", ".join(r["swapped_names"]))
        if self._reported:
            return
        self._reported = True
        if not applied and n and knobs.config.op_levels:
            t = knobs.knobs["swapout_threshold"]
            far = max((r.get("max_distance", 0) for r in recs), default=0)
            logger.warning("LMS selects nothing: swapout_threshold=%d counts topological levels of the step's ops, "
                           "as in TFLMS, and no tensor that the backward pass of the %d block(s) found reads is "
                           "made more than %d levels before (the largest distance is %d). Use a swapout_threshold "
                           "below %d.", t, n, t, far, far)
        elif not applied and n:
            t = knobs.knobs["swapout_threshold"]
            why = (f"swapout_threshold={t} keeps the last {t} blocks on the device, and {n} block(s) were "
                   f"found ({n} selected of {len(self.selection.found_blocks)})" if t >= n
                   else "every block was kept on the device")
            logger.warning("LMS selects nothing: %s, so nothing is swapped or recomputed. With a policy the "
                           "knobs count blocks (lms_block s or Keras sub-layers), not graph levels as in TFLMS: "
                           "use swapout_threshold below %d (0 touches every block) and swapin_ahead / "
                           "swapin_groupby of a few blocks.", why, n)
        else:
            logger.info("LMS: %d block(s) found; %d handled (%s); %d tensor(s) swapped to %s.", n, len(applied),
                        ", ".join(f"{r['name']}={r['mode']}" for r in applied), swapped, knobs.host_device)
