# Ported from tensorpack's examples/FasterRCNN/modeling/__init__.py:
#   https://github.com/tensorpack/tensorpack/blob/1547a54e8546494614ca31c984a1bfd1d0e24b77/examples/FasterRCNN/modeling/__init__.py
#   (tensorpack master, version 0.11 with upstream's TF2 fixes to this example since tag v0.11).
# Edits: none (no tensorpack import, nothing TF2 or a CPU forces).
