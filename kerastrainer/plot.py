"""Training curves as a picture: the scalars of ``stats.json`` against the epoch.

One panel per statistic (cost, validation metrics, learning rate, ...); several runs
are overlaid, one colour per log directory. Needs matplotlib (the ``[plot]`` extra);
TensorFlow is not imported.

Command line::

    python -m kerastrainer.plot train_log/run1 train_log/run2 -o curves.png
    kerastrainer-plot train_log/run1 --stats cost validation_error learning_rate

From Python::

    from kerastrainer.plot import plot_runs
    plot_runs(['train_log/run1'], 'curves.png')
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["load_stats", "plot_runs", "main"]

# counters of the run, not curves
_NOT_PLOTTED = {"epoch_num", "global_step"}


def load_stats(logdir: str) -> List[dict]:
    """The entries of ``<logdir>/stats.json`` (or of the file itself when given one).

    Raises FileNotFoundError / ValueError naming the file and what to do.
    """
    path = logdir if os.path.isfile(logdir) else os.path.join(logdir, "stats.json")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path} does not exist: give a log directory of a training run "
                                "(one with stats.json, written by the JSONWriter monitor at each epoch end).")
    with open(path, encoding="utf-8") as f:
        try:
            stats = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path} is not valid JSON ({e}).") from e
    if not isinstance(stats, list) or not all(isinstance(s, dict) for s in stats):
        raise ValueError(f"{path} should hold a JSON list of per-epoch dicts (as JSONWriter writes).")
    return stats


def _series(stats: List[dict]) -> Dict[str, Tuple[List[float], List[float]]]:
    out: Dict[str, Tuple[List[float], List[float]]] = {}
    for i, entry in enumerate(stats):
        x = entry.get("epoch_num", i + 1)
        for k, v in entry.items():
            if k in _NOT_PLOTTED or isinstance(v, bool) or not isinstance(v, (int, float)):
                continue
            if not math.isfinite(v):
                continue
            xs, ys = out.setdefault(k, ([], []))
            xs.append(float(x))
            ys.append(float(v))
    return out


def _order(names) -> List[str]:
    # the cost first, validation next, the rest (learning rate, throughput, queue) after
    def key(n):
        if n == "cost" or n.endswith("loss"):
            rank = 0
        elif n.startswith("validation") or n.startswith("val_"):
            rank = 1
        elif n.startswith(("throughput/", "QueueInput/", "queue")):
            rank = 3
        else:
            rank = 2
        return rank, n
    return sorted(names, key=key)


def _import_pyplot():
    try:
        import matplotlib
    except ImportError:
        raise ImportError("kerastrainer.plot needs matplotlib: pip install 'kerastrainer[plot]' "
                          "(or pip install matplotlib).") from None
    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt
    return plt


def plot_runs(logdirs: Sequence[str], output: str, stats: Optional[Sequence[str]] = None,
              labels: Optional[Sequence[str]] = None, columns: int = 3, log_scale: Sequence[str] = ("learning_rate",),
              dpi: int = 100) -> List[str]:
    """Draw the per-epoch scalars of each run's ``stats.json`` into ``output`` (PNG, PDF, SVG).

    Args:
        logdirs: log directories (or stats.json files); their curves are overlaid.
        output: the image file to write.
        stats: regular expressions; plot only the statistics that fully match one.
            Default: every numeric statistic.
        labels: a legend label per run (default: the directory names).
        columns: panels per row.
        log_scale: statistics drawn on a log y axis when all their values are positive.

    Returns the names of the statistics plotted (one panel each).

    Example::

        plot_runs(['train_log/a', 'train_log/b'], 'curves.png', stats=['cost', 'validation_.*'])
    """
    if not logdirs:
        raise ValueError("plot_runs: give at least one log directory.")
    if labels is not None and len(labels) != len(logdirs):
        raise ValueError(f"plot_runs: {len(labels)} labels for {len(logdirs)} runs.")
    runs = [(_series(load_stats(d)), (labels[i] if labels else _label(d))) for i, d in enumerate(logdirs)]
    names = set()
    for series, _ in runs:
        names.update(series)
    if stats:
        pats = [re.compile(p) for p in stats]
        names = {n for n in names if any(p.fullmatch(n) for p in pats)}
    names = _order(names)
    if not names:
        what = f"matching {list(stats)}" if stats else "with numbers"
        raise ValueError(f"No statistic {what} in the stats.json of {list(logdirs)}: nothing to plot.")
    plt = _import_pyplot()
    cols = max(1, min(int(columns), len(names)))
    rows = math.ceil(len(names) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.0 * rows), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key().get("color", ["C0"])
    for i, name in enumerate(names):
        ax = axes[i // cols][i % cols]
        all_ys = []
        for r, (series, label) in enumerate(runs):
            if name in series:
                xs, ys = series[name]
                all_ys.extend(ys)
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3,
                        color=colors[r % len(colors)], label=label)
        if name in log_scale and all_ys and min(all_ys) > 0:
            ax.set_yscale("log")
        ax.set_title(name, fontsize=10)
        ax.set_xlabel("epoch")
        ax.grid(True, alpha=0.3)
        if len(runs) > 1:
            ax.legend(fontsize=7)
    for j in range(len(names), rows * cols):
        axes[j // cols][j % cols].axis("off")
    fig.tight_layout()
    out_dir = os.path.dirname(os.path.abspath(output))
    os.makedirs(out_dir, exist_ok=True)
    fig.savefig(output, dpi=dpi)
    plt.close(fig)
    return names


def _label(logdir: str) -> str:
    d = os.path.normpath(logdir)
    if os.path.isfile(d):
        d = os.path.dirname(d)
    return os.path.basename(d) or d


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``kerastrainer-plot LOGDIR [LOGDIR...] -o curves.png``."""
    p = argparse.ArgumentParser(
        prog="kerastrainer-plot",
        description="Plot the per-epoch scalars of stats.json (one panel per statistic, runs overlaid).")
    p.add_argument("logdirs", nargs="+", metavar="LOGDIR",
                   help="log directories of training runs (or stats.json files)")
    p.add_argument("-o", "--output", default="curves.png", help="image to write (.png, .pdf, .svg); default curves.png")
    p.add_argument("--stats", nargs="+", metavar="REGEX", help="plot only these statistics (regular expressions)")
    p.add_argument("--labels", nargs="+", help="legend labels, one per LOGDIR")
    p.add_argument("--columns", type=int, default=3, help="panels per row")
    p.add_argument("--dpi", type=int, default=100)
    args = p.parse_args(argv)
    try:
        names = plot_runs(args.logdirs, args.output, stats=args.stats, labels=args.labels,
                          columns=args.columns, dpi=args.dpi)
    except (FileNotFoundError, ValueError, ImportError) as e:
        print(f"kerastrainer-plot: error: {e}", file=sys.stderr)
        return 2
    print(f"Wrote {args.output}: {len(names)} panels ({', '.join(names)}) from {len(args.logdirs)} run(s).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
