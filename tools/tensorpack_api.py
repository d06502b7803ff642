#!/usr/bin/env python
"""tensorpack 0.11's public API, read from its sources, checked against kerastrainer.

tensorpack declares its API in the ``__all__`` of each module. Its package ``__init__`` files
build theirs at import time: a loop over the package's files that imports each submodule and
copies its ``__all__`` (or, where it has none, its ``dir()``), ``STATICA_HACK`` blocks that never
run, ``__all__.extend([...])`` of submodule names. The top-level ``tensorpack`` has no ``__all__``:
``from tensorpack import *`` gives its public globals. This tool finds all of that without
installing tensorpack: it parses every module with ``ast`` and runs the module-level statements
that build namespaces in a small interpreter with Python's import semantics (``sys.modules``,
a submodule bound on its parent when first loaded, ``from m import *`` honouring ``m.__all__``).
What cannot be known statically (the value of ``tf.foo``, a call to a function that does not
touch ``__all__``) is an opaque value; a statement that would change ``__all__`` under a
condition the interpreter cannot decide is an error, never a guess. tensorpack's optional
dependencies (TensorFlow, OpenCV, zmq, lmdb, ...) count as installed.

Usage::

    # the list, from a source tree (a directory holding tensorpack/) or a git mirror at a tag
    python tools/tensorpack_api.py /work/.mirror/tensorpack+tensorpack/repo@v0.11 \\
        --json tests/tensorpack_api.json --md docs/tensorpack-api.md

    # the same list, from the checked-in JSON (no tensorpack sources needed), statuses refreshed
    python tools/tensorpack_api.py --from-json tests/tensorpack_api.json \\
        --json tests/tensorpack_api.json --md docs/tensorpack-api.md

Each entry: ``module`` (tensorpack's), ``name``, ``status``, ``note``. The status is read from
kerastrainer (imported) at ``kerastrainer.<same path>``:

- ``ok``: the name resolves there and does what tensorpack's does.
- ``warns``: resolves, and warns when used (a knob without TF2 meaning), then carries on.
- ``raises``: resolves; a TF1-only concept: using it raises ``TF2UnsupportedError`` whose
  message names the TF2 way (the note is that message's advice).
- ``missing``: does not resolve; its home is a module another change owns (the note says what
  it needs).
- ``not-api``: a name Python's rules put in a star-export that is no API: a third-party module
  that a tensorpack module imported (listed by a ``dir()`` fallback), or tensorpack's
  ``STATICA_HACK`` flag.

``raises``/``warns`` come from the object itself (``utils/tf1_only.py`` marks them); notes of
other entries are kept from the JSON given (``--json`` when it exists), new ones get a default.
"""
import argparse
import ast
import importlib
import json
import os
import subprocess
import sys
from collections import Counter

TOP = "tensorpack"
NOT_API_NAMES = {
    "STATICA_HACK": "tensorpack's flag that hides its star-imports from static analysers; not API",
}
# tensorpack/dataflow/dataset/places.py has no __all__: dataset/__init__ copies its dir(), which
# holds what places.py imported. The third-party modules are caught by the rule; these two too.
_DIR_FALLBACK = ("imported by tensorpack's dataset/places.py (no __all__) and listed by dataset/__init__'s "
                 "dir() fallback; not API (the name lives at {0})")
NOT_API_PAIRS = {
    ("tensorpack.dataflow.dataset", "logger"): _DIR_FALLBACK.format("kerastrainer.utils.logger"),
    ("tensorpack.dataflow.dataset", "RNGDataFlow"): _DIR_FALLBACK.format("kerastrainer.dataflow.RNGDataFlow"),
}
MISSING_NEEDS: dict = {}   # (module, name) -> what it needs: none left

# tensorpack 0.11's modules that export no name (`__all__ = []`, or none: imported by path only),
# so the lists above never see them; each is at kerastrainer's same path (tests/test_tensorpack_api_met.py).
# Left out: tests (`*_test`, `unit_tests`) and private modules (`models._old_batch_norm`).
MODULES_WITHOUT_NAMES = {
    "tensorpack.callbacks.stats": "alias: DumpParamAsImage, InjectShell, SendStat (callbacks/graph.py, misc.py)",
    "tensorpack.compat.tensor_spec": "alias: TensorSpec is tf.TensorSpec (TF 2 has it)",
    "tensorpack.graph_builder.distributed": "the between-graph builders raise TF2UnsupportedError (no "
                                            "tf.train.Server sessions in TF2): MultiWorkerTrainer, HorovodTrainer",
    "tensorpack.graph_builder.model_desc": "alias: ModelDesc, ModelDescBase (train/model_desc.py)",
    "tensorpack.models.shape_utils": "StaticDynamicShape, StaticDynamicAxis, StaticLazyAxis, DynamicLazyAxis",
    "tensorpack.models.utils": "VariableHolder, disable_autograph",
    "tensorpack.tfutils.distributed": "get_distributed_session_creator raises TF2UnsupportedError (no sessions)",
    "tensorpack.train.utility": "alias: LeastLoadedDeviceSetter; override_to_local_variable and "
                                "OverrideToLocalVariable raise (between-graph training only)",
    "tensorpack.utils.compatible_serialize": "alias: loads, dumps (utils/serialize.py)",
    "tensorpack.utils.debug": "enable_call_trace",
    "tensorpack.utils.develop": "create_dummy_class, create_dummy_func, building_rtfd, log_deprecated, deprecated, "
                                "HIDE_DOC, LazyLoader",
    "tensorpack.utils.naming": "GLOBAL_STEP_INCR_OP_NAME, MOVING_SUMMARY_OPS_KEY",
}


# --------------------------------------------------------------------------- sources
class SourceTree:
    """The ``.py`` files of tensorpack: from a directory, or from a git repository at a ref.

    Example::

        tree = SourceTree.open("/work/.mirror/tensorpack+tensorpack/repo@v0.11")
        tree.read("tensorpack/__init__.py")
    """

    def __init__(self, files, reader, origin):
        self.files = files  # relative paths, 'tensorpack/...py'
        self._reader = reader
        self.origin = origin

    @classmethod
    def open(cls, spec: str) -> "SourceTree":
        path, _, ref = spec.partition("@")
        if ref:
            out = subprocess.run(["git", "-C", path, "ls-tree", "-r", "--name-only", ref],
                                 check=True, capture_output=True, text=True).stdout
            files = {f for f in out.splitlines() if f.startswith(TOP + "/") and f.endswith(".py")}

            def read(rel):
                return subprocess.run(["git", "-C", path, "show", f"{ref}:{rel}"], check=True,
                                      capture_output=True, text=True).stdout
            return cls(files, read, spec)
        path = os.path.abspath(path)
        if os.path.basename(path) == TOP and os.path.isfile(os.path.join(path, "__init__.py")):
            path = os.path.dirname(path)
        if not os.path.isfile(os.path.join(path, TOP, "__init__.py")):
            raise SystemExit(f"{spec}: no {TOP}/__init__.py there (give a directory holding "
                             f"{TOP}/, or a git repository as PATH@TAG)")
        files = set()
        for dirpath, dirnames, filenames in os.walk(os.path.join(path, TOP)):
            dirnames[:] = [d for d in dirnames if not d.startswith((".", "__pycache__"))]
            files |= {os.path.relpath(os.path.join(dirpath, f), path).replace(os.sep, "/")
                      for f in filenames if f.endswith(".py")}

        def read(rel):
            with open(os.path.join(path, rel), encoding="utf-8") as f:
                return f.read()
        return cls(files, read, spec)

    def read(self, rel: str) -> str:
        return self._reader(rel)

    def module_file(self, modname):
        """``(relative path, is_package)`` of a tensorpack module, or None."""
        base = modname.replace(".", "/")
        if base + "/__init__.py" in self.files:
            return base + "/__init__.py", True
        if base + ".py" in self.files:
            return base + ".py", False
        return None


# --------------------------------------------------------------------------- values
class Opaque:
    """A value the interpreter does not model (a class, a TF object, a call's result)."""

    def __init__(self, what="value"):
        self.what = what

    def __repr__(self):
        return f"<{self.what}>"


class External:
    """A module outside tensorpack (``os``, ``numpy``); ``os.path`` and ``pkgutil`` work."""

    def __init__(self, name):
        self.name = name

    def attr(self, interp, name):
        full = f"{self.name}.{name}"
        if full in ("os.path",):
            return External(full)
        fn = interp.builtin(full)
        return fn if fn is not None else Opaque(full)


class Module:
    """A tensorpack module being (or having been) run: its namespace."""

    def __init__(self, name, path, is_pkg):
        self.name, self.path, self.is_pkg = name, path, is_pkg
        self.ns = {"__name__": name, "__file__": path, "__doc__": None, "__package__": None,
                   "__loader__": Opaque(), "__spec__": Opaque(), "__builtins__": Opaque()}
        if is_pkg:
            self.ns["__path__"] = [os.path.dirname(path)]


class Function:
    def __init__(self, node, module):
        self.node, self.module = node, module
        self.touches_all = any(isinstance(n, ast.Name) and n.id in ("__all__", "globals", "locals")
                               for n in ast.walk(node))


class Unsupported(Exception):
    """The sources do something to ``__all__`` this interpreter cannot decide."""


class _Continue(Exception):
    pass


class _Return(Exception):
    def __init__(self, value):
        self.value = value


# --------------------------------------------------------------------------- interpreter
class Interpreter:
    """Runs tensorpack's module-level code far enough to know every module's namespace."""

    def __init__(self, tree: SourceTree):
        self.tree = tree
        self.modules = {}  # sys.modules

    # ---- imports
    def import_module(self, name):
        if name in self.modules:
            return self.modules[name]
        if name.split(".")[0] != TOP:
            return External(name)
        parent = None
        if "." in name:
            parent = self.import_module(name.rsplit(".", 1)[0])
        found = self.tree.module_file(name)
        if found is None:
            return None
        mod = Module(name, *found)
        self.modules[name] = mod
        src = self.tree.read(mod.path)
        self.run_block(ast.parse(src, filename=mod.path).body, mod, mod.ns)
        if parent is not None:
            parent.ns[name.rsplit(".", 1)[1]] = mod  # after the child ran, as importlib does
        return mod

    def _resolve(self, mod, level, name):
        if not level:
            return name or ""
        pkg = mod.name if mod.is_pkg else mod.name.rsplit(".", 1)[0]
        for _ in range(level - 1):
            pkg = pkg.rsplit(".", 1)[0]
        return f"{pkg}.{name}" if name else pkg

    def _import_from(self, full, fromlist, mod_of_names):
        """``from full import a, b``: attribute, else submodule (Python's fallback)."""
        target = self.import_module(full)
        out = {}
        for n in fromlist:
            if isinstance(target, Module) and n in target.ns:
                out[n] = target.ns[n]
            elif isinstance(target, Module) and target.is_pkg and self.tree.module_file(f"{full}.{n}"):
                out[n] = self.import_module(f"{full}.{n}")
            elif isinstance(target, Module):
                out[n] = Opaque(f"{full}.{n} (not found)")
            else:
                out[n] = target.attr(self, n) if isinstance(target, External) else Opaque()
        return out

    def star_names(self, mod):
        if not isinstance(mod, Module):
            return {}
        if "__all__" in mod.ns and isinstance(mod.ns["__all__"], list):
            out = {}
            for n in mod.ns["__all__"]:
                if n not in mod.ns and mod.is_pkg and self.tree.module_file(f"{mod.name}.{n}"):
                    self.import_module(f"{mod.name}.{n}")  # a submodule named in __all__
                out[n] = mod.ns.get(n, Opaque(f"{mod.name}.{n} (missing)"))
            return out
        return {k: v for k, v in mod.ns.items() if not k.startswith("_")}

    # ---- statements
    def run_block(self, body, mod, frame):
        for node in body:
            self.run_stmt(node, mod, frame)

    def run_stmt(self, node, mod, frame):
        if isinstance(node, ast.Import):
            for a in node.names:
                target = self.import_module(a.name)
                if a.asname:
                    frame[a.asname] = target
                else:
                    top = a.name.split(".")[0]
                    frame[top] = self.modules.get(top) if top == TOP else External(top)
        elif isinstance(node, ast.ImportFrom):
            full = self._resolve(mod, node.level, node.module)
            if node.names[0].name == "*":
                frame.update(self.star_names(self.import_module(full)))
            else:
                got = self._import_from(full, [a.name for a in node.names], mod)
                for a in node.names:
                    frame[a.asname or a.name] = got[a.name]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            frame[node.name] = Function(node, mod)
        elif isinstance(node, ast.ClassDef):
            frame[node.name] = Opaque(f"class {mod.name}.{node.name}")
        elif isinstance(node, ast.Assign):
            value = self.eval(node.value, mod, frame)
            for t in node.targets:
                self.assign(t, value, mod, frame)
        elif isinstance(node, ast.AnnAssign):
            if node.value is not None:
                self.assign(node.target, self.eval(node.value, mod, frame), mod, frame)
        elif isinstance(node, ast.AugAssign):
            if isinstance(node.target, ast.Name) and node.target.id == "__all__":
                value = self.eval(node.value, mod, frame)
                if not isinstance(value, (list, tuple)) or not isinstance(node.op, ast.Add):
                    raise Unsupported(f"{mod.path}:{node.lineno}: __all__ {type(node.op).__name__}= {value!r}")
                frame["__all__"] = frame["__all__"] + list(value)
            elif isinstance(node.target, ast.Name):
                frame[node.target.id] = Opaque()
        elif isinstance(node, ast.Expr):
            self.eval(node.value, mod, frame)
        elif isinstance(node, ast.If):
            test = self.eval(node.test, mod, frame)
            if isinstance(test, (Opaque, External, Module, Function)):
                if isinstance(test, Opaque):
                    self._undecided(node, mod, frame, "if")
                else:
                    self.run_block(node.body, mod, frame)
            else:
                self.run_block(node.body if test else node.orelse, mod, frame)
        elif isinstance(node, ast.For):
            it = self.eval(node.iter, mod, frame)
            if isinstance(it, (Opaque, External, Module, Function)):
                self._undecided(node, mod, frame, "for")
                return
            for item in list(it):
                self.assign(node.target, item, mod, frame)
                try:
                    self.run_block(node.body, mod, frame)
                except _Continue:
                    continue
        elif isinstance(node, ast.Try):
            # tensorpack's optional dependencies count as installed: the body runs to its end
            self.run_block(node.body, mod, frame)
            self.run_block(node.orelse, mod, frame)
            self.run_block(node.finalbody, mod, frame)
        elif isinstance(node, ast.Delete):
            for t in node.targets:
                if isinstance(t, ast.Subscript) and self._is_globals(t.value):
                    frame_g = mod.ns
                    key = self.eval(t.slice, mod, frame)
                    if key not in frame_g:
                        raise Unsupported(f"{mod.path}:{node.lineno}: del of unbound {key!r}")
                    del frame_g[key]
                elif isinstance(t, ast.Name):
                    frame.pop(t.id, None)
        elif isinstance(node, ast.Continue):
            raise _Continue()
        elif isinstance(node, ast.Return):
            raise _Return(self.eval(node.value, mod, frame) if node.value is not None else None)
        elif isinstance(node, ast.With):
            self.run_block(node.body, mod, frame)
        elif isinstance(node, (ast.Pass, ast.Global, ast.Nonlocal, ast.Assert, ast.Raise, ast.While)):
            if isinstance(node, ast.While) and self._touches_all(node):
                raise Unsupported(f"{mod.path}:{node.lineno}: __all__ changed in a while loop")
        else:
            raise Unsupported(f"{mod.path}:{node.lineno}: statement {type(node).__name__}")

    def _touches_all(self, node):
        return any(isinstance(n, ast.Name) and n.id == "__all__" for n in ast.walk(node))

    def _undecided(self, node, mod, frame, what):
        """A branch or loop the interpreter cannot decide: fine unless it changes ``__all__``."""
        if self._touches_all(node):
            raise Unsupported(f"{mod.path}:{node.lineno}: __all__ changed under an undecidable {what}")
        for sub in ast.walk(node):  # names it may bind, for dir()
            if isinstance(sub, (ast.FunctionDef, ast.ClassDef)):
                frame.setdefault(sub.name, Opaque())
            elif isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
                frame.setdefault(sub.id, Opaque())

    def _is_globals(self, node):
        return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("globals", "locals") and not node.args)

    def assign(self, target, value, mod, frame):
        if isinstance(target, ast.Name):
            frame[target.id] = list(value) if target.id == "__all__" and isinstance(value, tuple) else value
        elif isinstance(target, (ast.Tuple, ast.List)):
            if isinstance(value, (list, tuple)) and len(value) == len(target.elts):
                for t, v in zip(target.elts, value):
                    self.assign(t, v, mod, frame)
            else:
                for t in target.elts:
                    self.assign(t, Opaque(), mod, frame)
        elif isinstance(target, ast.Subscript) and self._is_globals(target.value):
            # locals() at module level is globals(); in tensorpack's functions it is only read
            key = self.eval(target.slice, mod, frame)
            if not isinstance(key, str):
                raise Unsupported(f"{mod.path}:{target.lineno}: globals()[{key!r}]")
            d = mod.ns if target.value.func.id == "globals" or frame is mod.ns else frame
            d[key] = value
        # attributes and other subscripts of opaque objects change no namespace

    # ---- expressions
    def builtin(self, name):
        def dirname(p):
            return os.path.dirname(p) if isinstance(p, str) else Opaque()

        def join(*parts):
            return "/".join(parts) if all(isinstance(p, str) for p in parts) else Opaque()

        def isfile(p):
            return p in self.tree.files if isinstance(p, str) else Opaque()

        def iter_modules(paths):
            out = set()
            for d in paths:
                for f in self.tree.files:
                    head, _, rest = f.partition(d + "/")
                    if head or not rest:
                        continue
                    if "/" not in rest and rest.endswith(".py") and rest != "__init__.py":
                        out.add((rest[:-3], False))
                    elif rest.count("/") == 1 and rest.endswith("/__init__.py"):
                        out.add((rest.split("/")[0], True))
            return [(Opaque("finder"), n, p) for n, p in sorted(out)]

        table = {"os.path.dirname": dirname, "os.path.join": join, "os.path.isfile": isfile,
                 "pkgutil.iter_modules": iter_modules, "iter_modules": iter_modules,
                 "frozenset": lambda x=(): frozenset(x), "set": lambda x=(): set(x),
                 "list": lambda x=(): list(x), "tuple": lambda x=(): tuple(x),
                 "sorted": lambda x: sorted(x), "len": len, "str": str, "print": lambda *a, **k: None}
        return table.get(name)

    def eval(self, node, mod, frame):
        try:
            return self._eval(node, mod, frame)
        except (Unsupported, _Return, _Continue):
            raise
        except Exception:  # anything outside the modelled subset
            return Opaque()

    def _lookup(self, name, mod, frame):
        if name in frame:
            return frame[name]
        if name in mod.ns:
            return mod.ns[name]
        if name in ("True", "False", "None"):
            return {"True": True, "False": False, "None": None}[name]
        fn = self.builtin(name)
        if fn is not None:
            return fn
        if name in ("__import__", "dir", "globals", "locals", "getattr", "hasattr", "isinstance"):
            return ("builtin", name)
        return Opaque(name)

    def _eval(self, node, mod, frame):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self.eval(e, mod, frame) for e in node.elts]
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Name):
            return self._lookup(node.id, mod, frame)
        if isinstance(node, ast.Attribute):
            obj = self.eval(node.value, mod, frame)
            if isinstance(obj, Module):
                if node.attr == "__dict__":
                    return obj.ns
                if node.attr in obj.ns:
                    return obj.ns[node.attr]
                raise AttributeError(node.attr)
            if isinstance(obj, External):
                return obj.attr(self, node.attr)
            if isinstance(obj, (str, list, dict, set, frozenset, tuple)):
                return getattr(obj, node.attr)
            return Opaque()
        if isinstance(node, ast.Subscript):
            obj = self.eval(node.value, mod, frame)
            key = self.eval(node.slice, mod, frame)
            if isinstance(obj, (str, list, tuple, dict)):
                return obj[key]
            return Opaque()
        if isinstance(node, ast.Slice):
            parts = [self.eval(p, mod, frame) if p is not None else None for p in (node.lower, node.upper, node.step)]
            return slice(*parts)
        if isinstance(node, ast.IfExp):
            test = self.eval(node.test, mod, frame)
            if isinstance(test, Opaque):
                return Opaque()
            return self.eval(node.body if test else node.orelse, mod, frame)
        if isinstance(node, ast.BoolOp):
            vals = [self.eval(v, mod, frame) for v in node.values]
            if any(isinstance(v, Opaque) for v in vals):
                return Opaque()
            return all(vals) if isinstance(node.op, ast.And) else any(vals)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            v = self.eval(node.operand, mod, frame)
            return -v if isinstance(v, (int, float)) else Opaque()
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            v = self.eval(node.operand, mod, frame)
            return Opaque() if isinstance(v, Opaque) else not v
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = self.eval(node.left, mod, frame), self.eval(node.comparators[0], mod, frame)
            if isinstance(a, Opaque) or isinstance(b, Opaque):
                return Opaque()
            op = node.ops[0]
            if isinstance(op, ast.In):
                return a in b
            if isinstance(op, ast.NotIn):
                return a not in b
            if isinstance(op, ast.Eq):
                return a == b
            if isinstance(op, ast.NotEq):
                return a != b
            return Opaque()
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            a, b = self.eval(node.left, mod, frame), self.eval(node.right, mod, frame)
            if isinstance(a, (str, list, tuple)) and type(a) is type(b):
                return a + b
            return Opaque()
        if isinstance(node, ast.Call):
            return self._call(node, mod, frame)
        if isinstance(node, ast.Lambda):
            return Opaque("lambda")
        return Opaque()

    def _call(self, node, mod, frame):
        func = node.func
        # list methods on __all__ (and other plain lists)
        if isinstance(func, ast.Attribute):
            owner = self.eval(func.value, mod, frame)
            if isinstance(owner, list) and func.attr in ("append", "extend"):
                arg = self.eval(node.args[0], mod, frame)
                if isinstance(arg, Opaque) or (func.attr == "extend" and not isinstance(arg, (list, tuple))):
                    raise Unsupported(f"{mod.path}:{node.lineno}: {func.attr}({arg!r})")
                getattr(owner, func.attr)(arg)
                return None
            if isinstance(owner, dict) and func.attr == "pop":
                args = [self.eval(a, mod, frame) for a in node.args]
                return owner.pop(*args)
        callee = self.eval(func, mod, frame)
        args = [self.eval(a, mod, frame) for a in node.args]
        kwargs = {k.arg: self.eval(k.value, mod, frame) for k in node.keywords if k.arg}
        if isinstance(callee, tuple) and callee[0] == "builtin":
            return self._builtin_call(callee[1], args, kwargs, mod, frame)
        if isinstance(callee, Function):
            return self.call_function(callee, args, kwargs, node)
        if callable(callee) and not isinstance(callee, type):
            return callee(*args, **kwargs)
        return Opaque(f"call at {mod.path}:{node.lineno}")

    def _builtin_call(self, name, args, kwargs, mod, frame):
        if name == "globals":
            return mod.ns
        if name == "locals":
            return frame
        if name == "dir":
            target = args[0]
            if isinstance(target, Module):
                return sorted(target.ns)
            return Opaque()
        if name == "getattr":
            obj = args[0]
            if isinstance(obj, Module) and args[1] in obj.ns:
                return obj.ns[args[1]]
            return args[2] if len(args) > 2 else Opaque()
        if name == "__import__":
            level = kwargs.get("level", args[4] if len(args) > 4 else 0)
            full = self._resolve(mod, level, args[0])
            # with a package given as globals, __import__('x', level=1) returns the submodule
            return self.import_module(full)
        return Opaque()

    def call_function(self, fn, args, kwargs, node):
        if not fn.touches_all:
            return Opaque(f"result of {fn.node.name}")
        params = [a.arg for a in fn.node.args.args]
        frame = dict(zip(params, args))
        frame.update(kwargs)
        for p, default in zip(reversed(params), reversed(fn.node.args.defaults)):
            frame.setdefault(p, self.eval(default, fn.module, fn.module.ns))
        local = _Locals(frame, fn.module.ns)  # names bound in a function are local to it
        try:
            self.run_block(fn.node.body, fn.module, local)
        except _Return as r:
            return r.value
        return None


class _Locals(dict):
    """A function's local frame: assignments stay local; ``__all__`` and reads fall back to the
    module's globals (tensorpack's helpers mutate the module's ``__all__`` list in place)."""

    def __init__(self, local, module_ns):
        super().__init__(local)
        self._g = module_ns

    def __contains__(self, key):
        return dict.__contains__(self, key) or key in self._g

    def __getitem__(self, key):
        return dict.__getitem__(self, key) if dict.__contains__(self, key) else self._g[key]


# --------------------------------------------------------------------------- the list
def extract(tree: SourceTree):
    """Every (module, name, value) of tensorpack's public API, in the order Python builds it."""
    interp = Interpreter(tree)
    # `from tensorpack import *` right after `import tensorpack`: its public globals then
    top = dict(interp.star_names(interp.import_module(TOP)))
    # the modules a user may import: every file, as Python would load it on an explicit import
    for rel in sorted(tree.files):
        modname = rel[:-3].replace("/", ".")
        if modname.endswith(".__init__"):
            modname = modname[: -len(".__init__")]
        leaf = modname.rsplit(".", 1)[-1]
        if leaf.endswith("_test") or leaf in ("unit_tests",):
            continue
        interp.import_module(modname)
    out = []
    for modname in sorted(interp.modules):
        mod = interp.modules[modname]
        if modname == TOP:
            names = top
        elif isinstance(mod.ns.get("__all__"), list):
            names = interp.star_names(mod)
        else:
            continue
        # sorted: tensorpack.tfutils builds its __all__ from a frozenset (order varies by run)
        for name in sorted(names):
            out.append((modname, name, names[name]))
    return out


def describe(value):
    if isinstance(value, Module):
        return "module " + value.name
    if isinstance(value, External):
        return "external module " + value.name
    return "value"


# --------------------------------------------------------------------------- kerastrainer side
def kerastrainer_path(module, name):
    return "kerastrainer" + module[len(TOP):] + "." + name


def resolve(module, name):
    """The object at ``kerastrainer.<same path>``, or raise LookupError."""
    mod_name = "kerastrainer" + module[len(TOP):]
    try:
        mod = importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        raise LookupError(f"no module {mod_name}") from e
    try:
        return getattr(mod, name)
    except AttributeError:
        pass
    try:  # a submodule named in __all__ (tensorpack.tfutils' 'summary', 'gradproc', ...)
        return importlib.import_module(f"{mod_name}.{name}")
    except ModuleNotFoundError as e:
        raise LookupError(f"{mod_name} has no {name}") from e


def tensorpack_status(obj):
    """``(status, advice)`` that kerastrainer declares on an object (utils/tf1_only.py)."""
    marker = getattr(obj, "__tensorpack_status__", None)
    if isinstance(marker, tuple) and len(marker) == 2:
        return marker
    return None


def classify(entries, old_notes):
    rows = []
    for module, name, value in entries:
        key = (module, name)
        old = old_notes.get(key, {})
        if (name in NOT_API_NAMES or key in NOT_API_PAIRS or isinstance(value, External)
                or old.get("status") == "not-api"):
            note = NOT_API_NAMES.get(name) or NOT_API_PAIRS.get(key) or old.get("note") or (
                f"{describe(value)}, listed by a dir() of a module without __all__; not API")
            rows.append(dict(module=module, name=name, status="not-api", note=note))
            continue
        try:
            obj = resolve(module, name)
        except LookupError:
            note = MISSING_NEEDS.get(key) or (old.get("note") if old.get("status") == "missing" else None)
            rows.append(dict(module=module, name=name, status="missing",
                             note=note or "absent at kerastrainer's path"))
            continue
        declared = tensorpack_status(obj)
        if declared is not None:
            status, note = declared
        else:
            status = "ok"
            note = old.get("note") if old.get("status") == "ok" else None
            note = note or _default_note(obj, module, name)
        rows.append(dict(module=module, name=name, status=status, note=note))
    return rows


def _default_note(obj, module, name):
    home = getattr(obj, "__module__", None)
    if isinstance(obj, type(sys)):
        return f"module {obj.__name__}"
    mod_name = "kerastrainer" + module[len(TOP):]
    if home and home != mod_name and home.startswith("kerastrainer"):
        return f"defined in {home}"
    return "same path"


# --------------------------------------------------------------------------- output
def coverage(rows):
    at_path = sum(r["status"] in ("ok", "warns", "raises") for r in rows)
    api = sum(r["status"] != "not-api" for r in rows)
    top = [r for r in rows if r["module"] == TOP]
    top_at = sum(r["status"] in ("ok", "warns", "raises") for r in top)
    top_api = sum(r["status"] != "not-api" for r in top)
    return dict(names=api, at_path=at_path, top_level=top_api, top_level_at_path=top_at,
                statuses=dict(sorted(Counter(r["status"] for r in rows).items())))


def write_json(rows, path):
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"source": "tensorpack 0.11 (tag v0.11), the __all__ of each module as Python "
                             "builds it; the top-level module's public globals",
                   "generated_by": "tools/tensorpack_api.py",
                   "coverage": coverage(rows), "entries": rows}, f, indent=1)
        f.write("\n")


def write_md(rows, path):
    cov = coverage(rows)
    lines = ["# tensorpack 0.11's public API in kerastrainer", "",
             "<!-- generated by tools/tensorpack_api.py from tests/tensorpack_api.json; do not edit -->", "",
             "Every name of tensorpack 0.11's `__all__` lists (each module's, as Python builds it, and the "
             "top-level `from tensorpack import *`), looked up at the same path in kerastrainer "
             "(`tensorpack.callbacks.param.X` -> `kerastrainer.callbacks.param.X`). "
             "`tests/test_tensorpack_api.py` holds it.", "",
             f"{cov['at_path']} of {cov['names']} names resolve at their path "
             f"({cov['top_level_at_path']} of {cov['top_level']} top-level names).", "",
             "| status | meaning |", "| --- | --- |",
             "| ok | works with tensorpack's semantics |",
             "| warns | accepted; warns that the knob has no TF2 meaning, then carries on |",
             "| raises | a TF1-only concept: exists, and raises `TF2UnsupportedError` naming the TF2 way |",
             "| missing | not there yet (its home is being changed elsewhere) |",
             "| not-api | put in a star-export by Python's rules, but no API |", ""]
    raising = {}
    for r in rows:   # one row per name: the same object is re-exported at several paths
        if r["status"] == "raises":
            raising.setdefault(r["name"], []).append(r)
    if raising:
        lines += ["## The names that still raise", "",
                  f"{len(raising)} names (at {sum(len(v) for v in raising.values())} paths) stand for what TF2 "
                  "cannot give a program: a TF1 `Session` or session hook handed to the user's code, a "
                  "trainer without a TF2 engine, a model format whose reader needs a download. Each raises "
                  "`TF2UnsupportedError` at the call, naming the way out.", "",
                  "| name | at | why, and the way out |", "| --- | --- | --- |"]
        for name in sorted(raising):
            rs = raising[name]
            at = ", ".join(f"`{r['module']}`" for r in rs)
            note = rs[0]["note"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{name}` | {at} | {note} |")
        lines.append("")
    lines += ["## Modules that export no name", "",
              "tensorpack 0.11's modules imported by path only (`__all__ = []` or none), at the same path:", "",
              "| module | what it holds in kerastrainer |", "| --- | --- |"]
    lines += [f"| `{m}` | {note} |" for m, note in sorted(MODULES_WITHOUT_NAMES.items())]
    lines.append("")
    by_mod = {}
    for r in rows:
        by_mod.setdefault(r["module"], []).append(r)
    for module in sorted(by_mod):
        lines += [f"## `{module}`", "", "| name | status | note |", "| --- | --- | --- |"]
        for r in by_mod[module]:
            note = r["note"].replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{r['name']}` | {r['status']} | {note} |")
        lines.append("")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))


def load_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)["entries"]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("source", nargs="?", help="tensorpack sources: a directory holding tensorpack/, "
                                             "or a git repository as PATH@TAG")
    p.add_argument("--from-json", help="take the (module, name) list from this JSON instead")
    p.add_argument("--json", help="write the list here (notes of entries already there are kept)")
    p.add_argument("--md", help="write the markdown tables here")
    p.add_argument("--list", action="store_true", help="print module<TAB>name, kerastrainer not imported")
    args = p.parse_args(argv)
    if bool(args.source) == bool(args.from_json):
        p.error("give the tensorpack sources or --from-json")
    if args.source:
        entries = extract(SourceTree.open(args.source))
    else:
        entries = [(r["module"], r["name"], None) for r in load_json(args.from_json)]
    if args.list:
        for module, name, value in entries:
            print(f"{module}\t{name}\t{describe(value)}")
        return 0
    old = {}
    if args.json and os.path.exists(args.json):
        old = {(r["module"], r["name"]): r for r in load_json(args.json)}
    if args.from_json:
        entries = [(m, n, External(n) if old.get((m, n), {}).get("status") == "not-api" else v)
                   for m, n, v in entries]
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    rows = classify(entries, old)
    if args.json:
        write_json(rows, args.json)
    if args.md:
        write_md(rows, args.md)
    print(json.dumps(coverage(rows)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
