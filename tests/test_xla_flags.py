"""kerastrainer's default XLA flags: added to XLA_FLAGS at import, merged with the user's, opt-out,
accepted by XLA, and a warning when TensorFlow started first (XLA may have read its flags already)."""
import os
import subprocess
import sys

from kerastrainer.utils import xla_flags
from kerastrainer.utils.xla_flags import apply_default_xla_flags, merge_disabled_passes

PASS = "cudnn-fused-convolution-rewriter"


def test_merge_adds_and_extends():
    assert merge_disabled_passes("") == f"--xla_disable_hlo_passes={PASS}"
    assert merge_disabled_passes("--xla_dump_to=/x") == f"--xla_dump_to=/x --xla_disable_hlo_passes={PASS}"
    assert merge_disabled_passes("--xla_disable_hlo_passes=foo --xla_gpu_autotune_level=2") == \
        f"--xla_disable_hlo_passes=foo,{PASS} --xla_gpu_autotune_level=2"
    once = merge_disabled_passes("--a=1")
    assert merge_disabled_passes(once) == once


def test_apply_opt_out_and_present():
    env = {"KERASTRAINER_XLA_DEFAULTS": "0", "XLA_FLAGS": "--xla_dump_to=/d"}
    assert apply_default_xla_flags(env) == "opted-out"
    assert env["XLA_FLAGS"] == "--xla_dump_to=/d"
    env = {"XLA_FLAGS": f"--xla_disable_hlo_passes={PASS}"}
    assert apply_default_xla_flags(env) == "present"
    env = {}
    assert apply_default_xla_flags(env) == "added"
    assert env["XLA_FLAGS"] == f"--xla_disable_hlo_passes={PASS}"


def _python(code, **env):
    full = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "KERASTRAINER_XLA_DEFAULTS")}
    full.update(env)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout


def test_import_sets_flags_and_xla_accepts_them(tmp_path):
    dump = tmp_path / "dump"
    code = ("import os, kerastrainer\n"
            "print('FLAGS', os.environ['XLA_FLAGS'])\n"
            "import tensorflow as tf\n"
            "f = tf.function(lambda a: tf.matmul(a, a) + 1.0, jit_compile=True)\n"
            "print('VALUE', float(f(tf.ones([2, 2]))[0, 0]))\n"
            "print('STATE', kerastrainer.utils.xla_flags.default_flags_state())\n")
    out = _python(code, XLA_FLAGS=f"--xla_dump_to={dump}")
    assert f"FLAGS --xla_dump_to={dump} --xla_disable_hlo_passes={PASS}" in out
    assert "VALUE 3.0" in out
    assert "'result': 'added', 'tf_started': False" in out
    assert any(p.name.endswith(".txt") for p in dump.iterdir()), "XLA did not read the merged XLA_FLAGS"


def test_opt_out_leaves_flags():
    out = _python("import os, kerastrainer; print('FLAGS', repr(os.environ.get('XLA_FLAGS')))",
                  KERASTRAINER_XLA_DEFAULTS="0", XLA_FLAGS="--xla_dump_to=/nowhere")
    assert "FLAGS '--xla_dump_to=/nowhere'" in out


def test_tf_started_first_is_noticed():
    out = _python("import tensorflow as tf\nx = tf.ones([2]) * 2\nimport kerastrainer\n"
                  "print('STATE', kerastrainer.utils.xla_flags.default_flags_state())")
    assert "'tf_started': True" in out


def test_trainer_warns_when_flags_may_be_late(monkeypatch, kt_log):
    from kerastrainer.train import xla
    monkeypatch.setattr(xla_flags, "_state", {"result": "added", "tf_started": True})
    monkeypatch.setattr(xla, "execute_only_once", lambda: True)
    xla.check_default_xla_flags()
    assert any("TensorFlow had started before kerastrainer was imported" in m and PASS in m
               for m in kt_log.messages)
    monkeypatch.setattr(xla_flags, "_state", {"result": "added", "tf_started": False})
    n = len(kt_log.messages)
    xla.check_default_xla_flags()
    assert len(kt_log.messages) == n
