"""kerastrainer.plot / kerastrainer-plot: stats.json curves as a PNG."""
import json
import os
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write_run(d, scale):
    os.makedirs(d, exist_ok=True)
    stats = [{"epoch_num": e, "global_step": 10 * e, "cost": scale / e, "validation_error": 0.5 / e,
              "learning_rate": 1e-3 if e < 3 else 1e-4} for e in range(1, 6)]
    with open(os.path.join(d, "stats.json"), "w") as f:
        json.dump(stats, f)


def _run(*args, prelude=""):
    code = (prelude + "import sys, runpy; sys.argv = ['kerastrainer-plot'] + sys.argv[1:]; "
            "runpy.run_module('kerastrainer.plot', run_name='__main__')")
    wrapper = code + "\n" if not prelude else code
    return subprocess.run([sys.executable, "-c", wrapper, *args], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL)


def _axes_frames(img, row):
    """Count the panels crossing image row ``row``: runs of dark columns are axis spines."""
    gray = img[..., :3].mean(axis=-1)
    dark = gray[row] < 0.5
    edges = np.flatnonzero(dark[1:] & ~dark[:-1])
    return len(edges)


def test_two_runs_three_panels(tmp_path):
    import matplotlib.image as mpimg
    _write_run(str(tmp_path / "run_a"), 1.0)
    _write_run(str(tmp_path / "run_b"), 2.0)
    out = str(tmp_path / "curves.png")
    r = _run(str(tmp_path / "run_a"), str(tmp_path / "run_b"), "-o", out, "--dpi", "50",
             prelude="import sys; sys.modules['tensorflow'] = None; ")
    assert r.returncode == 0, r.stderr        # and TensorFlow was never imported (it is blocked)
    assert "3 panels (cost, validation_error, learning_rate)" in r.stdout
    img = mpimg.imread(out)
    # 3 panels of 4.2 x 3.0 inches in one row, at 50 dpi
    assert img.shape[:2] == (150, 630)
    rgb = img[..., :3]
    assert (rgb.mean(axis=-1) < 0.9).mean() > 0.02       # not blank
    # both runs are drawn: matplotlib's first two colours (C0 blue, C1 orange) appear
    blue = np.all(np.abs(rgb - np.array([31, 119, 180]) / 255) < 0.08, axis=-1).sum()
    orange = np.all(np.abs(rgb - np.array([255, 127, 14]) / 255) < 0.08, axis=-1).sum()
    assert blue > 20 and orange > 20
    # three framed panels side by side: each has a left and a right spine crossing the middle row
    assert _axes_frames(img, img.shape[0] // 2) >= 6


def test_stats_filter_and_bad_input(tmp_path):
    _write_run(str(tmp_path / "run"), 1.0)
    out = str(tmp_path / "lr.png")
    r = _run(str(tmp_path / "run"), "-o", out, "--stats", "learning_rate")
    assert r.returncode == 0 and "1 panels (learning_rate)" in r.stdout, r.stderr
    assert os.path.getsize(out) > 1000

    r = _run(str(tmp_path / "missing"), "-o", out)
    assert r.returncode == 2
    assert "missing/stats.json does not exist" in r.stderr


def test_missing_matplotlib_names_the_extra(tmp_path):
    _write_run(str(tmp_path / "run"), 1.0)
    r = _run(str(tmp_path / "run"), "-o", str(tmp_path / "x.png"),
             prelude="import sys; sys.modules['matplotlib'] = None; ")
    assert r.returncode == 2
    assert "kerastrainer[plot]" in r.stderr
