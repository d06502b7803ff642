"""Runs one strictly ported tensorpack unit-test module that turns eager execution off at import
(``python _run_graph_mode_port.py MODULE``), then prints the process's TF mode after its tests:
``MODE_AFTER eager=<main thread> eager_new_thread=<a thread started now> tf2=<tf2 behaviour>``.
Its tests ran in TF1 graph mode only if the mode is still off. A test helper, not library code."""
import sys
import threading
import unittest

module = __import__(sys.argv[1])   # runs the module's tf.disable_eager_execution()
import tensorflow as tf  # noqa: E402

result = unittest.main(module=module, argv=[sys.argv[0], "-v"], exit=False).result
fresh = []
t = threading.Thread(target=lambda: fresh.append(tf.executing_eagerly()))
t.start()
t.join()
print(f"MODE_AFTER eager={tf.executing_eagerly()} eager_new_thread={fresh[0]} "
      f"tf2={tf.__internal__.tf2.enabled()}", flush=True)
sys.exit(0 if result.wasSuccessful() else 1)
