"""The import graph of kerastrainer: no cycles, and each layer imports only what is below it.

The graph is read from the source (``ast``), not by importing: one node per module, one
edge per ``import`` / ``from ... import`` of a kerastrainer module, at the top of a file or
inside a function alike (a function-level import made only to dodge a cycle is still the
cycle). ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to
``pkg`` (its ``__init__``). Imports under ``if TYPE_CHECKING:`` never run and are left out;
``importlib.import_module`` calls (the lazy star-exports of ``kerastrainer/__init__.py``) are
not imports of a module by name and are not read either.

The layers (docs/internals.md, "Layers and the import rule"):
``utils`` <- ``dataflow`` <- ``tfutils``, ``callbacks``, ``input_source``, ``lms``, ``models``
<- ``train`` <- ``predict``, ``keras``; ``compat`` builds on the core.
"""
import ast
import os
from collections import defaultdict

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PKG = "kerastrainer"

# Modules that only re-export names at a tensorpack (or keras_experiments) path. Their edges
# are left out of the package-level check: the path is tensorpack's, not a layering choice.
# They must hold no logic (checked below). A module-level cycle through one of them still fails.
ALIAS_MODULES = {
    "kerastrainer.tfutils.argscope": "tensorpack.tfutils.argscope -> models/arg_scope.py",
    "kerastrainer.tfutils.export": "tensorpack.tfutils.export -> predict/export.py",
    "kerastrainer.tfutils.common": "tensorpack.tfutils.common -> tfutils/global_step.py, tfutils/tensors.py",
    "kerastrainer.callbacks.summary": "tensorpack.callbacks.summary -> callbacks/accepted.py, callbacks/steps.py",
    "kerastrainer.contrib.keras": "tensorpack.contrib.keras -> compat/keras_callback.py, keras/",
    "kerastrainer.dataflow.imgaug.transform": "tensorpack's imgaug.transform -> _transforms.py, base.py",
    "kerastrainer.utils.cluster": "the documented path of the cluster helpers -> _cluster_env.py, logger.py, "
                                 "dataflow/shard.py",
    "kerastrainer.utils.serialize": "tensorpack.utils.serialize -> dataflow/wire.py",
    "kerastrainer.models.common": "tensorpack.models.common -> registry.py, _shape_log.py, tflayer.py",
    "kerastrainer.input_source.input_source": "tensorpack.input_source.input_source -> the source modules",
    "kerastrainer.input_source.input_source_base": "tensorpack.input_source.input_source_base -> base.py, remap.py",
    "kerastrainer.libinfo": "tensorpack.libinfo -> _version.py",
    "kerastrainer.callbacks.stats": "tensorpack.callbacks.stats -> callbacks/graph.py, callbacks/misc.py",
    "kerastrainer.graph_builder.model_desc": "tensorpack.graph_builder.model_desc -> train/model_desc.py",
    "kerastrainer.train.utility": "tensorpack.train.utility -> graph_builder/utils.py, graph_builder/distributed.py",
    "kerastrainer.utils.compatible_serialize": "tensorpack.utils.compatible_serialize -> utils/serialize.py",
    "kerastrainer.compat.tensor_spec": "tensorpack.compat.tensor_spec -> tf.TensorSpec",
    "kerastrainer.tfutils.varmanip": "tensorpack.tfutils.varmanip -> tfutils/checkpoint_files.py, checkpoint_read.py, "
                                     "variable_values.py",
}

# The core never imports compat/ (the TF1 translations): compat registers into the core's hooks
# (tfutils/extensions.py: where a tower is called, where ModelDesc.optimizer() is read, where
# training is launched), and the core loads it by the name in extensions.EXTENSIONS, not by an
# import. Names at tensorpack paths in the core (tfutils.gradproc, tfutils.optimizer,
# callbacks.summary) are implemented in the core; compat's old paths re-export them.
# This set is empty, and must stay so; a new edge fails.
KNOWN_CORE_TO_COMPAT = set()

# utils/ imports nothing above it; utils.cluster, the documented path of shard_dataflow /
# ShardedDataFlow (dataflow/shard.py), is an alias module (above). Keep this set empty.
UTILS_REEXPORTS = set()

# Packages that may import train/ (besides train/ itself); examples/ and bench/ are outside.
IMPORTERS_OF_TRAIN = {"keras", "predict"}

# The order of the core's subpackages (docs/internals.md): each imports only lower ranks.
# ``_internals`` (the fence around Keras/TF internals, one package) is below everything.
LAYERS = {"_internals": -1, "utils": 0, "dataflow": 1, "tfutils": 2, "callbacks": 3, "input_source": 4, "lms": 4,
          "models": 5, "train": 6, "predict": 7, "keras": 7}


def _module_files():
    mods = {}
    root = os.path.join(REPO, PKG)
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
        for f in filenames:
            if not f.endswith(".py"):
                continue
            path = os.path.join(dirpath, f)
            name = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
            is_pkg = name.endswith(".__init__")
            if is_pkg:
                name = name[: -len(".__init__")]
            mods[name] = (path, is_pkg)
    return mods


def _known(name, mods):
    while name not in mods and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


def _targets(node, module, is_pkg, mods):
    if isinstance(node, ast.Import):
        return [_known(a.name, mods) for a in node.names if a.name.split(".")[0] == PKG]
    if node.level:
        base = module.split(".") if is_pkg else module.split(".")[:-1]
        base = base[: len(base) - (node.level - 1)]
        src = ".".join(base + ([node.module] if node.module else []))
    else:
        src = node.module or ""
        if src.split(".")[0] != PKG:
            return []
    return [f"{src}.{a.name}" if f"{src}.{a.name}" in mods else _known(src, mods) for a in node.names]


def _is_type_checking(node):
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _build_graph():
    """``{module: {imported module: [(line, 'top' | 'function')]}}`` and ``{module: ast}``."""
    mods = _module_files()
    graph, trees = {}, {}
    for module, (path, is_pkg) in mods.items():
        with open(path, encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename=path)
        trees[module] = tree
        edges = defaultdict(list)

        def visit(node, in_function):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.If) and _is_type_checking(child):
                    for sub in child.orelse:
                        visit(ast.Module(body=[sub], type_ignores=[]), in_function)
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    for target in _targets(child, module, is_pkg, mods):
                        where = (child.lineno, "function" if in_function else "top")
                        if target != module and where not in edges[target]:
                            edges[target].append(where)
                visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                ast.Lambda)))

        visit(tree, False)
        graph[module] = dict(edges)
    return graph, trees


GRAPH, TREES = _build_graph()


def _package(module):
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _edges():
    for src, targets in GRAPH.items():
        for dst, where in targets.items():
            yield src, dst, where


def _cycles(graph):
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, it = work[-1]
            advanced = False
            for nxt in it:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.add(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _describe(edges):
    return "\n".join(f"  {src} -> {dst} (line {', '.join(f'{ln} {kind}' for ln, kind in where)})"
                     for src, dst, where in sorted(edges))


def test_the_graph_is_read():
    # a resolver that silently found nothing would make every test below pass
    assert len(GRAPH) > 150
    assert "kerastrainer.utils.logger" in GRAPH["kerastrainer.dataflow.common"]
    assert "kerastrainer.tfutils.layer_store" in GRAPH["kerastrainer.tfutils.tower"]
    assert any(kind == "function" for _, _, where in _edges() for _, kind in where)


def test_no_import_cycles_between_modules():
    cycles = _cycles({m: set(t) for m, t in GRAPH.items()})
    report = []
    for comp in cycles:
        report.append(_describe([(s, d, w) for s, d, w in _edges() if s in comp and d in comp]))
    assert not cycles, "import cycles (break them; a function-level import does not):\n" + "\n\n".join(report)


def test_no_import_cycles_between_packages():
    allowed = KNOWN_CORE_TO_COMPAT | UTILS_REEXPORTS
    graph, kept = defaultdict(set), []
    for src, dst, where in _edges():
        a, b = _package(src), _package(dst)
        if a and b and a != b and src not in ALIAS_MODULES and (src, dst) not in allowed:
            graph[a].add(b)
            kept.append((src, dst, where))
    cycles = _cycles(graph)
    report = [_describe([(s, d, w) for s, d, w in kept if _package(s) in c and _package(d) in c]) for c in cycles]
    assert not cycles, "subpackages import each other:\n" + "\n\n".join(report)


def test_subpackages_import_only_downward():
    allowed = KNOWN_CORE_TO_COMPAT | UTILS_REEXPORTS
    bad = [(s, d, w) for s, d, w in _edges()
           if _package(s) in LAYERS and _package(d) in LAYERS and _package(s) != _package(d)
           and LAYERS[_package(d)] >= LAYERS[_package(s)] and s not in ALIAS_MODULES and (s, d) not in allowed]
    assert not bad, "imports against the order of the layers (LAYERS):\n" + _describe(bad)


def test_the_fence_imports_nothing_of_ours():
    fence = [m for m in GRAPH if _package(m) == "_internals"]
    assert "kerastrainer._internals" in fence and len(fence) > 1
    bad = [(s, d, w) for s, d, w in _edges() if s in fence and _package(d) != "_internals"]
    assert not bad, "the fence imports kerastrainer modules outside it:\n" + _describe(bad)


def test_utils_imports_nothing_above_it():
    bad = [(s, d, w) for s, d, w in _edges()
           if _package(s) == "utils" and _package(d) not in ("utils", "_internals")
           and s not in ALIAS_MODULES and (s, d) not in UTILS_REEXPORTS]
    assert not bad, "utils/ imports a layer above it:\n" + _describe(bad)


def test_dataflow_imports_only_utils():
    bad = [(s, d, w) for s, d, w in _edges()
           if _package(s) == "dataflow" and _package(d) not in ("dataflow", "utils")]
    assert not bad, "dataflow/ imports something of ours besides utils/:\n" + _describe(bad)


def _imports_tf_at_load(tree):
    for node in tree.body:
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        if any(n.split(".")[0] in ("tensorflow", "keras") for n in names):
            return True
    return False


def test_dataflow_uses_only_the_tensorflow_free_part_of_utils():
    reached, todo = set(), [m for m in GRAPH if _package(m) == "dataflow"]
    while todo:
        m = todo.pop()
        for dst, where in GRAPH[m].items():
            if dst not in reached and any(kind == "top" for _, kind in where):
                reached.add(dst)
                todo.append(dst)
    bad = sorted(m for m in reached if _package(m) == "utils" and _imports_tf_at_load(TREES[m]))
    assert not bad, f"dataflow/ loads utils modules that import TensorFlow at load: {bad}"


def test_only_keras_and_predict_import_train():
    bad = [(s, d, w) for s, d, w in _edges()
           if _package(d) == "train" and _package(s) not in IMPORTERS_OF_TRAIN | {"train"} and s not in ALIAS_MODULES]
    assert not bad, "train/ is imported from below it:\n" + _describe(bad)


def test_the_core_never_imports_compat():
    assert not KNOWN_CORE_TO_COMPAT, "no core module may import compat/"
    bad = [(s, d, w) for s, d, w in _edges()
           if _package(d) == "compat" and _package(s) not in ("compat", "contrib")]
    assert not bad, ("the core imports compat/ (which builds on it); register into a hook of "
                     "tfutils/extensions.py instead:\n" + _describe(bad))


def _holds_logic(tree):
    for i, node in enumerate(tree.body):
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue  # the docstring
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                and (node.targets[0].id == "__all__" or isinstance(node.value, (ast.Name, ast.Attribute)))):
            continue  # __all__, or another name for an imported object
        return f"line {node.lineno}: {type(node).__name__}"
    return None


@pytest.mark.parametrize("module", sorted(ALIAS_MODULES))
def test_alias_modules_hold_no_logic(module):
    assert module in TREES, f"{module} is listed in ALIAS_MODULES but does not exist"
    logic = _holds_logic(TREES[module])
    assert logic is None, f"{module} is listed as an alias module but holds logic ({logic})"


# --- one fit loop, one step interface ----------------------------------------------------------
# The loop's counters: written by the fit loop only (train/loop.py). Elsewhere they are read, or
# given their first value in a constructor. (The hooked session of a custom trainer counts each
# of its runs, as tensorpack's did; a worker reads the restored step after loading weights.)
LOOP_COUNTERS = {"local_step", "last_step_outputs", "last_call_steps", "epoch_num", "loop_completed",
                 "steps_per_epoch", "starting_epoch", "max_epoch"}
COUNTER_WRITERS = {"kerastrainer.train.loop"}
# fields of the same names on other objects: a TrainConfig's starting epoch, decided at launch
OTHER_OBJECTS_FIELDS = {("kerastrainer.train.config", "starting_epoch")}


def _counter_writes():
    found = []
    for module, (path, _) in _module_files().items():
        with open(path) as f:
            tree = ast.parse(f.read())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name == "__init__":
                continue
            for node in ast.walk(fn):
                targets = node.targets if isinstance(node, ast.Assign) else \
                    [node.target] if isinstance(node, (ast.AugAssign, ast.For)) else []
                for t in targets:
                    if isinstance(t, ast.Attribute) and t.attr in LOOP_COUNTERS:
                        found.append((module, fn.name, t.attr, node.lineno))
    return found


def test_only_the_fit_loop_writes_the_loop_counters():
    writes = _counter_writes()
    assert any(m in COUNTER_WRITERS for m, *_ in writes), "the check reads nothing"
    others = [w for w in writes if w[0] not in COUNTER_WRITERS and (w[0], w[2]) not in OTHER_OBJECTS_FIELDS]
    assert not others, f"loop counters written outside the fit loop: {others}"


def test_the_step_runners_share_one_interface():
    from kerastrainer.train.step_runner import FunctionStepRunner, NoOpStepRunner, StepRunner
    from kerastrainer.train.tf1_graph_runner import RunStepRunner, TrainOpRunner

    for cls in (FunctionStepRunner, NoOpStepRunner, TrainOpRunner, RunStepRunner):
        assert issubclass(cls, StepRunner), cls
    # every trainer gets its runner from one hook; no trainer overrides the loop's call
    from kerastrainer.train import base, multiworker, horovod, tower_trainer, trainers  # noqa: F401
    from kerastrainer.train.base import Trainer

    def subclasses(c):
        for s in c.__subclasses__():
            yield s
            yield from subclasses(s)
    for cls in subclasses(Trainer):
        if not cls.__module__.startswith(PKG):
            continue
        for name in ("run_step_call", "_run_main_loop"):
            assert name not in cls.__dict__, f"{cls.__name__}.{name}: the fit loop's, not a trainer's"


def test_the_xla_policy_and_the_step_builder_never_see_the_trainer():
    import inspect

    from kerastrainer.train.train_function import StepSpec, build_train_function
    from kerastrainer.train.xla import XlaPolicy

    for name, fn in inspect.getmembers(XlaPolicy, inspect.isfunction):
        assert "trainer" not in inspect.signature(fn).parameters, f"XlaPolicy.{name} takes the trainer"
    assert list(inspect.signature(build_train_function).parameters) == ["spec"]
    assert "trainer" not in {f.name for f in __import__("dataclasses").fields(StepSpec)}


# --- callbacks see one trainer type ------------------------------------------------------------
# What the built-in callbacks read on their trainer: the names TrainerView declares, read
# directly (the view's defaults stand for what a trainer lacks). One name is optional and probed:
# a trainer that cannot name its variables has a plain checkpoint, which ModelSaver writes as is.
OPTIONAL_TRAINER_NAMES = {"named_variables"}
CALLBACK_MODULES = ("kerastrainer/callbacks", "kerastrainer/lms/as_trainer_callback.py")


def _trainer_reads():
    """(file, name, probed) for every read of the trainer in the callback modules: ``self.trainer.X``,
    ``trainer.X`` / ``tr.X`` (the callbacks' local names for it), ``getattr(<trainer>, 'X', ...)``."""
    def is_trainer(node):
        return (isinstance(node, ast.Attribute) and node.attr == "trainer"
                and isinstance(node.value, ast.Name) and node.value.id == "self") or \
            (isinstance(node, ast.Name) and node.id in ("trainer", "tr"))

    paths = []
    for entry in CALLBACK_MODULES:
        full = os.path.join(REPO, entry)
        if full.endswith(".py"):
            paths.append(full)
        else:
            paths += [os.path.join(full, f) for f in sorted(os.listdir(full)) if f.endswith(".py")]
    reads = []
    for path in paths:
        with open(path) as f:
            tree = ast.parse(f.read())
        name = os.path.relpath(path, REPO)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and is_trainer(node.value):
                reads.append((name, node.attr, False))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                    node.func.id in ("getattr", "hasattr") and len(node.args) >= 2 and is_trainer(node.args[0]) \
                    and isinstance(node.args[1], ast.Constant):
                reads.append((name, node.args[1].value, True))
    return reads


def test_callbacks_read_only_the_trainer_view():
    from kerastrainer.callbacks.trainer_view import TrainerView
    from kerastrainer.train.base import Trainer

    declared = {n for n in dir(TrainerView) if not n.startswith("_")}
    reads = _trainer_reads()
    assert len(reads) > 30, "the check reads nothing"
    outside = sorted({(f, n) for f, n, _ in reads if n not in declared | OPTIONAL_TRAINER_NAMES})
    assert not outside, f"callbacks read trainer attributes TrainerView does not declare: {outside}"
    probes = sorted({(f, n) for f, n, probed in reads if probed and n not in OPTIONAL_TRAINER_NAMES})
    assert not probes, f"callbacks probe the trainer with getattr/hasattr: {probes}"
    assert issubclass(Trainer, TrainerView)
