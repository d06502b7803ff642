"""The old path of MergeAllSummaries and RunUpdateOps (accepted, they do nothing) -> callbacks/accepted.py."""
from ..callbacks.accepted import MergeAllSummaries, RunUpdateOps

__all__ = ["MergeAllSummaries", "RunUpdateOps"]
