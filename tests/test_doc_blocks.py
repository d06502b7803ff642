"""Every ```python block of README.md and docs/*.md runs as written.

Each block is written to a file and run by a fresh ``python`` in an empty working
directory, as a user who pastes it would run it. Nothing in the block is rewritten:
what keeps it fast is the data. ``HOME`` points at a temporary home whose
``~/data/mnist`` holds a tiny MNIST (256 training and 64 test images in the real IDX
format, written here), so a block that trains "on MNIST" for 10 epochs runs 2 steps
per epoch. The block's own log directory (``train_log/...``) lands in the temporary
working directory.

A block that cannot run here says so in the markdown, on the line right before it:

- ``<!-- doc-test: skip (why) -->``: not run (e.g. needs a GPU, several hosts, or
  data that cannot be made small); reported as skipped with the reason.
- ``<!-- doc-test: fragment (why) -->``: a piece of a larger program (it uses names
  defined elsewhere); compiled, so its syntax is checked, then reported as skipped.
- ``<!-- doc-test: continue -->``: runs after the previous block of the same page,
  in the same program (a page that builds one program over several blocks).
"""
import gzip
import os
import re
import struct
import subprocess
import sys
from typing import List, NamedTuple

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_DIRECTIVE = re.compile(r"<!--\s*doc-test:\s*(skip|fragment|continue)\s*(?:\((.*)\))?\s*-->")


class Block(NamedTuple):
    page: str           # relative to ROOT
    line: int           # of the opening fence, 1-based
    code: str           # with the code of earlier blocks it continues
    kind: str           # 'run', 'skip', 'fragment'
    reason: str


def doc_pages() -> List[str]:
    pages = ["README.md"] + sorted(os.path.join("docs", f) for f in os.listdir(os.path.join(ROOT, "docs"))
                                   if f.endswith(".md"))
    return pages


def extract_blocks(page: str) -> List[Block]:
    lines = open(os.path.join(ROOT, page), encoding="utf-8").read().split("\n")
    blocks: List[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```python":
            start = i
            j = i + 1
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            if j == len(lines):
                raise AssertionError(f"{page}:{start + 1}: a ```python block is never closed")
            code = "\n".join(lines[start + 1:j]) + "\n"
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            m = _DIRECTIVE.search(lines[k]) if k >= 0 else None
            kind, reason = ("run", "") if m is None else (m.group(1), (m.group(2) or "").strip())
            if kind == "continue":
                if not blocks:
                    raise AssertionError(f"{page}:{start + 1}: 'continue' on the page's first block")
                prev = blocks[-1]
                code = prev.code + "\n" + code
                kind, reason = prev.kind, prev.reason
            if kind in ("skip", "fragment") and not reason:
                raise AssertionError(f"{page}:{start + 1}: say why, e.g. <!-- doc-test: {kind} (needs a GPU) -->")
            blocks.append(Block(page, start + 1, code, kind, reason))
            i = j
        i += 1
    return blocks


ALL_BLOCKS = [b for p in doc_pages() for b in extract_blocks(p)]


# --- a tiny MNIST in the real IDX format -------------------------------------------------------
def _write_idx(path, arr):
    header = struct.pack(">HBB", 0, 0x08, arr.ndim) + struct.pack(">" + "I" * arr.ndim, *arr.shape)
    with gzip.open(path + ".gz", "wb") as f:
        f.write(header + arr.astype(np.uint8).tobytes())


def write_tiny_mnist(d, n_train=256, n_test=64):
    os.makedirs(d, exist_ok=True)
    rng = np.random.RandomState(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.randint(0, 10, n)
        images = rng.randint(0, 60, (n, 28, 28))
        for i, lab in enumerate(labels):  # a bright bar whose row is the label: learnable
            images[i, 2 + 2 * lab:4 + 2 * lab, 4:24] = 255
        _write_idx(os.path.join(d, f"{prefix}-images-idx3-ubyte"), images)
        _write_idx(os.path.join(d, f"{prefix}-labels-idx1-ubyte"), labels)


@pytest.fixture(scope="module")
def doc_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    write_tiny_mnist(str(home / "data" / "mnist"))
    return str(home)


def test_blocks_are_found():
    pages = {b.page for b in ALL_BLOCKS}
    assert "README.md" in pages and len(ALL_BLOCKS) >= 10


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=[f"{b.page}:{b.line}" for b in ALL_BLOCKS])
def test_doc_block(block, doc_home, tmp_path):
    if block.kind == "skip":
        pytest.skip(block.reason)
    if block.kind == "fragment":
        compile(block.code, f"{block.page}:{block.line}", "exec")
        pytest.skip(f"fragment ({block.reason}); its syntax is checked")
    script = tmp_path / "block.py"
    script.write_text(block.code)
    work = tmp_path / "work"
    work.mkdir()
    env = dict(os.environ, HOME=doc_home, PYTHONUNBUFFERED="1")
    env.pop("KERASTRAINER_LOG_LEVEL", None)
    r = subprocess.run([sys.executable, str(script)], cwd=str(work), env=env, capture_output=True, text=True,
                       timeout=600, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, (f"{block.page}:{block.line} failed (exit {r.returncode}):\n"
                               f"{r.stdout[-3000:]}\n{r.stderr[-5000:]}")
