"""Test set-up: several logical CPU devices before TensorFlow starts its runtime.

Multi-device code paths (MirroredStrategy, per-tower inputs) run on these in CI.
"""
import logging
import os
import sys
import time

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
NUM_LOGICAL_CPUS = 4


def _configure_tf():
    import tensorflow as tf
    cpus = tf.config.list_physical_devices("CPU")
    try:
        tf.config.set_logical_device_configuration(
            cpus[0], [tf.config.LogicalDeviceConfiguration()] * NUM_LOGICAL_CPUS)
    except RuntimeError:  # runtime already initialised by an earlier import
        pass


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long tests")
    # Started in the background (nohup, `cmd &` in a script), SIGINT is ignored and every child
    # inherits that: the tests that send Ctrl-C to a training would see it do nothing. Handled here,
    # a child starts with SIGINT at its default (Python's KeyboardInterrupt).
    import signal
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # Before any test module can start TF's runtime. (The TF-free promise of
    # kerastrainer.dataflow is checked in a subprocess, so importing TF here is fine.)
    _configure_tf()


@pytest.hookimpl(trylast=True)   # after -m's deselection: the modules that will run
def pytest_collection_modifyitems(config, items):
    # Under CI's time budget not every slow test fits one run: the run starts at a test module chosen
    # by the day (the others follow in order, wrapping round), so that successive runs reach them all
    if not os.environ.get("KERASTRAINER_TEST_DEADLINE") or not items:
        return
    files = list(dict.fromkeys(item.nodeid.split("::")[0] for item in items))
    first = int(time.time() // 86400) % len(files)
    order = {f: (i - first) % len(files) for i, f in enumerate(files)}
    items.sort(key=lambda item: order[item.nodeid.split("::")[0]])   # stable: in-file order kept
    config._kerastrainer_first_module = files[first]


def pytest_report_collectionfinish(config, start_path, items):
    first = getattr(config, "_kerastrainer_first_module", None)
    if first:
        return f"CI time budget: the tests start at {first} (today's turn), the others follow"


def pytest_runtest_setup(item):
    # CI's time budget (.ci/run sets it for the slow tests): a test not started by then is reported
    # as skipped with this reason, not run half-way and not counted as passed
    deadline = os.environ.get("KERASTRAINER_TEST_DEADLINE")
    if deadline and time.time() > float(deadline):
        pytest.skip(f"not run: the CI time budget (KERASTRAINER_TEST_DEADLINE={deadline}) was spent")


def pytest_runtest_teardown(item, nextitem):
    # At a module's end: what is still alive leaves the collector's generations, so later modules'
    # full collections stop re-walking a million objects of TF and finished tests (21:26 against
    # 22:44 for the fast suite; reference counting still frees them)
    if nextitem is None or nextitem.module is not item.module:
        import gc
        gc.collect()
        gc.freeze()


@pytest.fixture(scope="session")
def tf():
    _configure_tf()
    import tensorflow as tf
    return tf


@pytest.fixture
def logdir(tmp_path):
    """A fresh log directory; the logger forgets it afterwards."""
    from kerastrainer.utils import logger
    d = tmp_path / "train_log"
    yield str(d)
    logger.unset_logger_dir()


class LogCapture(logging.Handler):
    """Collects the messages of the kerastrainer logger, with their levels."""

    def __init__(self):
        super().__init__()
        self.records = []  # (levelno, message)

    def emit(self, record):
        self.records.append((record.levelno, record.getMessage()))

    @property
    def messages(self):
        return [m for _, m in self.records]

    def at_level(self, level):
        """The messages logged at ``level`` or above."""
        return [m for lv, m in self.records if lv >= level]

    def warnings(self):
        return "\n".join(self.at_level(logging.WARNING))

    def text(self):
        return "\n".join(self.messages)

    def clear(self):
        self.records.clear()


@pytest.fixture
def kt_log():
    """Messages of the kerastrainer logger (it does not propagate to the root logger)."""
    lg = logging.getLogger("kerastrainer")
    h = LogCapture()
    lg.addHandler(h)
    yield h
    lg.removeHandler(h)
