"""tensorpack's ``callbacks.misc``: a shell on request (:class:`InjectShell`), a command with the
latest statistics (:class:`SendStat`), and :class:`EstimatedTimeLeft` (``callbacks/prog.py``)."""
from __future__ import annotations

import os
import subprocess
from typing import List, Union

from ..utils import logger
from .base import Callback
from .prog import EstimatedTimeLeft

__all__ = ["EstimatedTimeLeft", "InjectShell", "SendStat"]


class InjectShell(Callback):
    """At each trigger (epoch end), if ``file`` exists, open an IPython (or pdb) shell in which
    ``self`` is this callback and ``self.trainer`` the trainer; the file is removed after training.

    Example::

        callbacks=[InjectShell('/tmp/pause-training')]
        # then, in another terminal:  touch /tmp/pause-training
    """

    def __init__(self, file: str = "INJECT_SHELL.tmp", shell: str = "ipython"):
        if shell not in ("ipython", "pdb"):
            raise ValueError(f"InjectShell: shell must be 'ipython' or 'pdb', got {shell!r}")
        self._file = file
        self._shell = shell
        logger.info("Create a file '%s' to open a %s shell at the next epoch end.", file, shell)

    def _trigger(self):
        if os.path.isfile(self._file):
            logger.info("File %s exists: entering a %s shell.", self._file, self._shell)
            self._inject()

    def _inject(self):
        trainer = self.trainer  # noqa: F841 (for the shell)
        if self._shell == "ipython":
            import IPython
            IPython.embed()
        else:
            import pdb
            pdb.set_trace()

    def _after_train(self):
        if os.path.isfile(self._file):
            os.unlink(self._file)


class SendStat(Callback):
    """At each trigger, run the shell ``command`` formatted with the latest values of the
    statistics ``names`` (``command.format(**{name: value})``); a failing command is logged.

    Example::

        SendStat('curl -s "https://example.org/notify?acc={val_accuracy}"', ['val_accuracy'])
    """

    def __init__(self, command: str, names: Union[str, List[str]]):
        self.command = command
        self.names = names if isinstance(names, list) else [names]

    def _trigger(self):
        m = self.trainer.monitors
        cmd = self.command.format(**{k: m.get_latest(k) for k in self.names})
        ret = subprocess.call(cmd, shell=True)
        if ret != 0:
            logger.error("SendStat: command %s failed with exit status %d", cmd, ret)
