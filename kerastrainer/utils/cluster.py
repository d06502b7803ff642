"""Who am I in a multi-process job: rank, size, local rank, worker addresses, data shards.

Nothing here imports TensorFlow, so the launcher can use it. (The rank detection itself lives in
``utils/_cluster_env.py``, which the logger and DataFlows use; this module re-exports it.)
Where the rank and the cluster are read from (kerastrainer-run, TF_CONFIG, srun, horovodrun,
mpirun; otherwise a single process): see ``utils/_cluster_env.py``.

Example::

    from kerastrainer.utils.cluster import get_rank_and_size, shard_dataflow, shard_list

    rank, size = get_rank_and_size()
    files = shard_list(sorted(all_files))          # cheap: each worker reads its own files
    df = shard_dataflow(BatchData(ds, 32))         # generic: keeps every size-th datapoint
"""
from __future__ import annotations

import socket
from typing import List, Optional

from ..dataflow.shard import ShardedDataFlow, shard_dataflow  # re-exported: its documented path
from . import logger
from ._cluster_env import (ENV_LOCAL_RANK, ENV_LOCAL_SIZE, ENV_PORT_BASE, ENV_RANK, ENV_SIZE,  # noqa: F401
                           PRIVATE_LOG_DIR_PREFIX, ClusterInfo, expand_slurm_hostlist, expand_slurm_tasks_per_node,
                           get_cluster_info, get_local_rank, get_rank, get_rank_and_size, get_size, is_chief,
                           is_private_log_dir, make_tf_config, parse_tf_config, private_log_dir, shard_list,
                           slurm_cluster_info)

__all__ = ["ClusterInfo", "get_cluster_info", "get_rank_and_size", "get_rank", "get_size",
           "get_local_rank", "is_chief", "parse_tf_config", "slurm_cluster_info", "expand_slurm_hostlist",
           "expand_slurm_tasks_per_node", "make_tf_config", "shard_list", "shard_dataflow",
           "ShardedDataFlow", "set_logger_dir_on_chief", "private_log_dir", "is_private_log_dir", "find_free_ports",
           "ENV_RANK", "ENV_SIZE", "ENV_LOCAL_RANK", "ENV_LOCAL_SIZE", "ENV_PORT_BASE"]


# --- log directory -------------------------------------------------------------------------------
def set_logger_dir_on_chief(dirname: str, action: Optional[str] = None) -> str:
    """The chief uses ``dirname`` as its log directory; every other worker a private temporary one.

    Only the chief writes logs, checkpoints and monitors' files; the others' temporary
    directory (removed when the process exits) keeps callbacks that need a directory
    working. Returns the directory this process uses. (``logger.set_logger_dir`` does the
    same on a non-chief worker, with a warning: that is the script run unchanged on every rank.)

    Example::

        set_logger_dir_on_chief('train_log/mnist', action='k')
        config = AutoResumeTrainConfig(...)    # workers get the chief's checkpoint by broadcast
    """
    if is_chief():
        logger.set_logger_dir(dirname, action=action)
    else:
        logger.set_logger_dir(private_log_dir(get_rank()))
    return logger.get_logger_dir()


# --- ports -----------------------------------------------------------------------------------------
def find_free_ports(n: int, host: str = "127.0.0.1") -> List[int]:
    """``n`` distinct TCP ports that are free on ``host`` right now."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((host, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()
