"""Running a program in a process group of its own, for tests: never left behind, never hanging."""
import os
import signal
import subprocess


def run_group(cmd, timeout: float, **popen_kwargs):
    """Run ``cmd`` in a new session; after it ends (or ``timeout`` s), kill its whole group.
    Returns ``(returncode, stdout, stderr)`` as ``communicate`` gives them."""
    proc = subprocess.Popen(cmd, start_new_session=True, **popen_kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait(timeout=10)
    return proc.returncode, out, err
