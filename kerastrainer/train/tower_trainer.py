"""tensorpack's custom trainers on TF2: ``TowerTrainer`` and ``SingleCostTrainer``.

A tensorpack custom trainer builds a TF1 graph in ``__init__`` (the GAN examples' trainers)::

    class GANTrainer(TowerTrainer):
        def __init__(self, input, model):
            super().__init__()
            self.register_callback(input.setup(model.get_input_signature()))
            self.tower_func = TowerFunc(model.build_graph, model.inputs())
            with TowerContext('', is_training=True):
                self.tower_func(*input.get_input_tensors())
            opt = model.get_optimizer()
            g_min = opt.minimize(model.g_loss, var_list=model.g_vars)
            with tf.control_dependencies([g_min]):
                self.train_op = opt.minimize(model.d_loss, var_list=model.d_vars)

    GANTrainer(QueueInput(df), Model()).train_with_defaults(callbacks=[ModelSaver()], steps_per_epoch=300)

How it runs here (the design):

- ``__init__`` of every ``TowerTrainer`` subclass runs inside the trainer's :class:`~.tf1_graph.TF1Graph`
  (a ``tf.compat.v1.wrap_function`` graph with TF1 semantics; variables made eagerly and put in
  the graph's collections). ``SingleCostTrainer.setup_graph`` builds there too.
- With ``self.train_op`` (and no ``run_step`` of its own), one ``tf.function`` runs ``k`` steps per
  call in a ``tf.range`` loop; each step is the graph pruned to ``train_op``, the main training
  tower's moving summaries and its variable updates (BatchNorm statistics, which tensorpack ran
  from ``UPDATE_OPS`` with every step). The input is dequeued in-graph: no Python between steps.
- A trainer with its own ``run_step`` (``SeparateGANTrainer``) runs it once per step; its
  ``self.hooked_sess.run(fetches)`` runs the graph pruned to those fetches plus the summaries and
  updates, and counts one global step, as tensorpack's hooked session did.
- Variables are saved by name (``gen/fc0/W``, the TF1 optimizers' ``gen/fc0/W/Adam``,
  ``learning_rate``...) with the global step and epoch; ``SmartInit`` and
  ``AutoResumeTrainConfig`` load them back. Callbacks, monitors and the progress bar are the
  standard ones.

What cannot be honoured raises an error naming the TF2 way: XLA (``jit_compile=True``), a
``FeedInput`` (use ``QueueInput``), towers with their own variables (``vs_name``).
"""
from __future__ import annotations

import functools
from contextlib import contextmanager, nullcontext
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np
import tensorflow as tf

from .._internals import tf1_default_session
from ..callbacks.base import Callback
from ..input_source.base import InputCallbacks, InputSource, InputSourceError
from ..tfutils.extensions import launch_contexts
from ..tfutils.global_step import global_step_of, set_current_global_step
from ..tfutils.layer_store import LayerStore, log_layer_shapes
from ..tfutils.tower import TowerContext, TowerFunc, get_current_tower_context, record_tower_contexts
from ..utils import logger
from .base import Trainer
from .model_desc import model_of_functions
from .step_runner import StepRunner
from .tf1_graph import TF1Graph
from .tf1_graph_runner import RunStepRunner, TrainOpRunner

__all__ = ["TowerTrainer", "SingleCostTrainer"]

_KEYS = tf.compat.v1.GraphKeys
# variable updates a tower leaves for "after the step" in a TF1 graph (BatchNorm statistics)
_UPDATE_OP_TYPES = ("AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp")


def _builds_graph(init: Callable) -> Callable:
    """Wrap a subclass's ``__init__`` so that its body is graph construction in the trainer's graph."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        # launch_contexts: a program in TF1 graph mode (eager turned off) gets eager set-up
        with launch_contexts(f"{type(self).__name__}.__init__"), \
                self._building(candidates=list(args) + list(kwargs.values())):
            init(self, *args, **kwargs)
    __init__._kerastrainer_builds_graph = True
    return __init__


class _GraphOptimizers:
    """Stands for a custom trainer's TF1 optimizers in checkpoints: their variables (slots such as
    ``gen/fc0/W/Adam``, ``beta1_power``) are saved and loaded by name with the model's, so this
    object holds none itself; its presence tells loaders that the trainer has optimizer state and
    counters to restore."""

    variables = ()


class _Session:
    """tensorpack's ``trainer.sess`` / ``trainer.hooked_sess``: ``run(fetches, feed_dict=None)``
    evaluates tensors and runs operations of the trainer's graph (numpy values, None for ops).
    The hooked session also runs the step's summaries and updates and counts one global step."""

    def __init__(self, trainer: "TowerTrainer", hooked: bool):
        self._trainer = trainer
        self._hooked = hooked

    def run(self, fetches, feed_dict: Optional[dict] = None, **kwargs):
        if kwargs:
            raise TypeError(f"{'hooked_sess' if self._hooked else 'sess'}.run(): options {sorted(kwargs)} have no "
                            "TF2 meaning (no session); pass fetches and feed_dict only.")
        return self._trainer._run_fetches(fetches, feed_dict or {}, hooked=self._hooked)

    @property
    def graph(self) -> tf.Graph:
        """The trainer's graph (TF1's ``op.run()`` checks that the default session runs it)."""
        return self._trainer.graph

    def should_stop(self) -> bool:
        return False


class TowerTrainer(Trainer):
    """Base class of trainers whose graph is built by calling a tower function under a
    ``TowerContext`` (tensorpack's ``TowerTrainer``): subclass it and build the training graph
    in ``__init__`` (TF1 code: it runs in the trainer's graph), setting ``self.tower_func`` and
    ``self.train_op``, or overriding ``run_step``.

    Example::

        class MyTrainer(TowerTrainer):
            def __init__(self, input, model):
                super().__init__()
                input.setup(model.get_input_signature())
                self.tower_func = TowerFunc(model.build_graph, model.inputs())
                with TowerContext('', is_training=True):
                    cost = self.tower_func(*input.get_input_tensors())
                self.train_op = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(cost)

        MyTrainer(QueueInput(df), Model()).train_with_defaults(steps_per_epoch=100, max_epoch=5)

    Keyword arguments go to :class:`~kerastrainer.train.base.Trainer` (``steps_per_call``);
    ``jit_compile=True`` and ``precision`` are errors (the TF1 graph is run as built).
    """

    _tower_func: Optional[TowerFunc] = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_kerastrainer_builds_graph", False):
            cls.__init__ = _builds_graph(init)

    def __init__(self, **kwargs):
        if kwargs.get("jit_compile") is True:
            raise ValueError(f"{type(self).__name__}(jit_compile=True): a custom trainer's TF1 graph runs as its code "
                             "built it, without XLA. Use the standard trainers (ModelDesc) to compile steps with XLA.")
        if kwargs.get("precision") not in (None, "fp32", "float32"):
            raise ValueError(f"{type(self).__name__}(precision={kwargs['precision']!r}): a custom trainer's graph "
                             "keeps the dtypes its code chose; mixed precision needs the standard trainers.")
        kwargs.setdefault("jit_compile", False)
        super().__init__(**kwargs)
        self._prepare_graph()

    # --- the graph -----------------------------------------------------------------------------
    def _prepare_graph(self) -> None:
        if self.__dict__.get("_tf1") is not None:
            return
        self.layer_store = LayerStore(name="tower_trainer_store")
        self._tf1 = TF1Graph(self.layer_store)
        # the step get_global_step_var() gives the graph's code (a decayed learning rate), made first
        self.global_step_var = global_step_of(self.layer_store)
        self.global_step_var.assign(0)
        set_current_global_step(self.global_step_var)
        self._building_depth = 0
        self._towers: List[TowerContext] = []
        self._input_candidates: list = []
        self._registered: List[Callback] = []
        self._finalized = False
        self._run_outputs: List[dict] = []
        self.sess = _Session(self, hooked=False)
        self.hooked_sess = _Session(self, hooked=True)

    @contextmanager
    def _building(self, candidates: Sequence = ()):
        """The block is TF1 graph construction in this trainer's graph (re-entrant)."""
        self._prepare_graph()
        if self._building_depth:   # a subclass's __init__ calling its parent's: one construction
            self._input_candidates.extend(candidates)
            yield
            return
        if self._finalized:
            raise RuntimeError(f"{type(self).__name__}: the training graph is built before training starts; "
                               "this trainer has started training already.")
        self._building_depth += 1
        try:
            with self._tf1.building(), record_tower_contexts() as towers:
                yield
        except InputSourceError as e:
            if "StagingInput" not in str(e):
                raise
            # its batches are staged by a thread that starts with training, after this graph is built
            raise InputSourceError(
                f"{e}\n{type(self).__name__} builds its graph in __init__, before training starts, so a StagingInput "
                "active on GPUs cannot feed it: give the trainer the wrapped input (QueueInput) instead; each "
                "tower then copies its batch to its GPU inside the step.") from None
        finally:
            self._building_depth -= 1
        self._towers.extend(towers)
        self._input_candidates.extend(candidates)

    @property
    def graph(self) -> tf.Graph:
        """The trainer's TF1 graph (``with trainer.graph.as_default():`` adds to it)."""
        return self._tf1.graph

    @property
    def tower_func(self) -> Optional[TowerFunc]:
        """The :class:`~kerastrainer.tfutils.tower.TowerFunc` the training graph was built with."""
        return self._tower_func

    @tower_func.setter
    def tower_func(self, value: TowerFunc) -> None:
        if not isinstance(value, TowerFunc):
            raise TypeError(f"trainer.tower_func must be a TowerFunc (kerastrainer.tfutils.tower); got "
                            f"{type(value).__name__}.")
        if self._tower_func is not None and self._tower_func is not value:
            raise RuntimeError("trainer.tower_func can be set only once (as in tensorpack).")
        self._tower_func = value

    @property
    def towers(self):
        """tensorpack's ``trainer.towers``: the towers built by ``tower_func`` (``towers.training()[0]``)."""
        if self._tower_func is None:
            raise RuntimeError("trainer.towers needs trainer.tower_func to be set.")
        return self._tower_func.towers

    @property
    def input_signature(self) -> List[tf.TensorSpec]:
        if self._tower_func is None:
            raise RuntimeError("trainer.input_signature needs trainer.tower_func to be set.")
        return self._tower_func.input_signature

    @property
    def num_replicas(self) -> int:
        """Training towers built (each takes its own batch per step), at least 1."""
        return max([1] + [c.total for c in self._towers if c.is_training])

    def register_callback(self, cb) -> None:
        """Add a callback (or a list) to those of the training run (tensorpack's).

        What ``InputSource.setup`` returns (the input's callbacks, as in tensorpack) tells the
        trainer which input it trains on; those callbacks (start/stop of its threads) are added
        when training starts.
        """
        if isinstance(cb, InputCallbacks):
            self._input_candidates.append(cb.source)
            return
        if cb is None:
            raise TypeError("register_callback(None): give a Callback, or what InputSource.setup(...) returns.")
        if isinstance(cb, (list, tuple)):
            for c in cb:
                self.register_callback(c)
            return
        if not isinstance(cb, Callback):
            raise TypeError(f"register_callback takes a Callback; got {type(cb).__name__}.")
        if getattr(self, "_callbacks", None) is not None:
            raise RuntimeError("Cannot register more callbacks after the trainer's callbacks were set up.")
        self._registered.append(cb)

    # --- set-up before training ----------------------------------------------------------------
    def _find_input(self) -> InputSource:
        seen, found = set(), []
        for obj in self._input_candidates + list(vars(self).values()):
            if isinstance(obj, InputSource) and id(obj) not in seen and obj._setup_done:
                seen.add(id(obj))
                found.append(obj)
        wrapped = {id(getattr(s, "input", None)) for s in found}
        outer = [s for s in found if id(s) not in wrapped]
        if not outer:
            raise ValueError(f"{type(self).__name__}: found no InputSource that was set up while the graph was built. "
                             "Set it up in __init__ (input.setup(model.get_input_signature())) and pass it as an "
                             "argument or keep it as an attribute (self.input = input).")
        if len(outer) > 1:
            raise ValueError(f"{type(self).__name__}: several InputSources were set up "
                             f"({', '.join(type(s).__name__ for s in outer)}); a custom trainer reads one.")
        source = outer[0]
        if source.requires_feed:
            raise ValueError(f"{type(self).__name__}: {type(source).__name__} feeds batches from Python, which a "
                             "custom trainer's graph cannot take; use QueueInput (the batches are dequeued in-graph).")
        return source

    def _main_towers(self) -> List[TowerContext]:
        return [c for c in self._towers if c.is_main_training_tower]

    def _collect_summaries(self) -> None:
        self._summaries: Dict[str, tf.Tensor] = {}
        self._tensor_summaries: Dict[str, tf.Tensor] = {}
        for ctx in self._main_towers():
            self._summaries.update(ctx.moving_summaries)
            self._tensor_summaries.update(ctx.tensor_summaries)

    def _collect_update_ops(self) -> None:
        """Variable updates made in a main training tower that no op depends on (BatchNorm's
        moving statistics), and tensorpack's ``UPDATE_OPS``: they run with every step, as
        ``RunUpdateOps`` ran them in tensorpack."""
        graph = self._tf1.graph
        used = set()
        for op in graph.get_operations():
            for c in op.control_inputs:
                used.add(c.name)
            for t in op.inputs:
                used.add(t.op.name)
        updates = [op for op in graph.get_collection(_KEYS.UPDATE_OPS) if isinstance(op, tf.Operation)]
        for ctx in self._main_towers():
            for op in ctx.ops():
                if op.type in _UPDATE_OP_TYPES and op.name not in used and not op.outputs:
                    updates.append(op)
        self._update_ops = list({op.name: op for op in updates}.values())

    def _finalize(self) -> None:
        """Before the callbacks are set up: the input, the variables, the checkpoint."""
        if self._finalized:
            return
        self.layer_store.allow_create = False
        log_layer_shapes(self.layer_store)
        self.strategy = tf.distribute.get_strategy()
        self.input = self._find_input()
        self._collect_summaries()
        self._collect_update_ops()
        self.optimizer = _GraphOptimizers()
        self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.checkpoint = tf.train.Checkpoint(model=_VariableHolder(self.named_variables()),
                                              global_step=self.global_step_var, epoch=self.epoch_var)
        if not self._has_own_run_step() and getattr(self, "train_op", None) is None:
            raise NotImplementedError(f"{type(self).__name__}: set `self.train_op` while building the graph, or "
                                      "implement `run_step()` (as in tensorpack).")
        self.step_runner = self._make_step_runner()
        self._finalized = True
        logger.info("%s: graph built, %d trainable variables, %s parameters; %d tower(s); statistics: %s.",
                    type(self).__name__, len(self.trainable_variables),
                    f"{sum(int(np.prod(v.shape)) for v in self.trainable_variables):,}",
                    len([c for c in self._towers if c.is_training]), ", ".join(sorted(self._summaries)) or "none")

    @property
    def trainable_variables(self) -> List[tf.Variable]:
        """The graph's ``TRAINABLE_VARIABLES`` collection (what the TF1 optimizers may update)."""
        return list(self._tf1.collection(_KEYS.TRAINABLE_VARIABLES))

    def named_variables(self) -> Dict[str, tf.Variable]:
        """Every variable of the graph by name (the model's, and the TF1 optimizers' slots)."""
        return self._tf1.named_variables()

    def setup_callbacks(self, callbacks: Sequence[Callback], monitors: Sequence[Callback]) -> None:
        self._finalize()
        super().setup_callbacks(list(self._registered) + list(callbacks), monitors)

    def callback_setup_scope(self, cb: Callback):
        """Where ``cb._setup_graph`` runs (``Callback.setup_graph`` asks): a callback of the program (its
        ``_setup_graph`` not kerastrainer's) sets up in the trainer's graph, as tensorpack's did, so
        that its ``tf.assign`` / ``tf.group`` make ops that ``op.run()`` runs in the main loop;
        kerastrainer's own callbacks set up eagerly."""
        owner = next((k for k in type(cb).__mro__ if "_setup_graph" in k.__dict__), Callback)
        if owner.__module__.split(".")[0] == "kerastrainer":
            return nullcontext()
        return self._callback_graph_scope(type(cb).__name__)

    @contextmanager
    def _callback_graph_scope(self, name: str):
        with self._tf1.building(), tf.name_scope(name):
            yield

    def main_loop(self, steps_per_epoch: int, starting_epoch: int, max_epoch: int) -> None:
        # tensorpack ran the main loop under `with self.sess.as_default()`: a callback's `op.run()`
        # and `tensor.eval()` run in this trainer's graph (no global step counted)
        with tf1_default_session(self.sess):
            super().main_loop(steps_per_epoch, starting_epoch, max_epoch)

    def setup_graph(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} builds its graph in __init__; call train_with_defaults(...) or "
                        "train(...) on it (launch_train_with_config is for the standard trainers).")

    # --- hyper-parameters and predictors ----------------------------------------------------------
    def get_hyperparam_var(self, name: str):
        """A variable of the graph by name; ``'lr'`` is ``'learning_rate'`` (tensorpack's idiom:
        ``tf.get_variable('learning_rate', ...)`` in ``optimizer()``)."""
        named = self.named_variables()
        for cand in ([name, "learning_rate"] if name == "lr" else [name]):
            if cand in named:
                return named[cand]
        raise KeyError(f"No hyper-parameter variable {name!r} in {type(self).__name__}'s graph; its variables "
                       f"include {sorted(n for n in named if '/' not in n)[:10]}. Make it with "
                       "tf.get_variable(name, initializer=..., trainable=False) in the graph.")

    def get_predictor(self, input_names: Sequence[str], output_names: Sequence[str], device: int = 0):
        """A callable: arrays for ``input_names`` -> list of arrays for ``output_names``, computed by an
        inference tower of ``tower_func`` (``TowerContext(is_training=False)``) built in the trainer's
        graph on the current weights, as tensorpack's. Names are tensors of the tower without its
        prefix (``'gen/gen'``, ``'z'``) or inputs of the signature.

        Example::

            pred = trainer.get_predictor(['z'], ['gen/gen'])
            images, = pred(np.random.uniform(-1, 1, (8, 100)).astype('float32'))
        """
        if self._tower_func is None:
            raise RuntimeError("get_predictor() needs trainer.tower_func (set it in __init__, as in tensorpack).")
        tower_name = f"tower-pred-{device}" if device >= 0 else "tower-pred-cpu"
        try:
            handle = self._tower_func.towers[tower_name]
        except KeyError:
            handle = None
        if handle is None:
            from ..graph_builder.utils import tower_device
            dev = tower_device(f"/gpu:{device}") if device >= 0 else "/cpu:0"
            was = self.layer_store.allow_create
            self.layer_store.allow_create = False   # an inference tower uses the training tower's layers
            try:
                with self._tf1.building(), tf.compat.v1.device(dev):
                    inputs = [tf.compat.v1.placeholder(s.dtype, s.shape, name=s.name) for s in self.input_signature]
                    with TowerContext(tower_name, is_training=False):
                        logger.info("Building the predict tower '%s' on %s ...", tower_name, dev)
                        self._tower_func(*inputs)
            finally:
                self.layer_store.allow_create = was
            handle = self._tower_func.towers[tower_name]
        feeds = handle.get_tensors(input_names)
        fetches = handle.get_tensors(output_names)
        fn = self._tf1.function(fetches, feeds)

        def predictor(*arrays):
            if len(arrays) == 1 and len(feeds) != 1 and isinstance(arrays[0], (list, tuple)):
                arrays = arrays[0]
            if len(arrays) != len(feeds):
                raise ValueError(f"The predictor takes {len(feeds)} inputs {list(input_names)}; got {len(arrays)}.")
            values = [tf.convert_to_tensor(np.asarray(a), dtype=f.dtype) for a, f in zip(arrays, feeds)]
            return [o.numpy() for o in fn(*values)]

        predictor.input_names = list(input_names)
        predictor.output_names = list(output_names)
        return predictor

    # --- running ---------------------------------------------------------------------------------
    def _has_own_run_step(self) -> bool:
        return type(self).run_step is not TowerTrainer.run_step

    def run_step(self) -> None:
        """One training step: ``self.hooked_sess.run(self.train_op)`` (tensorpack's default).
        Subclasses may override it (e.g. run several ops with their own schedule)."""
        if getattr(self, "train_op", None) is None:
            raise NotImplementedError("Set `trainer.train_op` or implement `run_step()`.")
        self.hooked_sess.run(self.train_op)

    def _make_step_runner(self) -> StepRunner:
        if self._has_own_run_step():
            return RunStepRunner(self.run_step, self._take_hooked_runs, lambda: self.global_step)
        return TrainOpRunner(self._tf1, self.train_op, self._update_ops, self._summaries, self._tensor_summaries,
                             self.global_step_var)

    def _take_hooked_runs(self) -> List[dict]:
        runs, self._run_outputs = self._run_outputs, []
        return runs

    def _step_fetch_lists(self):
        names = sorted(self._summaries)
        hist_names = sorted(self._tensor_summaries)
        return (names, [self._summaries[n] for n in names], hist_names,
                [self._tensor_summaries[n] for n in hist_names])

    def _run_fetches(self, fetches, feed_dict: dict, hooked: bool):
        if not self._finalized:
            raise RuntimeError("trainer.sess / hooked_sess run only once training has started.")
        flat = tf.nest.flatten(fetches)
        feed_keys = list(feed_dict)
        names, scalars, hist_names, hists = self._step_fetch_lists() if hooked else ([], [], [], [])
        extra_ops = self._update_ops if hooked else []
        fn = self._tf1.function(list(flat) + extra_ops + scalars + hists, feed_keys)
        feeds = [tf.convert_to_tensor(np.asarray(feed_dict[k]), dtype=self._tf1.resolve(k).dtype) for k in feed_keys]
        outs = fn(*feeds)
        if hooked:
            self.global_step_var.assign_add(1)
            self.global_step += 1
            n = len(flat) + len(extra_ops)
            values = [float(v.numpy()) for v in outs[n:n + len(scalars)]]
            self._run_outputs.append({"scalars": dict(zip(names, values)), "step": self.global_step - 1,
                                      "hists": dict(zip(hist_names, outs[n + len(scalars):]))})
        results = [None if o is None else o.numpy() for o in outs[:len(flat)]]
        return tf.nest.pack_sequence_as(fetches, results)

    def train_with_defaults(self, _sentinel=None, **kwargs) -> None:
        """tensorpack's ``train_with_defaults`` (keyword arguments only)."""
        if _sentinel is not None:
            raise TypeError("train_with_defaults takes keyword arguments only (as in tensorpack).")
        self._finalize()
        super().train_with_defaults(**kwargs)


class _VariableHolder(tf.Module):
    """The trackable root of a custom trainer's variables (the ``model`` of its ``checkpoint``)."""

    def __init__(self, named: Dict[str, tf.Variable]):
        super().__init__(name="tower_trainer_variables")
        self.named = dict(named)


class SingleCostTrainer(TowerTrainer):
    """Base class of trainers of one cost (tensorpack's): ``setup_graph(input_signature, input,
    get_cost_fn, get_opt_fn)`` builds the graph through the subclass's
    ``_setup_graph(input, get_cost_fn, get_opt_fn)`` (TF1 code, returning callbacks).
    ``setup_graph(model, input)`` (what ``launch_train_with_config`` calls) takes a ModelDesc:
    its ``build_graph`` and its ``optimizer()`` as written (a ``tf.compat.v1.train`` optimizer).

    Example::

        class MySimpleTrainer(SingleCostTrainer):
            def _setup_graph(self, input, get_cost_fn, get_opt_fn):
                with TowerContext('', is_training=True):
                    grads = self._make_get_grad_fn(input, get_cost_fn, get_opt_fn)()
                self.train_op = get_opt_fn().apply_gradients(grads, name='train_op')
                return []

        trainer = MySimpleTrainer()
        trainer.setup_graph(model.get_input_signature(), QueueInput(df), model.build_graph, model.optimizer)
        trainer.train_with_defaults(steps_per_epoch=100, max_epoch=2)
    """

    COLOCATE_GRADIENTS_WITH_OPS = True
    GATE_GRADIENTS = False
    AGGREGATION_METHOD = tf.AggregationMethod.DEFAULT
    XLA_COMPILE = False

    def setup_graph(self, input_signature, input, get_cost_fn: Optional[Callable] = None,   # noqa: A002
                    get_opt_fn: Optional[Callable] = None) -> None:
        if get_cost_fn is None and get_opt_fn is None:   # setup_graph(model, input), every trainer's form
            model = model_of_functions(type(self).__name__, input_signature, None, None)
            if not hasattr(model, "build_graph"):
                raise TypeError(f"{type(self).__name__}.setup_graph(model, input) takes a ModelDesc; got "
                                f"{type(model).__name__}.")
            input_signature, get_cost_fn, get_opt_fn = model.get_input_signature(), model.build_graph, model.optimizer
        model_of_functions(type(self).__name__, input_signature, get_cost_fn, get_opt_fn)   # both functions
        if self.XLA_COMPILE:
            raise ValueError(f"{type(self).__name__}.XLA_COMPILE: TF1's xla.compile has no TF2 counterpart for "
                             "graph code; use the standard trainers with jit_compile=True.")
        tower_func = TowerFunc(get_cost_fn, input_signature)
        get_opt_fn = functools.lru_cache(maxsize=None)(get_opt_fn)
        with self._building(candidates=[input]):
            self.tower_func = tower_func
            input.setup(input_signature)
            cbs = self._setup_graph(input, tower_func, get_opt_fn)
        self.register_callback(cbs or [])

    def _setup_graph(self, input, get_cost_fn, get_opt_fn):   # noqa: A002
        """Build the training graph (set ``self.train_op``); return a list of callbacks."""
        raise NotImplementedError

    def _make_get_grad_fn(self, input, get_cost_fn, get_opt_fn) -> Callable[[], list]:   # noqa: A002
        """A function that, called in a training TowerContext, builds the tower on the input's
        tensors and returns its ``[(gradient, variable)]`` (tensorpack's)."""
        def get_grad_fn():
            ctx = get_current_tower_context()
            inputs = input.get_input_tensors()
            cost = get_cost_fn(*inputs)
            if not isinstance(cost, tf.Tensor) or cost.shape.rank != 0:
                raise ValueError(f"The tower function must return a scalar cost; got {cost!r}.")
            if ctx is None or not ctx.is_training:
                return None
            varlist = list(self._tf1.collection(_KEYS.TRAINABLE_VARIABLES))
            opt = get_opt_fn()
            if hasattr(opt, "compute_gradients"):
                grads = opt.compute_gradients(cost, var_list=varlist, gate_gradients=self.GATE_GRADIENTS,
                                              colocate_gradients_with_ops=self.COLOCATE_GRADIENTS_WITH_OPS,
                                              aggregation_method=self.AGGREGATION_METHOD)
            else:   # a Keras optimizer: gradients of the graph
                grads = list(zip(tf.gradients(cost, varlist), varlist))
            return [(g, v) for g, v in grads if g is not None]
        return get_grad_fn
