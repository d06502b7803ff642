"""The devices multi-tower tests run on: logical CPU devices, named explicitly.

conftest splits the CPU into 4 logical devices. A trainer given a number of towers
picks GPUs when the machine has any, so tests name their devices instead: the same
towers on a laptop, in CI and on a GPU machine.
"""


def cpus(n: int) -> list:
    """``['/cpu:0', ..., '/cpu:{n-1}']``."""
    return [f"/cpu:{i}" for i in range(n)]
