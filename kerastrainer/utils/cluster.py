"""Who am I in a multi-process job: rank, size, local rank, worker addresses, data shards.

The documented path of these names; it holds no logic. They live in ``utils/_cluster_env.py``
(rank detection, which reads kerastrainer-run, TF_CONFIG, srun, horovodrun and mpirun; ports),
``utils/logger.py`` (``set_logger_dir_on_chief``) and ``dataflow/shard.py`` (the DataFlow
shards). Nothing here imports TensorFlow, so the launcher can use it.

Example::

    from kerastrainer.utils.cluster import get_rank_and_size, shard_dataflow, shard_list

    rank, size = get_rank_and_size()
    files = shard_list(sorted(all_files))          # cheap: each worker reads its own files
    df = shard_dataflow(BatchData(ds, 32))         # generic: keeps every size-th datapoint
"""
from __future__ import annotations

from ..dataflow.shard import ShardedDataFlow, shard_dataflow
from ._cluster_env import (ENV_LOCAL_RANK, ENV_LOCAL_SIZE, ENV_PORT_BASE, ENV_RANK, ENV_SIZE,  # noqa: F401
                           ClusterInfo, expand_slurm_hostlist, expand_slurm_tasks_per_node,
                           find_free_ports, get_cluster_info, get_local_rank, get_rank, get_rank_and_size, get_size,
                           is_chief, is_private_log_dir, make_tf_config, parse_tf_config, private_log_dir, shard_list,
                           slurm_cluster_info)
from .logger import set_logger_dir_on_chief

__all__ = ["ClusterInfo", "get_cluster_info", "get_rank_and_size", "get_rank", "get_size",
           "get_local_rank", "is_chief", "parse_tf_config", "slurm_cluster_info", "expand_slurm_hostlist",
           "expand_slurm_tasks_per_node", "make_tf_config", "shard_list", "shard_dataflow",
           "ShardedDataFlow", "set_logger_dir_on_chief", "private_log_dir", "is_private_log_dir", "find_free_ports",
           "ENV_RANK", "ENV_SIZE", "ENV_LOCAL_RANK", "ENV_LOCAL_SIZE", "ENV_PORT_BASE"]
