"""The 'auto' policy: estimate each block's activation bytes, then pick what to do.

:class:`Profiler` records, during one scratch trace of the model, the bytes of the
floating-point tensors each block produces (what its backward pass keeps without
LMS) and of its inputs (what recompute keeps), plus the activations outside any
block. :func:`plan` then compares the estimate with the memory budget:

1. it fits: nothing to do;
2. otherwise recompute blocks, the biggest savings first, until the estimate
   (kept activations + the largest recomputed block, which is alive again while
   its backward runs) fits;
3. still too big, and a distinct host device exists: also send the inputs of the
   recomputed blocks to the host (``'offload+recompute'``), earliest block first.

Example::

    prof = Profiler(batch_size=64)
    ... trace the model with prof active ...
    choice = plan(prof.blocks, prof.outside_bytes, weight_bytes=4 * n_params * 4, budget=8 << 30)
    print(choice.summary())
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from typing import Dict, List, Optional, Sequence, Union

import tensorflow as tf

from .offload import tensor_bytes

__all__ = ["BlockProfile", "Profiler", "Plan", "plan", "parse_bytes", "device_memory_budget"]

_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30, "t": 1 << 40, "tb": 1 << 40}


def parse_bytes(value: Union[int, float, str, None]) -> Optional[int]:
    """``2 << 30``, ``'2GB'``, ``'512 MiB'`` -> bytes (binary units); None stays None."""
    if value is None:
        return None
    if isinstance(value, (int, float)):
        if value <= 0:
            raise ValueError(f"memory_budget must be positive; got {value!r}")
        return int(value)
    m = re.fullmatch(r"\s*([0-9.]+)\s*([a-zA-Z]*)\s*", str(value))
    if not m or m.group(2).lower() not in _UNITS:
        raise ValueError(f"Cannot read memory size {value!r}; use bytes or e.g. '4GB', '512MiB'.")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def _mib(n: float) -> str:
    return f"{n / (1 << 20):.1f} MiB"


def device_memory_budget() -> Optional[int]:
    """Memory of the compute device: GPU 0's cap where its logical devices have one
    (``set_logical_device_configuration(..., memory_limit=...)``), else its total (nvidia-smi);
    without a GPU, the CPU allocator's cap (``TF_CPU_BFC_MEM_LIMIT_IN_MB`` with
    ``TF_CPU_ALLOCATOR_USE_BFC=true``), else the host's available RAM."""
    if tf.config.list_logical_devices("GPU"):
        capped = _logical_gpu_limit()
        if capped:
            return capped
        smi = shutil.which("nvidia-smi")
        if smi:
            try:
                out = subprocess.run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits",
                                      "-i", "0"], capture_output=True, text=True, timeout=10).stdout
                return int(float(out.split()[0])) << 20
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                pass
        try:  # what the allocator already has, as a lower bound
            return int(tf.config.experimental.get_memory_info("GPU:0")["peak"]) or None
        except (ValueError, RuntimeError):
            return None
    cap = os.environ.get("TF_CPU_BFC_MEM_LIMIT_IN_MB")
    if cap and os.environ.get("TF_CPU_ALLOCATOR_USE_BFC", "").lower() in ("1", "true"):
        try:
            return int(float(cap)) << 20
        except ValueError:
            pass
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) << 10
    except OSError:
        pass
    return None


def _logical_gpu_limit() -> Optional[int]:
    """The memory limit of GPU 0's first logical device, in bytes, when one was set."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    try:
        configs = tf.config.get_logical_device_configuration(gpus[0]) or []
    except (ValueError, RuntimeError):
        return None
    limits = [c.memory_limit for c in configs if getattr(c, "memory_limit", None)]
    return int(limits[0]) << 20 if limits else None


@dataclasses.dataclass
class BlockProfile:
    """One block seen by the profiling trace (bytes for the profiled batch size)."""
    key: str
    index: int
    bytes: int          # floating-point tensors produced inside the block
    input_bytes: int    # its floating-point inputs (kept by recompute)


class Profiler:
    """Collects :class:`BlockProfile` s during one trace (blocks call :meth:`record`)."""

    def __init__(self, batch_size: Optional[int] = None):
        self.batch_size = batch_size
        self.blocks: List[BlockProfile] = []
        self.total_bytes = 0
        self.unknown = 0  # tensors whose size the trace could not tell

    def size(self, tensors) -> int:
        total = 0
        for t in tensors:
            if not (t.dtype.is_floating or t.dtype.is_complex):
                continue
            n = tensor_bytes(t, self.batch_size if self.batch_size is not None else 1)
            if n is None:
                self.unknown += 1
            else:
                total += n
        return total

    def record(self, key: str, ops: Sequence, inputs: Sequence) -> None:
        outs = [t for op in ops if op.type not in ("Const", "ReadVariableOp", "VarHandleOp")
                for t in op.outputs]
        self.blocks.append(BlockProfile(key, len(self.blocks), self.size(outs), self.size(inputs)))

    def record_graph(self, graph) -> None:
        """Total activation bytes of the traced forward graph (blocks included)."""
        outs = [t for op in graph.get_operations()
                if op.type not in ("Const", "ReadVariableOp", "VarHandleOp", "Placeholder")
                for t in op.outputs]
        self.total_bytes = self.size(outs)

    @property
    def outside_bytes(self) -> int:
        return max(0, self.total_bytes - sum(b.bytes for b in self.blocks))


@dataclasses.dataclass
class Plan:
    """What 'auto' chose: ``modes`` maps a block key to its mode; the rest is for the log."""
    modes: Dict[str, str]
    budget: Optional[int]
    estimate_before: int
    estimate_after: int
    kept_bytes: int
    recomputed_bytes: int
    swapped_bytes: int
    fits: bool

    def summary(self) -> str:
        if not self.modes:
            why = "no memory budget is known" if self.budget is None else \
                f"estimated {_mib(self.estimate_before)} fits the budget of {_mib(self.budget)}"
            return f"LMS auto: nothing to do ({why})."
        by_mode: Dict[str, List[str]] = {}
        for k, m in self.modes.items():
            by_mode.setdefault(m, []).append(k)
        parts = [f"{m}: {', '.join(ks)}" for m, ks in by_mode.items()]
        return (f"LMS auto: budget {_mib(self.budget or 0)}, estimate {_mib(self.estimate_before)} -> "
                f"{_mib(self.estimate_after)}{'' if self.fits else ' (STILL OVER BUDGET)'}; "
                f"bytes kept {_mib(self.kept_bytes)}, recomputed {_mib(self.recomputed_bytes)}, "
                f"swapped {_mib(self.swapped_bytes)}; " + "; ".join(parts))


def plan(blocks: Sequence[BlockProfile], outside_bytes: int, weight_bytes: int,
         budget: Optional[int], can_offload: bool, keep_last: int = 1) -> Plan:
    """Choose a mode per block so that the estimated peak fits ``budget`` (see the module doc)."""
    blocks = list(blocks)
    base = weight_bytes + outside_bytes
    before = base + sum(b.bytes for b in blocks)
    if budget is None or before <= budget or not blocks:
        return Plan({}, budget, before, before, before - weight_bytes, 0, 0,
                    budget is None or before <= budget)
    chosen: Dict[str, BlockProfile] = {}
    offloaded: set = set()

    def estimate() -> int:
        kept = sum(b.bytes for b in blocks if b.key not in chosen)
        kept += sum(b.input_bytes for b in chosen.values() if b.key not in offloaded)
        work = max((b.bytes for b in chosen.values()), default=0)
        return base + kept + work

    for b in sorted(blocks, key=lambda b: b.input_bytes - b.bytes):  # biggest saving first
        if estimate() <= budget:
            break
        if b.bytes > b.input_bytes:
            chosen[b.key] = b
    if estimate() > budget and can_offload:
        movable = sorted(chosen.values(), key=lambda b: b.index)[:max(0, len(blocks) - keep_last)]
        for b in movable:
            if estimate() <= budget:
                break
            offloaded.add(b.key)
    after = estimate()
    modes = {k: ("offload+recompute" if k in offloaded else "recompute") for k in chosen}
    recomputed = sum(b.bytes for b in chosen.values())
    swapped = sum(b.input_bytes for b in chosen.values() if b.key in offloaded)
    return Plan(modes, budget, before, after, after - weight_bytes, recomputed, swapped, after <= budget)
