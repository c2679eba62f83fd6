"""The rules of the codebase, checked on the source text (ast; nothing is imported or run).

1. `dp_synth_assets/core/` imports no Dagster (`dagster`, `dagster_*`), directly or through any
   package module it imports, its parent packages' `__init__` included (importing
   `dp_synth_assets.core.x` runs `dp_synth_assets/__init__.py` first).
2. Every SQL statement comes from `sql/`: no SQL statement in a Python string literal of the
   package (plain, f-string or concatenated), docstrings excepted, beyond the transaction
   controls in `ALLOWED_STATEMENTS`. Expression fragments (`CAST(x AS T)`, `x IS NULL`) are not
   statements and stay where they are.
3. The package (`dp_synth_assets/`, and `resources/`, installed as `dp_synth_assets.resources`)
   never imports `bench/`, `tests/`, a root module such as `definitions.py`, or `resources` as a
   top-level name (no such package is installed).
4. No import circles among the package's modules.
5. `dp_synth_assets/core/` writes no files (the artifact store, `infra/store.py`, does, with its
   `atomic_write` / `atomic_target` / `exclusive_lock`): no open for writing, write_text /
   write_bytes, os.replace / rename, np.save* in the core.
6. `evaluation/` reaches no Dagster, and in `checks/` only `asset_checks.py` does.
7. The core is pure: no module of `dp_synth_assets/core/` imports, directly or through any
   package module it imports, an I/O module (`IO_MODULES`: database clients such as sqlite3,
   psycopg, pyspark; file locks such as fcntl, filelock; subprocess, socket and the network;
   file systems and temporary files) or the infrastructure package `dp_synth_assets/infra/`.
8. The core reads no files: no open(), Path.read_text / read_bytes / exists / stat / iterdir /
   glob, os file-system calls (listdir, stat, walk, ...), glob or np.load of a file, outside the
   modules `CORE_FILE_READERS` names with the reason they still read.
9. Every plug-in registry entry names a module that imports and a frozen settings model.

Every import statement counts, at module level or deferred inside a function (or under
`TYPE_CHECKING`): a deferred import hides a circle from the interpreter, not from the layering,
and a deferred `import dagster` still runs when the function does. `importlib.import_module`
with a constant name counts too; a computed name (the method registry's
`import_module(f"{__name__}.{module}")`) cannot be followed and is not checked.

Each rule is one function returning its violations as `file:line: what`, tested on the
repository and on a small module tree with a planted violation (so each test can fail).
"""

import ast
import functools
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# dotted package -> its folder: the top-level resources/ is installed as dp_synth_assets.resources
# (dp_synth_assets/resources links to it; the scan does not follow the link, so no module counts
# twice). A plain name stands for a package in the folder of that name.
PACKAGES = {"dp_synth_assets": "dp_synth_assets", "dp_synth_assets.resources": "resources"}
CORE = "dp_synth_assets.core"
DAGSTER = re.compile(r"^dagster(_\w+)?$")
# and every root module (definitions.py); `resources` is the top-level folder, which the package
# imports as dp_synth_assets.resources (no top-level `resources` is installed)
OUTSIDE_THE_PACKAGE = ("bench", "tests", "resources")

# Transaction control: the same text in DuckDB and SQLite, and no query.
ALLOWED_STATEMENTS = frozenset({"BEGIN TRANSACTION", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK"})

_STATEMENT_START = re.compile(
    r"^[\s(]*(SELECT|WITH|INSERT|UPDATE|DELETE|REPLACE|UPSERT|MERGE|CREATE|DROP|ALTER|TRUNCATE|"
    r"DESCRIBE|SUMMARIZE|SHOW|EXPLAIN|COPY|EXPORT|IMPORT|ATTACH|DETACH|LOAD|INSTALL|PRAGMA|SET|"
    r"RESET|USE|CALL|VALUES|FROM)\s+\S"  # a keyword alone ("UPDATE") is a word, not a statement
    r"|^\s*(BEGIN|COMMIT|ROLLBACK|VACUUM|CHECKPOINT|ANALYZE)\b")
_STATEMENT_ANYWHERE = [
    re.compile(r"\bSELECT\b.*\bFROM\b", re.S),  # upper case: prose says "select ... from" too
    re.compile(r"\b(DESCRIBE|SUMMARIZE|PRAGMA)\s+\S", re.S),
    re.compile(r"\b(insert|replace)\s+(or\s+\w+\s+)?into\b|\bdelete\s+from\b|\bupdate\s+\S+\s+set\b"
               r"|\bcreate\s+(or\s+replace\s+)?(temp\w*\s+)?(table|view|schema|index|trigger|macro|"
               r"sequence|type)\b|\bdrop\s+(table|view|schema|index|trigger|macro)\b"
               r"|\balter\s+table\b|\busing\s+sample\b|\battach\s+'", re.I),
]


@dataclass(frozen=True)
class Import:
    """`source` imports `target` (absolute dotted name) at `path:line`; line 0 marks the implicit
    import of a module's parent package."""

    source: str
    target: str
    path: Path
    line: int
    lazy: bool = False  # inside a package __init__'s module-level __getattr__ / __dir__ (PEP 562)

    def where(self, root: Path) -> str:
        return f"{self.path.relative_to(root)}:{self.line}"


def package_modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> file, for every .py file under the packages' folders, not through a
    symbolic link (a linked folder is scanned as the package it is mapped to)."""
    folders = packages if isinstance(packages, dict) else {p: p for p in packages}
    found = {}
    for package, folder in folders.items():
        base = root / folder
        for path in sorted(base.rglob("*.py")):
            inner = path.relative_to(base).with_suffix("").parts
            if any((base.joinpath(*inner[:i])).is_symlink() for i in range(1, len(inner))):
                continue
            parts = (*package.split("."), *inner)
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _parse(path: Path) -> ast.Module:
    """The module's syntax tree, parsed once per file and version (the rules only read it)."""
    return _parsed(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _parsed(path: str, mtime_ns: int) -> ast.Module:
    return ast.parse(Path(path).read_text(), filename=path)


def imports(root: Path, packages=PACKAGES) -> list[Import]:
    """Every import statement of the package's modules, wherever it stands, resolved to the most
    specific module it names (`from .core import marginals` -> `dp_synth_assets.core.marginals`;
    `from . import Budget` -> the package itself)."""
    modules = package_modules(root, packages)
    versions = tuple((name, path.stat().st_mtime_ns) for name, path in modules.items())
    return list(_imports(tuple(modules.items()), versions))


@functools.lru_cache(maxsize=None)
def _imports(modules: tuple, versions: tuple) -> tuple[Import, ...]:
    """`imports` of these (module name, path) pairs at these file versions (cached)."""
    modules = dict(modules)
    found = []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = _parse(path)
        lazy_lines = {n.lineno for f in tree.body if isinstance(f, ast.FunctionDef)
                      and f.name in ("__getattr__", "__dir__") and path.name == "__init__.py"
                      for n in ast.walk(f) if isinstance(n, (ast.Import, ast.ImportFrom))}
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [Import(name, a.name, path, node.lineno, node.lineno in lazy_lines)
                          for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = package.split(".")
                    base = ".".join(parts[:len(parts) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    found.append(Import(name, full if full in modules else base, path, node.lineno,
                                        node.lineno in lazy_lines))
            elif (isinstance(node, ast.Call) and node.args
                  and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
                  and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
                  in ("import_module", "__import__")):
                found.append(Import(name, node.args[0].value, path, node.lineno))
    return tuple(found)


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _reached(root: Path, start: list[str], edges: dict[str, list[Import]],
             modules: dict[str, Path], violates, allowed=lambda module, imp: False) -> list[str]:
    """Breadth-first over the imports from `start`: each import for which `violates(module,
    imp)` holds, with the chain that reaches it (the walk does not go past it); an import for
    which `allowed(module, imp)` holds is not followed. A package reached only as a parent
    (importing `pkg.core` runs `pkg/__init__.py`) runs its module-level code, not its PEP 562
    `__getattr__`, so its lazy imports are followed only once the package is imported by name."""
    came_from: dict[str, Import | None] = {m: None for m in start}
    named = set(start)  # modules reached by an import that names them (or where the walk starts)
    queue, violations = [(m, True) for m in start], []
    while queue:
        module, by_name = queue.pop(0)
        for imp in edges.get(module, []):
            if (imp.lazy and not by_name) or allowed(module, imp):
                continue
            if violates(module, imp):
                violations.append(f"{imp.where(root)}: imports {imp.target}"
                                  f"{_chain(root, came_from, module)}")
                continue
            internal = _internal(imp.target, modules)
            if internal is None:
                continue
            explicit = imp.line != 0
            if internal not in came_from:
                came_from[internal] = imp
                if explicit:
                    named.add(internal)
                queue.append((internal, explicit))
            elif explicit and internal not in named:
                named.add(internal)  # now imported by name: its lazy imports count too
                came_from[internal] = imp
                queue.append((internal, True))
    return violations


def _internal(target: str, modules: dict[str, Path]) -> str | None:
    """The package module an import of `target` loads (itself, or its nearest parent)."""
    return next((t for t in [target, *reversed(_parents(target))] if t in modules), None)


def _chain(root: Path, came_from: dict, module: str) -> str:
    chain, step, seen = [], came_from[module], set()
    while step is not None and step.source not in seen:  # a re-reached package may close a loop
        seen.add(step.source)
        chain.append(step)
        step = came_from[step.source]
    return "".join(f" (reached: {s.where(root)} imports {s.target})"
                   if s.line else f" (reached: {s.source} is inside {s.target})" for s in chain)


def core_dagster_violations(root: Path = ROOT, packages=PACKAGES, core: str = CORE) -> list[str]:
    """Each Dagster import reached from the core, with the chain of imports that reaches it."""
    modules = package_modules(root, packages)
    edges: dict[str, list[Import]] = {}
    for imp in imports(root, packages):
        edges.setdefault(imp.source, []).append(imp)
    for name, path in modules.items():  # importing a module runs its parent packages first
        edges.setdefault(name, []).extend(Import(name, p, path, 0) for p in _parents(name)
                                          if p in modules)
    start = [m for m in modules if m == core or m.startswith(core + ".")]
    return _reached(root, start, edges, modules,
                    lambda module, imp: bool(DAGSTER.match(imp.target.split(".")[0])))


def _docstrings(tree: ast.Module) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _text(node: ast.AST) -> str | None:
    """The literal text of a string expression, `{}` for each computed part; None if not one."""
    if isinstance(node, ast.Constant):
        return node.value if isinstance(node.value, str) else None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _text(node.left), _text(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "{}") + (right if right is not None else "{}")
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _text(node.left)
    return None


def is_sql_statement(text: str) -> bool:
    text = text.strip()
    if text.rstrip(";").strip().upper() in ALLOWED_STATEMENTS:
        return False
    return bool(_STATEMENT_START.match(text)) or any(p.search(text) for p in _STATEMENT_ANYWHERE)


def inline_sql_violations(root: Path = ROOT, packages=PACKAGES) -> list[str]:
    """Each string literal of the package that holds a SQL statement."""
    violations = []  # (file, line, message)
    for path in package_modules(root, packages).values():
        tree = _parse(path)
        skip = _docstrings(tree)
        pending = [tree]
        while pending:
            node = pending.pop()
            if id(node) in skip:
                continue
            text = _text(node)
            if text is None:
                pending.extend(ast.iter_child_nodes(node))
            elif is_sql_statement(text):
                shown = " ".join(text.split())
                violations.append((str(path.relative_to(root)), node.lineno,
                                   f"SQL in Python: {shown[:80]!r}; move it to sql/<name>.sql"))
    return [f"{file}:{line}: {what}" for file, line, what in sorted(violations)]


def outside_imports(root: Path = ROOT, packages=PACKAGES,
                    outside=OUTSIDE_THE_PACKAGE) -> list[str]:
    """Each import of the package that names bench/, tests/ or a root module."""
    banned = set(outside) | {p.stem for p in root.glob("*.py")}
    return [f"{imp.where(root)}: imports {imp.target}, which is outside the package"
            for imp in imports(root, packages) if imp.target.split(".")[0] in banned]


def import_circles(root: Path = ROOT, packages=PACKAGES) -> list[str]:
    """One circle per strongly connected group of the package's modules, as its chain of
    imports (`a.py:3 -> b; b.py:9 -> a`). Importing `a.b.c` from a module outside `a.b` imports
    the package `a.b` too (its `__init__` runs first)."""
    modules = package_modules(root, packages)
    edges: dict[str, dict[str, Import]] = {m: {} for m in modules}
    for imp in imports(root, packages):
        # importing a.b.c from outside a.b runs a.b's __init__ first: an edge to it as well
        inside = set(_parents(imp.source)) | {imp.source}
        for target in [imp.target, *(p for p in _parents(imp.target) if p not in inside)]:
            if target in modules and target != imp.source:
                edges[imp.source].setdefault(target, Import(imp.source, target, imp.path, imp.line))

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for v in sorted(modules):
        if v not in index:
            connect(v)

    circles = []
    for group in sorted(groups):
        first, members = group[0], set(group)
        paths = {first: []}  # breadth-first, inside the group, back to `first`
        queue, closing = [first], None
        while queue and closing is None:
            v = queue.pop(0)
            for w, imp in sorted(edges[v].items()):
                if w == first:
                    closing = paths[v] + [imp]
                    break
                if w in members and w not in paths:
                    paths[w] = paths[v] + [imp]
                    queue.append(w)
        circles.append("import circle: " + "; ".join(
            f"{imp.where(root)} -> {imp.target}" for imp in closing))
    return circles


# ---- the rules on this repository ----------------------------------------------------------------


def test_core_imports_no_dagster():
    violations = core_dagster_violations()
    assert not violations, "\n".join(violations)


def test_every_sql_statement_comes_from_the_sql_folder():
    violations = inline_sql_violations()
    assert not violations, "\n".join(violations)


def test_the_package_never_imports_bench_tests_or_root_modules():
    violations = outside_imports()
    assert not violations, "\n".join(violations)


def test_no_import_circles():
    circles = import_circles()
    assert not circles, "\n".join(circles)


# ---- each checker catches a planted violation --------------------------------------------------


def plant(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


CLEAN = {
    "pkg/__init__.py": "",
    "pkg/core/__init__.py": "",
    "pkg/core/algo.py": "import numpy as np\nfrom .shared import X\n",
    "pkg/core/shared.py": '"""SELECT x FROM t in a docstring is prose."""\nX = 1\n',
    "pkg/assets.py": "import dagster as dg\nfrom .core.algo import np\n",
}


def test_dagster_reached_from_the_core_through_a_deferred_import_is_caught(tmp_path):
    root = plant(tmp_path, {**CLEAN, "pkg/core/shared.py": (
        "X = 1\n\n\ndef later():\n    from ..assets import dg\n    return dg\n")})
    assert core_dagster_violations(root, ("pkg",), "pkg.core") == [
        "pkg/assets.py:1: imports dagster (reached: pkg/core/shared.py:5 imports pkg.assets)"]
    assert core_dagster_violations(plant(tmp_path / "clean", CLEAN), ("pkg",), "pkg.core") == []


def test_dagster_in_a_parent_package_init_is_caught(tmp_path):
    root = plant(tmp_path, {**CLEAN, "pkg/__init__.py": "from dagster_duckdb import X\n"})
    assert core_dagster_violations(root, ("pkg",), "pkg.core") == [
        "pkg/__init__.py:1: imports dagster_duckdb (reached: pkg.core is inside pkg)"]


LAZY_INIT = ("def __getattr__(name):\n    from .assets import dg\n    return dg\n")


def test_a_parent_package_lazy_export_counts_only_when_the_core_imports_the_package(tmp_path):
    """Importing pkg.core runs pkg/__init__.py's module-level code, not its PEP 562 __getattr__;
    a core module that imports a name of pkg does run it."""
    root = plant(tmp_path / "parent", {**CLEAN, "pkg/__init__.py": LAZY_INIT})
    assert core_dagster_violations(root, ("pkg",), "pkg.core") == []
    root = plant(tmp_path / "named", {**CLEAN, "pkg/__init__.py": LAZY_INIT,
                                      "pkg/core/algo.py": "from pkg import dg\n"})
    assert core_dagster_violations(root, ("pkg",), "pkg.core") == [
        "pkg/assets.py:1: imports dagster (reached: pkg/__init__.py:2 imports pkg.assets) "
        "(reached: pkg/core/algo.py:1 imports pkg)"]


def test_inline_sql_is_caught_and_docstrings_and_transactions_are_not(tmp_path):
    root = plant(tmp_path, {**CLEAN, "pkg/core/algo.py": (
        '"""Reads with SELECT * FROM t (a docstring)."""\n'
        "def f(con, t, n):\n"
        '    con.execute("COMMIT")\n'
        '    con.execute(f"CAST({t} AS INTEGER)")\n'
        '    con.execute(f"SELECT * FROM {t} "\n'
        '                f"USING SAMPLE {n}")\n'
        '    return "create table " + t\n')})
    assert inline_sql_violations(root, ("pkg",)) == [
        "pkg/core/algo.py:5: SQL in Python: 'SELECT * FROM {} USING SAMPLE {}'; "
        "move it to sql/<name>.sql",
        "pkg/core/algo.py:7: SQL in Python: 'create table {}'; move it to sql/<name>.sql"]
    assert inline_sql_violations(plant(tmp_path / "clean", CLEAN), ("pkg",)) == []


def test_an_import_of_tests_or_of_a_root_module_is_caught(tmp_path):
    root = plant(tmp_path, {**CLEAN, "definitions.py": "defs = None\n", "pkg/report.py": (
        "def main():\n    from definitions import defs\n    import tests.helpers\n")})
    assert outside_imports(root, ("pkg",)) == [
        "pkg/report.py:2: imports definitions, which is outside the package",
        "pkg/report.py:3: imports tests.helpers, which is outside the package"]
    assert outside_imports(plant(tmp_path / "clean", CLEAN), ("pkg",)) == []


def test_an_import_of_the_top_level_resources_is_caught(tmp_path):
    root = plant(tmp_path, {**CLEAN, "pkg/assets.py": (
        "from resources.ledger import LedgerResource\nimport pkg.resources.ledger\n")})
    assert outside_imports(root, ("pkg",)) == [
        "pkg/assets.py:1: imports resources.ledger, which is outside the package"]


def test_an_import_circle_closed_inside_a_function_is_caught(tmp_path):
    root = plant(tmp_path, {
        **CLEAN,
        "pkg/core/__init__.py": "def run():\n    from .algo import f\n    return f\n",
        "pkg/core/algo.py": "from . import run\n\n\ndef f():\n    return run\n"})
    assert import_circles(root, ("pkg",)) == [
        "import circle: pkg/core/__init__.py:2 -> pkg.core.algo; pkg/core/algo.py:1 -> pkg.core"]
    assert import_circles(plant(tmp_path / "clean", CLEAN), ("pkg",)) == []


def test_an_import_circle_through_a_package_init_is_caught(tmp_path):
    """config imports select.methods, whose package `select` imports config."""
    root = plant(tmp_path, {**CLEAN,
                            "pkg/core/config.py": "from .select.methods import METHODS\n",
                            "pkg/core/select/__init__.py": "from ..config import METHODS\n",
                            "pkg/core/select/methods.py": "METHODS = {}\n"})
    assert import_circles(root, ("pkg",)) == [
        "import circle: pkg/core/config.py:1 -> pkg.core.select; "
        "pkg/core/select/__init__.py:1 -> pkg.core.config"]


# ---- checks and evaluation: Dagster only in the checks' wrapper ---------------------------------

EVALUATION = "dp_synth_assets.evaluation"
CHECKS = "dp_synth_assets.checks"
CHECKS_DAGSTER = "dp_synth_assets.checks.asset_checks"  # the checks' one Dagster module


def import_graph(root: Path, packages) -> tuple[dict, dict[str, list[Import]]]:
    """The package's modules and, for each, the imports it makes: its own, and its parent
    packages' `__init__`s (importing a module runs them first; marked line 0)."""
    modules = package_modules(root, packages)
    edges: dict[str, list[Import]] = {}
    for imp in imports(root, packages):
        edges.setdefault(imp.source, []).append(imp)
    for name, path in modules.items():
        edges.setdefault(name, []).extend(Import(name, p, path, 0) for p in _parents(name)
                                          if p in modules)
    return modules, edges


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def wrapper_only_dagster_violations(root: Path = ROOT, packages=PACKAGES,
                                    evaluation: str = EVALUATION, checks: str = CHECKS,
                                    wrapper: str = CHECKS_DAGSTER) -> list[str]:
    """Each Dagster import reached from `evaluation` or from a module of `checks` other than
    `wrapper`, directly or through any package module (parent `__init__`s included), with the
    chain that reaches it. The one way into `wrapper` allowed is the `checks` package's own
    `__init__`, which exports its names on first use; any other import of it counts as reaching
    Dagster."""
    modules, edges = import_graph(root, packages)
    start = [m for m in modules if _inside(m, evaluation) or (_inside(m, checks) and m != wrapper)]
    return _reached(
        root, start, edges, modules,
        lambda module, imp: bool(DAGSTER.match(imp.target.split(".")[0]))
        or _internal(imp.target, modules) == wrapper,
        # the package's lazy export of the wrapper's names
        allowed=lambda module, imp: module == checks and _internal(imp.target, modules) == wrapper)


def test_evaluation_imports_no_dagster_and_checks_only_in_their_wrapper():
    violations = wrapper_only_dagster_violations()
    assert not violations, "\n".join(violations)


LAYERS = {
    "pkg/__init__.py": "",
    "pkg/pipeline.py": "import dagster as dg\n",
    "pkg/evaluation/__init__.py": "",
    "pkg/evaluation/fidelity.py": "import numpy as np\n",
    "pkg/checks/__init__.py": ("from .suites import CHECKS\n\n\ndef __getattr__(name):\n"
                               "    from . import asset_checks\n    return asset_checks\n"),
    "pkg/checks/suites.py": "from ..evaluation.fidelity import np\nCHECKS = {}\n",
    "pkg/checks/asset_checks.py": "import dagster as dg\nfrom .suites import CHECKS\n",
}


def _layers(root: Path, files: dict[str, str]) -> list[str]:
    return wrapper_only_dagster_violations(plant(root, files), ("pkg",), "pkg.evaluation",
                                           "pkg.checks", "pkg.checks.asset_checks")


def test_dagster_reached_from_evaluation_or_checks_outside_their_wrapper_is_caught(tmp_path):
    assert _layers(tmp_path / "clean", LAYERS) == []
    assert _layers(tmp_path / "evaluation", {**LAYERS, "pkg/evaluation/fidelity.py": (
        "def later():\n    from ..pipeline import dg\n    return dg\n")}) == [
        "pkg/pipeline.py:1: imports dagster "
        "(reached: pkg/evaluation/fidelity.py:2 imports pkg.pipeline)"]
    assert _layers(tmp_path / "checks", {**LAYERS, "pkg/checks/suites.py": (
        "import dagster_shell\nCHECKS = {}\n")}) == [
        "pkg/checks/suites.py:1: imports dagster_shell"]
    assert _layers(tmp_path / "wrapper", {**LAYERS, "pkg/checks/gx.py": (
        "from .asset_checks import dg\n")}) == [
        "pkg/checks/gx.py:1: imports pkg.checks.asset_checks"]


# ---- rule 5: the core writes no files (the artifact store, infra/store.py, does) ------------------

STORE = "dp_synth_assets/infra/store.py"  # where the core's callers write: named by each message
# Modules of the core that still write files themselves because they are moving out of the core;
# the rule holds them as soon as they stay in the core under another name.
LEAVING_THE_CORE: frozenset = frozenset()
_OS_CHANGES = {"mkdir", "makedirs", "unlink", "remove", "rmdir", "removedirs", "chmod"}
_PATH_CHANGES = {"mkdir", "unlink", "rmdir", "touch", "chmod"}  # no str / list method has these
_WRITE_METHODS = {"write_text", "write_bytes"}
_OS_WRITES = {"replace", "rename", "renames", "link", "symlink", "write", "truncate"}
_SHUTIL_WRITES = {"copy", "copy2", "copyfile", "copytree", "move"}
_NUMPY_WRITES = {"save", "savez", "savez_compressed", "savetxt"}


def _mode(call: ast.Call, position: int) -> ast.AST | None:
    for kw in call.keywords:
        if kw.arg == "mode":
            return kw.value
    return call.args[position] if len(call.args) > position else None


def _writes_mode(node: ast.AST | None) -> bool:
    """A mode that may write: a literal with w, a, x or +, or a mode not written as a literal."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return any(c in node.value for c in "wax+")
    return True


def _memory_buffers(scope: ast.AST) -> set[str]:
    """Names assigned from `io.BytesIO(...)` / `BytesIO(...)` in `scope` (writing to memory)."""
    names = set()
    for node in ast.walk(scope):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and (getattr(node.value.func, "attr", None)
                     or getattr(node.value.func, "id", None)) in ("BytesIO", "StringIO")):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _file_write(call: ast.Call, buffers: set[str]) -> str | None:
    """What file write `call` is, or None."""
    func = call.func
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name == "open" and owner != "os" and _writes_mode(_mode(call, 0 if owner else 1)):
        return "open for writing"  # builtin open(path, mode), Path.open(mode)
    if name == "fdopen" and _writes_mode(_mode(call, 1)):
        return "os.fdopen for writing"
    if name in _WRITE_METHODS:
        return name
    if owner == "os" and name in _OS_CHANGES:
        return f"os.{name}"
    if owner != "os" and isinstance(func, ast.Attribute) and name in _PATH_CHANGES:
        return f"Path.{name}"
    if owner == "os" and name in _OS_WRITES:
        return f"os.{name}"
    if owner == "shutil" and name in _SHUTIL_WRITES:
        return f"shutil.{name}"
    if owner in ("np", "numpy") and name in _NUMPY_WRITES:
        first = call.args[0] if call.args else None
        if not (isinstance(first, ast.Name) and first.id in buffers):
            return f"np.{name}"
    if name == "tofile":
        return "ndarray.tofile"
    if (name in ("replace", "rename") and owner != "os" and len(call.args) == 1
            and not call.keywords):
        return f"Path.{name}"  # str.replace takes two arguments, dataclasses.replace keywords
    return None


def _calls(root: Path, core: str, exempt):
    """(module's relative path, call node, the memory buffers in its scope) for every call in the
    core's modules outside `exempt`."""
    for path in sorted((root / core).rglob("*.py")):
        relative = str(path.relative_to(root))
        if relative not in exempt:
            for node, buffers in _file_calls(str(path), path.stat().st_mtime_ns):
                yield relative, node, buffers


@functools.lru_cache(maxsize=None)
def _file_calls(path: str, mtime_ns: int) -> tuple:
    """(call node, the memory buffers of its innermost function, or the module's) for every call
    of one module, in one walk (cached per file and version, as `_parsed`)."""
    found = []

    def visit(node: ast.AST, buffers: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            inner = (_memory_buffers(child)
                     if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else buffers)
            if isinstance(child, ast.Call):
                found.append((child, inner))
            visit(child, inner)

    tree = _parsed(path, mtime_ns)
    visit(tree, _memory_buffers(tree))
    return tuple(found)


def _core_calls(classify, advice: str, root: Path, core: str, exempt) -> list[str]:
    """Each call of the core's modules (outside `exempt`) that `classify` names, with `advice`."""
    return sorted(f"{relative}:{node.lineno}: {what}; {advice}"
                  for relative, node, buffers in _calls(root, core, exempt)
                  if (what := classify(node, buffers)))


def core_file_writes(root: Path = ROOT, core: str = "dp_synth_assets/core", store: str = STORE,
                     exempt=LEAVING_THE_CORE) -> list[str]:
    """Each file write in the core: open/Path.open/os.fdopen with a writing mode,
    write_text/write_bytes, os.replace/rename/link/write, shutil copies and moves,
    np.save*/savez*/tofile (a write into an `io.BytesIO` is memory, not a file), mkdir, unlink,
    touch, chmod. `store` is where messages send the write."""
    return _core_calls(_file_write, f"write through {store} (atomic_write, atomic_target or a "
                       "store)", root, core, exempt)


def test_the_core_writes_files_only_through_the_store():
    violations = core_file_writes()
    assert not violations, "\n".join(violations)


def test_a_file_write_in_the_core_is_caught(tmp_path):
    """bad.py's writes are caught; the store's writes (outside the core) and fine.py's reads,
    lock file, string replace, list remove and in-memory buffer are not."""
    root = plant(tmp_path, {
        "pkg/infra/store.py": "import os\n\n\ndef put(p, b):\n    open(p, 'wb').write(b)\n"
                              "    os.replace(p, p)\n",
        "pkg/core/fine.py": (
            "import io, os\nimport numpy as np\n\n\ndef f(p, text, outcome, names):\n"
            "    open(p).read()\n    p.open('rb')\n    text.replace('a', 'b')\n"
            "    os.open(p, os.O_RDWR | os.O_CREAT)\n    buffer = io.BytesIO()\n"
            "    np.savez_compressed(buffer, a=1)\n    names.remove(1)\n"
            "    return dataclasses.replace(outcome, x=1)\n"),
        "pkg/core/bad.py": (
            "import os\nimport numpy as np\n\n\ndef f(p, tmp, mode):\n"
            "    with open(p, 'w') as out:\n        out.write('x')\n    p.write_text('x')\n"
            "    os.replace(tmp, p)\n    tmp.rename(p)\n    np.save(p, 1)\n"
            "    os.fdopen(3, mode)\n    p.parent.mkdir()\n    os.remove(p)\n"),
    })
    assert core_file_writes(root, "pkg/core", "pkg/infra/store.py", frozenset()) == [
        f"pkg/core/bad.py:{line}: {what}; write through pkg/infra/store.py (atomic_write, "
        "atomic_target or a store)" for line, what in [
            (10, "Path.rename"), (11, "np.save"), (12, "os.fdopen for writing"),
            (13, "Path.mkdir"), (14, "os.remove"),
            (6, "open for writing"), (8, "write_text"), (9, "os.replace")]]


# ---- rule 7: the core imports no I/O module and nothing of the infrastructure -------------------

INFRA = "dp_synth_assets.infra"
# Importing one of these means I/O: database clients, file locks, processes, the network, file
# systems and temporary files, a terminal's secrets. (DuckDB is not here: it is the core's query
# engine over the relations its callers open, and an in-memory one in tests.)
IO_MODULES = frozenset({
    "sqlite3", "psycopg", "psycopg2", "psycopg_pool", "pyspark", "py4j",  # database clients
    "fcntl", "msvcrt", "filelock", "portalocker", "fasteners",  # file locks
    "subprocess", "signal", "pty",  # other processes
    "socket", "ssl", "http", "urllib.request", "requests", "httpx", "boto3", "botocore",  # network
    "shutil", "tempfile", "glob", "fsspec", "upath", "s3fs", "gcsfs", "adlfs", "mmap",  # files
    "getpass", "pwd", "grp",  # the user
})
# Core modules that still hold I/O because they are moving to dp_synth_assets/infra/ (none now:
# the scan engines' connectors are in infra/engines/). Each entry must still break the rule (the
# test below), so an entry is dropped once its module is clean.
IO_LEAVING_THE_CORE: frozenset = frozenset()


def _io_module(target: str) -> str | None:
    parts = target.split(".")
    return next((m for m in (".".join(parts[:2]), parts[0]) if m in IO_MODULES), None)


def core_io_violations(root: Path = ROOT, packages=PACKAGES, core: str = CORE,
                       infra: str = INFRA, exempt=IO_LEAVING_THE_CORE) -> list[str]:
    """Each import of an I/O module or of `infra` reached from the core (directly, or through
    any package module, parent `__init__`s included), with the chain that reaches it; the
    imports of an `exempt` module do not count."""
    modules, edges = import_graph(root, packages)
    start = [m for m in modules if _inside(m, core)]
    return _reached(
        root, start, edges, modules,
        lambda module, imp: module not in exempt and imp.line != 0 and (
            _io_module(imp.target) is not None
            or _inside(_internal(imp.target, modules) or "", infra)))


def test_the_core_imports_no_io_module_and_no_infrastructure():
    violations = core_io_violations()
    assert not violations, "\n".join(violations)


PURE = {
    "pkg/__init__.py": "",
    "pkg/core/__init__.py": "",
    "pkg/core/fold.py": "import json\nimport numpy as np\nfrom .shared import X\n",
    "pkg/core/shared.py": "X = 1\n",
    "pkg/infra/__init__.py": "",
    "pkg/infra/store.py": "import sqlite3\nimport fcntl\nfrom ..core.fold import np\n",
}


@pytest.mark.parametrize("line,caught", [
    ("import sqlite3", "imports sqlite3"),
    ("import fcntl", "imports fcntl"),
    ("from psycopg import sql", "imports psycopg"),
    ("from pyspark.sql import SparkSession", "imports pyspark.sql"),
    ("import filelock", "imports filelock"),
    ("import subprocess", "imports subprocess"),
    ("import socket", "imports socket"),
    ("from urllib.request import urlopen", "imports urllib.request"),
    ("import shutil", "imports shutil"),
    ("import tempfile", "imports tempfile"),
])
def test_an_io_import_in_the_core_is_caught(tmp_path, line, caught):
    """Each I/O module, imported by a core module inside a function; the infrastructure's
    own sqlite3 and fcntl do not count."""
    assert core_io_violations(plant(tmp_path / "clean", PURE), ("pkg",), "pkg.core",
                              "pkg.infra", frozenset()) == []
    root = plant(tmp_path / "bad", {**PURE, "pkg/core/shared.py": (
        f"X = 1\n\n\ndef later():\n    {line}\n")})
    assert core_io_violations(root, ("pkg",), "pkg.core", "pkg.infra", frozenset()) == [
        f"pkg/core/shared.py:5: {caught}"]


def test_the_core_reaching_the_infrastructure_is_caught(tmp_path):
    """Directly, or through a package module outside the core (the chain is named)."""
    root = plant(tmp_path / "direct", {**PURE, "pkg/core/fold.py": (
        "from ..infra.store import np\n")})
    assert core_io_violations(root, ("pkg",), "pkg.core", "pkg.infra", frozenset()) == [
        "pkg/core/fold.py:1: imports pkg.infra.store"]
    root = plant(tmp_path / "through", {**PURE, "pkg/helpers.py": "import socket\n",
                                        "pkg/core/fold.py": "from .. import helpers\n"})
    assert core_io_violations(root, ("pkg",), "pkg.core", "pkg.infra", frozenset()) == [
        "pkg/helpers.py:1: imports socket (reached: pkg/core/fold.py:1 imports pkg.helpers)"]


def test_each_core_module_exempt_from_the_io_rule_still_needs_it():
    """An exemption whose module no longer imports I/O is dropped from IO_LEAVING_THE_CORE."""
    for module in sorted(IO_LEAVING_THE_CORE):
        others = IO_LEAVING_THE_CORE - {module}
        found = [v for v in core_io_violations(exempt=others)
                 if v.startswith(module.replace(".", "/") + ".py:")]
        assert found, f"{module} imports no I/O module any more: drop it from IO_LEAVING_THE_CORE"


# ---- rule 8: the core reads no files -------------------------------------------------------------

# Core modules that still read files, and why. Each must still read one (the last test).
CORE_FILE_READERS = {
    "dp_synth_assets/core/config.py": "load_registry reads the datasets.yaml it validates",
    "dp_synth_assets/core/sql.py": "the package's own sql/ templates (package data)",
    "dp_synth_assets/core/source.py": "a CSV source's header and a file source's glob",
}
_PATH_READS = {"read_text", "read_bytes", "exists", "is_file", "is_dir", "is_symlink", "stat",
               "lstat", "iterdir", "glob", "rglob", "readlink", "samefile"}
_OS_READS = {"open", "listdir", "scandir", "stat", "lstat", "walk", "access", "readlink",
             "statvfs", "getcwd"}
_NUMPY_READS = {"load", "loadtxt", "genfromtxt", "fromfile", "memmap"}


def _file_read(call: ast.Call, buffers: set[str]) -> str | None:
    """What file read (or look at the file system) `call` is, or None; writes are rule 5's."""
    func = call.func
    owner = func.value.id if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) else None
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name == "open" and owner not in ("os", "io") and not _writes_mode(_mode(call, 0 if owner else 1)):
        return "open" if owner is None else "Path.open"
    if owner in ("os", "io") and name in _OS_READS:
        return f"{owner}.{name}"
    if owner == "glob":
        return f"glob.{name}"
    if owner in ("np", "numpy") and name in _NUMPY_READS:
        first = call.args[0] if call.args else None
        memory = isinstance(first, ast.Call) and (getattr(first.func, "attr", None) or getattr(
            first.func, "id", None)) in ("BytesIO", "StringIO")
        if not (memory or (isinstance(first, ast.Name) and first.id in buffers)):
            return f"np.{name}"
        return None
    if owner not in ("os", "np", "numpy") and isinstance(func, ast.Attribute) and name in _PATH_READS:
        return f"Path.{name}"
    return None


def core_file_reads(root: Path = ROOT, core: str = "dp_synth_assets/core",
                    exempt=frozenset(CORE_FILE_READERS)) -> list[str]:
    """Each file read in the core outside `exempt`: open() (reading), Path.open / read_text /
    read_bytes / exists / is_file / stat / iterdir / glob, os.listdir / scandir / stat / walk /
    open, glob.*, np.load and friends of a file (not of an `io.BytesIO`)."""
    return _core_calls(_file_read, "the core reads no files: read in dp_synth_assets/infra/ "
                       "(or the caller) and pass the data", root, core, exempt)


def test_the_core_reads_no_files():
    violations = core_file_reads()
    assert not violations, "\n".join(violations)


def test_a_file_read_in_the_core_is_caught(tmp_path):
    """bad.py's reads are caught; fine.py's memory buffers, string methods and writes (rule 5)
    are not, nor the infrastructure's reads."""
    root = plant(tmp_path, {
        "pkg/infra/files.py": "def get(p):\n    return open(p).read()\n",
        "pkg/core/fine.py": (
            "import io\nimport numpy as np\n\n\ndef f(data, text, p):\n"
            "    np.load(io.BytesIO(data))\n    buffer = io.BytesIO(data)\n"
            "    np.load(buffer)\n    text.startswith('a')\n    open(p, 'w')\n"),
        "pkg/core/bad.py": (
            "import glob, os\nimport numpy as np\n\n\ndef f(p):\n"
            "    open(p).read()\n    p.read_text()\n    p.exists()\n    p.parent.glob('*.csv')\n"
            "    os.listdir(p)\n    glob.glob('x*')\n    np.load(p)\n    p.open()\n"
            "    os.stat(p)\n"),
    })
    assert core_file_reads(root, "pkg/core", frozenset()) == sorted(
        f"pkg/core/bad.py:{line}: {what}; the core reads no files: read in "
        "dp_synth_assets/infra/ (or the caller) and pass the data" for line, what in [
            (6, "open"), (7, "Path.read_text"), (8, "Path.exists"), (9, "Path.glob"),
            (10, "os.listdir"), (11, "glob.glob"), (12, "np.load"), (13, "Path.open"),
            (14, "os.stat")])


def test_each_core_module_allowed_to_read_files_still_does():
    for module in sorted(CORE_FILE_READERS):
        others = frozenset(CORE_FILE_READERS) - {module}
        assert any(v.startswith(module + ":") for v in core_file_reads(exempt=others)), (
            f"{module} reads no file any more: drop it from CORE_FILE_READERS")


# ---- the plug-in registries: each entry names its module and its own settings model -------------

def registries() -> list[tuple[str, dict, str]]:
    """Every plug-in registry of the package: (what it registers, the registry, the package its
    entries' relative module names are read in)."""
    from dp_synth_assets.checks import suites
    from dp_synth_assets.core import engines, methods, preprocess, scan_engines

    return [("selection method", methods.METHODS, methods.PACKAGE),
            ("generator", engines.ENGINES, engines.PACKAGE),
            ("scan engine", scan_engines.SCAN_ENGINES, scan_engines.PACKAGE),
            ("preprocessing mechanism", preprocess.MECHANISMS, "dp_synth_assets.core"),
            ("check", suites.CHECKS, "dp_synth_assets.checks")]


def registry_violations(found: list[tuple[str, dict, str]]) -> list[str]:
    """Each registry entry that names no module that imports, or no frozen pydantic settings
    model (`core.plugins.entry_problems`)."""
    from dp_synth_assets.core.plugins import entry_problems

    return [p for what, registry, package in found for p in entry_problems(registry, package, what)]


def test_every_registry_entry_names_its_module_and_a_frozen_settings_model():
    found = registries()
    assert [len(registry) for _, registry, _ in found] == [7, 3, 3, 7, 8]
    violations = registry_violations(found)
    assert not violations, "\n".join(violations)


def test_a_registry_entry_without_a_module_or_a_frozen_settings_model_is_caught(
        tmp_path, monkeypatch):
    from dataclasses import dataclass

    from dp_synth_assets.core import methods

    plant(tmp_path, {"plugpkg/__init__.py": "", "plugpkg/good.py": (
        "from pydantic import BaseModel, ConfigDict\n\n\n"
        "class Settings(BaseModel):\n    model_config = ConfigDict(frozen=True)\n\n\n"
        "class Thawed(BaseModel):\n    pass\n\n\n"
        "def helper():\n    pass\n")})
    monkeypatch.syspath_prepend(str(tmp_path))

    @dataclass(frozen=True)
    class Entry:
        module: str
        settings: str = "Settings"

    registry = {"good": Entry("good"), "missing": Entry("gone"), "unnamed": Entry("good", ""),
                "thawed": Entry("good", "Thawed"), "function": Entry("good", "helper"),
                "elsewhere": Entry("plugpkg.good", "plugpkg.good:Settings")}
    assert registry_violations([("plug-in", registry, "plugpkg")]) == [
        "plug-in 'missing': its module 'gone' does not import (No module named 'plugpkg.gone')",
        "plug-in 'unnamed': names no settings model",
        "plug-in 'thawed': its settings model Thawed is not frozen",
        "plug-in 'function': the settings of plug-in 'function' (helper) are not a pydantic "
        "model"]
    # planted in a real registry: a method whose line names a settings model its module lacks
    monkeypatch.setitem(methods.METHODS, "planted", methods.MethodInfo("privsyn", 0.1, 0.1, False,
                                                                       "Settings"))
    assert registry_violations(registries()) == [
        "selection method 'planted': the settings of selection method 'planted' (Settings) are "
        "not a pydantic model"]
