"""The log directory and its k/d/b/n/q actions."""
import os
import subprocess
import sys

import pytest

from kerastrainer.utils import logger


@pytest.fixture
def existing(tmp_path):
    d = tmp_path / "log"
    d.mkdir()
    (d / "old.txt").write_text("x")
    yield str(d)
    logger.unset_logger_dir()


def test_keep(existing):
    logger.set_logger_dir(existing, "k")
    assert os.path.isfile(os.path.join(existing, "old.txt"))
    assert os.path.isfile(os.path.join(existing, "log.log"))


def test_delete(existing):
    logger.set_logger_dir(existing, "d")
    assert not os.path.exists(os.path.join(existing, "old.txt"))


def test_backup_and_new(existing):
    logger.set_logger_dir(existing, "b")
    siblings = os.listdir(os.path.dirname(existing))
    assert any(s.startswith("log") and s != "log" and os.path.isfile(os.path.join(os.path.dirname(existing), s, "old.txt"))
               for s in siblings)
    logger.unset_logger_dir()
    logger.set_logger_dir(existing, "n")
    assert logger.get_logger_dir() != existing and logger.get_logger_dir().startswith(existing)


def test_quit_and_unknown(existing):
    with pytest.raises(OSError, match="quitting"):
        logger.set_logger_dir(existing, "q")
    with pytest.raises(ValueError, match="Unknown log-directory action"):
        logger.set_logger_dir(existing, "x")


def test_no_prompt_without_a_terminal(existing):
    code = f"from kerastrainer.utils import logger; logger.set_logger_dir({existing!r})"
    r = subprocess.run([sys.executable, "-c", code], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode != 0
    assert "stdin is not a terminal" in r.stderr and "action='k'" in r.stderr


@pytest.mark.parametrize("value,shown", [("DEBUG", ["DBG dbg", "info", "WRN wrn"]), ("warning", ["WRN wrn"]),
                                         ("", ["info", "WRN wrn"]), ("loud", ["info", "WRN wrn"])])
def test_level_from_the_environment(value, shown):
    code = ("from kerastrainer.utils import logger\n"
            "logger.debug('dbg'); logger.info('info'); logger.warning('wrn')\n")
    env = dict(os.environ, KERASTRAINER_LOG_LEVEL=value)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    lines = [line.split("] ", 1)[1] for line in r.stdout.splitlines()]
    assert lines == [s for s in ["DBG dbg", "info", "WRN wrn"] if s in shown]
    assert ("not a log level" in r.stderr) == (value == "loud")
