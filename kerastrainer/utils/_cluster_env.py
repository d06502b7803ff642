"""Who am I in a multi-process job: rank, size, local rank, worker addresses.

The part of :mod:`kerastrainer.utils.cluster` that the logger and DataFlows use: it imports
nothing of kerastrainer and no TensorFlow. Import the names from ``kerastrainer.utils.cluster``.
The cluster is read from the first of these that is present:

1. the variables set by ``kerastrainer-run`` (``KERASTRAINER_RANK``, ``KERASTRAINER_SIZE``,
   ``KERASTRAINER_LOCAL_RANK``, ``KERASTRAINER_LOCAL_SIZE``; addresses from ``TF_CONFIG``),
2. ``TF_CONFIG`` (``chief`` and ``worker`` jobs; the chief, when there is one, is rank 0),
3. a SLURM job step started by ``srun`` (``SLURM_PROCID``, ``SLURM_STEP_NUM_TASKS``,
   ``SLURM_STEP_NODELIST``, ``SLURM_STEP_TASKS_PER_NODE``, ``SLURM_DISTRIBUTION``,
   ``SLURM_LOCALID``, ``SLURM_NODEID``, ``SLURM_JOB_ID``),
4. Horovod / MPI launchers (``HOROVOD_RANK``, ``OMPI_COMM_WORLD_RANK``, ``PMI_RANK``...),
   which give a rank and size but no addresses,
5. otherwise a single process: rank 0 of 1.

Example::

    info = get_cluster_info()
    files = shard_list(sorted(all_files))          # this worker's share
"""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import socket
import tempfile
from dataclasses import dataclass, field
from itertools import product
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

__all__ = ["ClusterInfo", "get_cluster_info", "get_rank_and_size", "get_rank", "get_size",
           "get_local_rank", "is_chief", "parse_tf_config", "slurm_cluster_info", "expand_slurm_hostlist",
           "expand_slurm_tasks_per_node", "make_tf_config", "shard_list", "private_log_dir", "is_private_log_dir",
           "ENV_RANK", "ENV_SIZE", "ENV_LOCAL_RANK", "ENV_LOCAL_SIZE", "ENV_PORT_BASE", "PRIVATE_LOG_DIR_PREFIX",
           "find_free_ports"]

ENV_RANK = "KERASTRAINER_RANK"
ENV_SIZE = "KERASTRAINER_SIZE"
ENV_LOCAL_RANK = "KERASTRAINER_LOCAL_RANK"
ENV_LOCAL_SIZE = "KERASTRAINER_LOCAL_SIZE"
ENV_PORT_BASE = "KERASTRAINER_PORT_BASE"

# (rank, size, local rank, local size) variables of launchers that give no addresses
_MPI_LIKE = (
    ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE"),
    ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"),
)


@dataclass
class ClusterInfo:
    """This process's place in the job.

    Attributes:
        rank: 0 .. size-1; rank 0 is the chief.
        size: the number of worker processes.
        local_rank: the index of this process among those on its machine (pins its GPU).
        local_size: the number of worker processes on this machine.
        workers: ``host:port`` of every worker, in rank order; None when the launcher
            gives no addresses (MPI / Horovod) or for a single process.
        source: where it was read: ``'kerastrainer-run'``, ``'TF_CONFIG'``, ``'SLURM'``,
            ``'MPI'`` or ``'single'``.
    """

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    workers: Optional[List[str]] = None
    source: str = "single"
    extra: Dict[str, str] = field(default_factory=dict)

    @property
    def is_chief(self) -> bool:
        return self.rank == 0


def _int_env(env: Mapping[str, str], name: str, default: Optional[int] = None) -> Optional[int]:
    raw = env.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"Environment variable {name}={raw!r} is not an integer.") from None


def _host_of(address: str) -> str:
    return address.rsplit(":", 1)[0]


def _local_position(workers: Sequence[str], rank: int) -> Tuple[int, int]:
    """(local rank, local size) of ``rank``: its index among the workers on the same host."""
    host = _host_of(workers[rank])
    same = [i for i, w in enumerate(workers) if _host_of(w) == host]
    return same.index(rank), len(same)


# --- TF_CONFIG -----------------------------------------------------------------------------------
def parse_tf_config(text: str) -> ClusterInfo:
    """Rank, size and addresses from a ``TF_CONFIG`` JSON string.

    Only ``chief`` and ``worker`` jobs are allowed (synchronous data parallelism); a
    ``chief`` task, when present, is rank 0 and the workers follow.

    Example::

        info = parse_tf_config('{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}')
        info.rank, info.size      # (1, 2)
    """
    try:
        cfg = json.loads(text)
    except ValueError as e:
        raise ValueError(f"TF_CONFIG is not valid JSON ({e}): {text[:200]!r}") from None
    example = '{"cluster": {"worker": ["host1:2222", "host2:2222"]}, "task": {"type": "worker", "index": 0}}'
    if not isinstance(cfg, dict):
        raise ValueError(f"TF_CONFIG must be a JSON object like {example}; got {text[:200]!r}.")
    cluster, task = cfg.get("cluster"), cfg.get("task")
    for key, value in (("cluster", cluster), ("task", task)):
        if value is not None and not isinstance(value, dict):
            raise ValueError(f"TF_CONFIG's {key!r} must be a JSON object, as in {example}; got {value!r}.")
    cluster, task = cluster or {}, task or {}
    unknown = sorted(set(cluster) - {"chief", "worker"})
    if unknown:
        raise ValueError(f"TF_CONFIG has jobs {unknown}; multi-worker training takes only 'chief' and "
                         "'worker' jobs (no parameter servers or evaluators).")
    chief = _job_addresses(cluster, "chief")
    workers = _job_addresses(cluster, "worker")
    if len(chief) > 1:
        raise ValueError(f"TF_CONFIG lists {len(chief)} chiefs; there can be at most one.")
    addresses = chief + workers
    if not addresses:
        return ClusterInfo(source="TF_CONFIG")
    ttype, index = task.get("type"), task.get("index", 0)
    if ttype not in ("chief", "worker"):
        raise ValueError(f"TF_CONFIG's task type is {ttype!r}; it must be 'chief' or 'worker'.")
    job = chief if ttype == "chief" else workers
    if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(job):
        raise ValueError(f"TF_CONFIG's task index {index!r} is out of range for the {len(job)} "
                         f"'{ttype}' task(s).")
    rank = index if ttype == "chief" else len(chief) + index
    local_rank, local_size = _local_position(addresses, rank)
    return ClusterInfo(rank=rank, size=len(addresses), local_rank=local_rank, local_size=local_size,
                       workers=addresses, source="TF_CONFIG")


def _job_addresses(cluster: dict, job: str) -> List[str]:
    """The ``host:port`` list of one job; a string where a list belongs (it would be read one
    character per task) or an entry that is not ``host:port`` is an error naming it."""
    tasks = cluster.get(job) or []
    if isinstance(tasks, str):
        raise ValueError(f"TF_CONFIG's cluster {job!r} is the string {tasks!r}, not a list: write "
                         f"[{', '.join(json.dumps(a.strip()) for a in tasks.split(','))}] (one 'host:port' per task).")
    if not isinstance(tasks, list):
        raise ValueError(f"TF_CONFIG's cluster {job!r} must be a list of 'host:port' strings; got {tasks!r}.")
    _check_addresses(tasks, f"TF_CONFIG's cluster {job!r}")
    return list(tasks)


def _check_addresses(addresses: Sequence, what: str) -> None:
    for a in addresses:
        host, _, port = a.rpartition(":") if isinstance(a, str) else ("", "", "")
        if not host or not port.isdigit():
            raise ValueError(f"{what}: {a!r} is not a 'host:port' address.")


def make_tf_config(workers: Sequence[str], rank: int) -> str:
    """The ``TF_CONFIG`` JSON of worker ``rank`` in a cluster of ``workers`` (``host:port``)."""
    if isinstance(workers, str):
        raise TypeError(f"make_tf_config: workers must be a list of 'host:port' strings; got the string {workers!r} "
                        "(it would be read one character per worker).")
    _check_addresses(workers, "make_tf_config")
    if not 0 <= rank < len(workers):
        raise ValueError(f"rank {rank} is out of range for {len(workers)} workers")
    return json.dumps({"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": int(rank)}})


# --- SLURM ---------------------------------------------------------------------------------------
def _expand_brackets(part: str) -> List[str]:
    """``'gpu[01-02]-ib[1,3]'`` -> gpu01-ib1, gpu01-ib3, gpu02-ib1, gpu02-ib3."""
    pieces: List[List[str]] = []
    pos = 0
    for m in re.finditer(r"\[([^\[\]]*)\]", part):
        pieces.append([part[pos:m.start()]])
        choices = []
        for rng in m.group(1).split(","):
            lo, _, hi = rng.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()):
                raise ValueError(f"bad range {rng!r}")
            hi = hi or lo
            if int(hi) < int(lo):
                raise ValueError(f"empty range {rng!r}")
            width = len(lo)
            choices.extend(str(i).zfill(width) for i in range(int(lo), int(hi) + 1))
        pieces.append(choices)
        pos = m.end()
    tail = part[pos:]
    if "[" in tail or "]" in tail:
        raise ValueError(f"unbalanced brackets in {part!r}")
    pieces.append([tail])
    return ["".join(p) for p in product(*pieces)]


def expand_slurm_hostlist(hostlist: str) -> List[str]:
    """Expand a SLURM host list, keeping SLURM's order (``scontrol show hostnames`` in Python).

    Example::

        expand_slurm_hostlist('n[9-10],gpu[01-02]-ib')   # ['n9', 'n10', 'gpu01-ib', 'gpu02-ib']
    """
    parts, depth, cur = [], 0, ""
    for c in hostlist.strip():
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    hosts = []
    try:
        for p in parts:
            if not p:
                raise ValueError("empty host name")
            hosts.extend(_expand_brackets(p))
    except ValueError as e:
        raise ValueError(f"Cannot expand the SLURM host list {hostlist!r}: {e}") from None
    return hosts


def expand_slurm_tasks_per_node(spec: str) -> List[int]:
    """Expand ``SLURM_STEP_TASKS_PER_NODE``: ``'2(x3),1'`` -> ``[2, 2, 2, 1]``."""
    out = []
    for part in spec.strip().split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if m is None:
            raise ValueError(f"Cannot parse SLURM tasks per node {spec!r} (at {part!r}).")
        out.extend([int(m.group(1))] * int(m.group(2) or 1))
    return out


def _slurm_placement(tasks_per_node: List[int], distribution: str) -> List[Tuple[int, int]]:
    """(node index, local index) of each rank, for SLURM's block or cyclic task distribution."""
    placement: List[Tuple[int, int]] = []
    if distribution == "block":
        for node, n in enumerate(tasks_per_node):
            placement.extend((node, i) for i in range(n))
    else:  # cyclic: one task per node in turn, skipping full nodes
        given = [0] * len(tasks_per_node)
        while len(placement) < sum(tasks_per_node):
            for node, n in enumerate(tasks_per_node):
                if given[node] < n:
                    placement.append((node, given[node]))
                    given[node] += 1
    return placement


def _default_port_base(env: Mapping[str, str]) -> int:
    explicit = _int_env(env, ENV_PORT_BASE)
    if explicit is not None:
        return explicit
    # a job-dependent base, so that two jobs sharing a node do not collide
    job = _int_env(env, "SLURM_JOB_ID", 0) or 0
    return 20000 + (job % 1000) * 32


def slurm_cluster_info(env: Optional[Mapping[str, str]] = None) -> ClusterInfo:
    """The cluster of the current ``srun`` job step, built from SLURM's variables alone.

    TensorFlow's ``SlurmClusterResolver`` is not used because on TF 2.21 it sorts host
    names as strings (``n10`` before ``n9``, so ranks get other ranks' addresses),
    calls ``nvidia-smi`` on CPU nodes and fails with no GPUs, and assumes the block
    distribution. Here ranks follow ``SLURM_DISTRIBUTION`` (``block``, the default, or
    ``cyclic``) over the hosts in SLURM's order, and each task listens on
    ``port_base + local index``; ``port_base`` is ``$KERASTRAINER_PORT_BASE`` or
    ``20000 + 32 * (SLURM_JOB_ID % 1000)``.

    Raises:
        ValueError: a variable is missing or malformed, or this task's own
            ``SLURM_NODEID``/``SLURM_LOCALID`` contradict the computed placement.
    """
    env = os.environ if env is None else env
    missing = [v for v in ("SLURM_PROCID", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_NODELIST",
                           "SLURM_STEP_TASKS_PER_NODE") if v not in env]
    if missing:
        raise ValueError(f"Not in a SLURM job step: {', '.join(missing)} missing. Start the workers with "
                         "srun (one task per device), or use kerastrainer-run.")
    rank = _int_env(env, "SLURM_PROCID")
    size = _int_env(env, "SLURM_STEP_NUM_TASKS")
    hosts = expand_slurm_hostlist(env["SLURM_STEP_NODELIST"])
    per_node = expand_slurm_tasks_per_node(env["SLURM_STEP_TASKS_PER_NODE"])
    if len(per_node) != len(hosts):
        raise ValueError(f"SLURM_STEP_TASKS_PER_NODE={env['SLURM_STEP_TASKS_PER_NODE']!r} gives "
                         f"{len(per_node)} nodes but SLURM_STEP_NODELIST={env['SLURM_STEP_NODELIST']!r} "
                         f"has {len(hosts)}.")
    if sum(per_node) != size:
        raise ValueError(f"SLURM_STEP_TASKS_PER_NODE adds up to {sum(per_node)} tasks but "
                         f"SLURM_STEP_NUM_TASKS is {size}.")
    if not 0 <= rank < size:
        raise ValueError(f"SLURM_PROCID={rank} is out of range for {size} tasks.")
    distribution = (env.get("SLURM_DISTRIBUTION") or "block").split(":")[0].split(",")[0]
    if distribution not in ("block", "cyclic"):
        raise ValueError(f"SLURM_DISTRIBUTION={env.get('SLURM_DISTRIBUTION')!r}: only block (the default) "
                         "and cyclic task distributions are supported; run srun with --distribution=block.")
    if max(per_node) > 32 and ENV_PORT_BASE not in env:
        raise ValueError(f"{max(per_node)} tasks on one node need more than 32 ports: set {ENV_PORT_BASE} "
                         "to a base port with enough free ports above it.")
    placement = _slurm_placement(per_node, distribution)
    port_base = _default_port_base(env)
    workers = [f"{hosts[node]}:{port_base + local}" for node, local in placement]
    node, local = placement[rank]
    for var, want in (("SLURM_NODEID", node), ("SLURM_LOCALID", local)):
        have = _int_env(env, var)
        if have is not None and have != want:
            raise ValueError(f"{var}={have} but rank {rank} should be at {var.split('_')[1].lower()} {want} "
                             f"with the {distribution} distribution over {hosts}; run srun with "
                             "--distribution=block.")
    return ClusterInfo(rank=rank, size=size, local_rank=local, local_size=per_node[node], workers=workers,
                       source="SLURM", extra={"distribution": distribution})


# --- the one entry point ---------------------------------------------------------------------------
def get_cluster_info(env: Optional[Mapping[str, str]] = None) -> ClusterInfo:
    """This process's :class:`ClusterInfo`, from the environment (see the module docstring).

    Example::

        info = get_cluster_info()
        if info.is_chief:
            print(f"{info.size} workers: {info.workers}")
    """
    env = os.environ if env is None else env
    tf_config = env.get("TF_CONFIG")
    if ENV_RANK in env or ENV_SIZE in env:
        rank, size = _int_env(env, ENV_RANK, 0), _int_env(env, ENV_SIZE, 1)
        if not 0 <= rank < size:
            raise ValueError(f"{ENV_RANK}={rank} is out of range for {ENV_SIZE}={size}.")
        info = ClusterInfo(rank=rank, size=size, local_rank=_int_env(env, ENV_LOCAL_RANK, 0),
                           local_size=_int_env(env, ENV_LOCAL_SIZE, 1), source="kerastrainer-run")
        if tf_config:
            from_tf = parse_tf_config(tf_config)
            if (from_tf.rank, from_tf.size) != (rank, size):
                raise ValueError(f"{ENV_RANK}/{ENV_SIZE} say rank {rank} of {size} but TF_CONFIG says "
                                 f"rank {from_tf.rank} of {from_tf.size}.")
            info.workers = from_tf.workers
        return info
    if tf_config:
        info = parse_tf_config(tf_config)
        if info.workers:
            return info
    if "SLURM_PROCID" in env and "SLURM_STEP_NUM_TASKS" in env:
        return slurm_cluster_info(env)
    for rank_var, size_var, lrank_var, lsize_var in _MPI_LIKE:
        if rank_var in env and size_var in env:
            return ClusterInfo(rank=_int_env(env, rank_var), size=_int_env(env, size_var),
                               local_rank=_int_env(env, lrank_var, 0), local_size=_int_env(env, lsize_var, 1),
                               source="MPI")
    return ClusterInfo()


def get_rank_and_size() -> Tuple[int, int]:
    """``(rank, size)`` of this worker process; ``(0, 1)`` outside a multi-process job."""
    info = get_cluster_info()
    return info.rank, info.size


def get_rank() -> int:
    """This worker's rank (0 is the chief)."""
    return get_cluster_info().rank


def get_size() -> int:
    """The number of worker processes in the job."""
    return get_cluster_info().size


def get_local_rank() -> int:
    """The index of this worker among those on its machine (the GPU it uses)."""
    return get_cluster_info().local_rank


def is_chief() -> bool:
    """True on rank 0, the worker that writes logs and checkpoints."""
    return get_cluster_info().rank == 0


# --- sharding --------------------------------------------------------------------------------------
def rank_and_size_or_default(rank: Optional[int], size: Optional[int]) -> Tuple[int, int]:
    """``(rank, size)`` of a shard: those given, this worker's where None; checked."""
    if rank is None or size is None:
        r, s = get_rank_and_size()
        rank = r if rank is None else rank
        size = s if size is None else size
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"Shard rank {rank} is out of range for {size} shards.")
    return int(rank), int(size)


def shard_list(items: Sequence, rank: Optional[int] = None, size: Optional[int] = None) -> list:
    """Every ``size``-th item starting at ``rank``: this worker's share of a list (of files, samples).

    Sharding the source is the cheap way: each worker reads and decodes only its own
    items. Give all workers the list in the same order (e.g. sorted).

    Example::

        df = DataFromList(shard_list(samples), shuffle=True)
    """
    rank, size = rank_and_size_or_default(rank, size)
    return list(items)[rank::size]


# --- private log directories of non-chief workers ----------------------------------------------
PRIVATE_LOG_DIR_PREFIX = "kerastrainer-rank"


def is_private_log_dir(dirname: Optional[str], rank: int) -> bool:
    """Whether ``dirname`` is a directory made by :func:`private_log_dir` for ``rank``."""
    return dirname is not None and os.path.basename(os.path.normpath(dirname)).startswith(
        f"{PRIVATE_LOG_DIR_PREFIX}{rank}-")


def private_log_dir(rank: int) -> str:
    """A new temporary log directory for non-chief worker ``rank``, removed when the process exits."""
    tmp = tempfile.mkdtemp(prefix=f"{PRIVATE_LOG_DIR_PREFIX}{rank}-")
    atexit.register(shutil.rmtree, tmp, True)
    return tmp


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
