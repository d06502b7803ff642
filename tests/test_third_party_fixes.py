"""Focused tests of what the third-party tensorpack programs (tests/third_party/) needed fixed in
kerastrainer; each names the program that met it."""
import numpy as np
import tensorflow as tf

from kerastrainer import (BatchData, DataFromList, FullyConnected, InferenceRunner, ModelDesc, ScalarStats,
                          SimpleTrainer, TrainConfig, launch_train_with_config)
from kerastrainer.compat import tfv1
from kerastrainer.tfutils.tower import TowerFunc


def _data(n=16, batch=4):
    rng = np.random.RandomState(0)
    return BatchData(DataFromList([[rng.normal(size=4).astype("float32"), np.int32(i % 3)] for i in range(n)],
                                  shuffle=False), batch)


class _AttackedModel(ModelDesc):
    """ImageNet-Adversarial-Training's cifar10.py: the training tower is TF1 code; the inference
    towers come from ``get_inference_func(attacker)``, a closure that names no TF1 API itself and
    runs the network again inside a ``tf.while_loop`` (the attack)."""

    def inputs(self):
        return [tf.TensorSpec((None, 4), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def get_logits(self, x):
        with tfv1.variable_scope("net", reuse=tfv1.AUTO_REUSE):
            return FullyConnected("fc", x, 3)

    def build_graph(self, x, y):
        logits = self.get_logits(x)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")

    def get_inference_func(self, steps):
        def tower_func(x, y):
            adv, = tf.while_loop(lambda _: True, lambda a: (a + 0.01 * tf.sign(self.get_logits(a)[:, :1]),), (x,),
                                 maximum_iterations=steps)
            logits = self.get_logits(adv)
            tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="adv_cost")
        return TowerFunc(tower_func, self.get_input_signature())

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def test_a_closure_made_by_a_tf1_models_method_is_tf1_code():
    from kerastrainer.tfutils.extensions import code_names_tf1
    model = _AttackedModel()
    assert code_names_tf1(model.get_inference_func(2).fn) is True

    def plain(x, y):   # a closure holding nothing of a TF1 program stays TF2 code
        return tf.reduce_mean(x) + tf.cast(tf.reduce_mean(y), tf.float32)
    assert code_names_tf1(plain) is False


def test_an_inference_tower_of_a_closure_reuses_the_trained_layers_inside_a_while_loop():
    # it failed: the loop body's layer was keyed 'while/net/fc' (a name scope) and was "created after
    # the model was built"
    model = _AttackedModel()
    trainer = SimpleTrainer(steps_per_call=1)
    runner = InferenceRunner(_data(8), [ScalarStats("adv_cost")], tower_name="eval-attack",
                             tower_func=model.get_inference_func(3))
    launch_train_with_config(TrainConfig(model=model, dataflow=_data(), max_epoch=1, callbacks=[runner],
                                         extra_callbacks=[], monitors=[]), trainer)
    assert sorted(trainer.named_variables()) == ["net/fc/W", "net/fc/b"]
    assert np.isfinite(trainer.monitors.get_latest("validation_adv_cost"))


def test_send_dataflow_zmq_waits_for_a_receiver_that_comes_later():
    # ImageNet-Adversarial-Training's third_party/serve-data.py is started first; main.py connects its
    # RemoteDataZMQ once its ResNet is built, minutes later: the sender gave up after 30 s
    import inspect
    import socket
    import threading
    import time

    from kerastrainer.dataflow.remote import RemoteDataZMQ, send_dataflow_zmq

    assert inspect.signature(send_dataflow_zmq).parameters["timeout"].default is None   # tensorpack's
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        addr = f"tcp://127.0.0.1:{s.getsockname()[1]}"
    result = {}

    def serve():
        try:
            result["sent"] = send_dataflow_zmq(DataFromList([[np.int64(i)] for i in range(3)], shuffle=False), addr,
                                               bind=True, timeout=None, num_epochs=1)
        except Exception as e:   # pragma: no cover - reported below
            result["error"] = e

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    time.sleep(1.5)   # nobody connected yet: the sender waits
    assert t.is_alive() and not result
    ds = RemoteDataZMQ(addr, bind=False)
    ds.reset_state()
    it = iter(ds)
    got = [int(next(it)[0]) for _ in range(3)]
    t.join(60)
    assert got == [0, 1, 2] and result == {"sent": 3}


def _horovod_style_error_class():
    from kerastrainer.callbacks import Inferencer

    class HorovodStyleError(Inferencer):
        """ImageNet-Adversarial-Training's third_party/utils.py HorovodClassificationError: a TF1
        placeholder reduced by an op in _setup_graph, run with tensor.eval(feed_dict=...) at the end."""

        def _setup_graph(self):
            self._placeholder = tfv1.placeholder(tf.float32, shape=[2], name='to_be_reduced')
            self._reduced = self._placeholder * 1.0   # hvd.allreduce(self._placeholder, average=False) on one rank

        def _before_inference(self):
            self.wrong, self.total = 0.0, 0.0

        def _get_fetches(self):
            return ['wrong']

        def _on_fetches(self, outputs):
            self.wrong += float(np.sum(outputs[0]))
            self.total += len(outputs[0])

        def _after_inference(self):
            tot, cnt = self._reduced.eval(feed_dict={self._placeholder: [self.total, self.wrong]})
            return {'reduced-error': cnt / tot}
    return HorovodStyleError


class _Classifier(ModelDesc):
    def inputs(self):
        return [tf.TensorSpec((None, 4), tf.float32, "x"), tf.TensorSpec((None,), tf.int32, "y")]

    def build_graph(self, x, y):
        logits = FullyConnected("fc", x, 3)
        tf.cast(tf.not_equal(tf.argmax(logits, 1, output_type=tf.int32), y), tf.float32, name="wrong")
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits), name="cost")

    def optimizer(self):
        return tfv1.train.GradientDescentOptimizer(0.1)


def test_a_program_inferencer_building_tf1_graph_ops_sets_up_in_a_graph_and_evals_in_the_main_loop():
    # it failed in setup_graph: "tf.placeholder() is not compatible with eager execution"
    trainer = SimpleTrainer(steps_per_call=1)
    runner = InferenceRunner(_data(8), [_horovod_style_error_class()()])
    launch_train_with_config(TrainConfig(model=_Classifier(), dataflow=_data(), max_epoch=2, callbacks=[runner],
                                         extra_callbacks=[], monitors=[]), trainer)
    err = trainer.monitors.get_latest("reduced-error")
    assert 0.0 <= err <= 1.0 and err * 8 == round(err * 8)   # a count of 8 validation samples
    assert tf.executing_eagerly()   # the program is eager again after training
