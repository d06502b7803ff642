"""The wheel: what it depends on, what it carries, where it points."""
import email
import os
import subprocess
import sys
import zipfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out), ROOT], check=True, capture_output=True, timeout=300)
    path, = [os.path.join(out, f) for f in os.listdir(out) if f.endswith(".whl")]
    return zipfile.ZipFile(path)


def _metadata(wheel):
    name, = [n for n in wheel.namelist() if n.endswith(".dist-info/METADATA")]
    return email.message_from_bytes(wheel.read(name))


def test_depends_on_tensorflow_with_cuda_and_cpu_extras(wheel):
    reqs = _metadata(wheel).get_all("Requires-Dist")
    assert "tensorflow==2.21.*" in reqs  # the one package that runs on CPUs and GPUs
    assert not [r for r in reqs if r.startswith("tensorflow-cpu") and "extra ==" not in r]
    assert any(r.startswith("tensorflow[and-cuda]==2.21.*") and 'extra == "cuda"' in r for r in reqs)
    assert any(r.startswith("tensorflow-cpu==2.21.*") and 'extra == "cpu"' in r for r in reqs)
    assert any(r.startswith("matplotlib") and 'extra == "plot"' in r for r in reqs)


def test_wheel_carries_license_and_py_typed_and_links_docs(wheel):
    names = wheel.namelist()
    assert "kerastrainer/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert not [n for n in names if n.startswith(("tests/", "examples/", "docs/"))]
    urls = " ".join(_metadata(wheel).get_all("Project-URL") or [])
    assert "Documentation" in urls and "docs" in urls and "Examples" in urls
    ep, = [n for n in names if n.endswith("entry_points.txt")]
    scripts = wheel.read(ep).decode()
    assert "kerastrainer-plot = kerastrainer.plot:main" in scripts
    assert "kerastrainer-run = kerastrainer.run:main" in scripts
