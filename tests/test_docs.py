"""The documentation: the README's size and links, the configuration reference generated from
the models, the docstrings' rules (short headers, documented public functions, no measurements),
and the mkdocs site built in strict mode (a broken link, a broken anchor, a page
missing from the nav, a nav entry without its page or a link to a repository file that does not
exist fails the build)."""

import ast
import importlib.util
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README_MAX_LINES = 300
# a relative Markdown link: [text](target), target not a URL and not an in-page anchor
LINK = re.compile(r"\[[^\]\n]*\]\(([^)\s]+)\)")


def _generator():
    spec = importlib.util.spec_from_file_location("gen_config_reference",
                                                  ROOT / "docs" / "gen_config_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _build(project: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
                           str(site)], cwd=project, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


def _copy_project(tmp_path: Path) -> Path:
    """What the site is built from (mkdocs.yml, docs/, bench/README.md) and the repository
    folders its pages link into (docs/hooks.py checks those links), copied to change it."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    for folder in ("bench", "dp_synth_assets", "tests"):
        shutil.copytree(ROOT / folder, project / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.duckdb*", "*.sqlite*",
                                                      ".dagster_home", "data", "public"))
    return project


def _relative_links(markdown: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", markdown.read_text(), flags=re.S)
    return [t for t in LINK.findall(text)
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_readme_is_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move the detail into a "
        f"page under docs/ and link to it")


def test_readme_lists_every_extra():
    """The README's table of extras names every extra a user installs (not the project's own
    `test` and `bench`)."""
    import tomllib

    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    readme = (ROOT / "README.md").read_text()
    missing = [e for e in extras if e not in ("test", "bench") and f"| `{e}` |" not in readme]
    assert not missing, f"README.md's table of extras lacks {missing}"


@pytest.mark.parametrize("markdown", ["README.md", "bench/README.md"])
def test_relative_links_exist(markdown):
    links = _relative_links(ROOT / markdown)
    if markdown == "README.md":
        assert links, "the README links into docs/"
    missing = [t for t in links if not (ROOT / markdown).parent.joinpath(t.split("#")[0]).exists()]
    assert not missing, f"{markdown} links to files that do not exist: {missing}"


def test_every_bench_script_is_described():
    catalog = (ROOT / "bench" / "README.md").read_text()
    scripts = sorted(p.name for p in (ROOT / "bench").glob("*.py"))
    assert scripts
    undescribed = [s for s in scripts if f"`{s}`" not in catalog]
    assert not undescribed, f"bench/README.md does not say what these measure: {undescribed}"


def test_documents_keep_no_diary():
    """The pages say what is true now: no session or issue provenance, and no pointer to the
    diary of notes the decision records replaced (tests/test_standalone.py refuses references to
    documents outside the repository in every file)."""
    diary = re.compile(r"\bsession \d+|\bissue #?\d+|method_notes\.md", re.IGNORECASE)
    pages = [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in pages
             for n, line in enumerate(p.read_text().splitlines(), 1) if diary.search(line)]
    assert not found, f"history in the documentation: {found}"


def test_configuration_reference_is_current():
    generator = _generator()
    page = generator.render()
    for key in ("max_clique_cells", "on_source_change", "budget_group", "dsn_env", "holdout"):
        assert f"`{key}`" in page
    committed = (ROOT / "docs" / "reference" / "configuration.md").read_text()
    assert committed == page, ("docs/reference/configuration.md is not what the models say: run "
                               "`.venv/bin/python docs/gen_config_reference.py` (or `make docs`)")


def test_configuration_reference_describes_fields_that_exist():
    """Every hand-written description names a field of its model (a renamed or removed field
    fails here instead of leaving a description of nothing), and every key has a description."""
    generator = _generator()
    models = {m.__name__: m for m in generator._reachable(generator.config.DatasetSpec)}
    models.update({k.__name__: k for m in list(models.values()) for k in m.__mro__
                   if isinstance(k, type) and issubclass(k, generator.BaseModel)})
    stale = [key for key in generator.DESCRIPTIONS
             if key.split(".")[0] not in models
             or key.split(".")[1] not in models[key.split(".")[0]].model_fields]
    assert not stale, f"docs/gen_config_reference.py describes fields that do not exist: {stale}"
    undescribed = [row for row in generator.render().splitlines()
                   if row.startswith("| `") and row.endswith("|  |")]
    assert not undescribed, f"keys without a description: {undescribed}"


def test_configuration_reference_follows_the_models(monkeypatch):
    """The page is rendered from the models: a field added to a model appears in it, with its
    type and default."""
    from pydantic import create_model

    generator = _generator()
    config = generator.config
    with_field = create_model("ModelSettings", __base__=config.ModelSettings,
                              planted_cap=(int, 7))
    monkeypatch.setattr(config.DatasetSpec.model_fields["model"], "annotation", with_field)
    page = generator.render()
    assert "| `planted_cap` | integer | `7` |" in page


def test_site_builds_strict(tmp_path):
    result = _build(ROOT, tmp_path / "site")
    assert result.returncode == 0, result.stdout + result.stderr
    built = tmp_path / "site"
    for page in ("index.html", "reference/configuration/index.html", "benchmarks/index.html",
                 "decisions/index.html"):
        assert (built / page).exists(), page
    # a link to a file of the repository outside docs/ is checked and shown as its text
    layout = (built / "layout" / "index.html").read_text()
    assert "tests/test_architecture.py</code>" in layout
    assert "test_architecture.py\"" not in layout and "test_architecture.py/" not in layout
    # the benchmarks page is bench/README.md, included
    assert "What each script measures" in (built / "benchmarks" / "index.html").read_text()


# each defect planted in one copy of the project, and the text its strict-build warning names
PLANTS = {"broken link": "'no-such-page.md'", "broken anchor": "'#no-such-section'",
          "page not in nav": "orphan.md", "nav entry without page": "'gone.md'",
          "link to a missing repository file": "'../dp_synth_assets/no_such_module.py'"}


@pytest.fixture(scope="module")
def planted_build(tmp_path_factory):
    """One strict build of a copy of the project with every defect of PLANTS planted: its
    return code and its WARNING messages (mkdocs's strict mode fails a build with any
    warning, so a defect that alone makes a warning alone fails the build)."""
    tmp_path = tmp_path_factory.mktemp("planted")
    project = _copy_project(tmp_path)
    page = project / "docs" / "tests.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n"
                    "\nSee [a section](layout.md#no-such-section).\n"
                    "\nSee [it](../dp_synth_assets/no_such_module.py).\n")
    (project / "docs" / "orphan.md").write_text("# Orphan\n")
    config = project / "mkdocs.yml"
    config.write_text(config.read_text().replace("  - Tests: tests.md\n",
                                                 "  - Tests: tests.md\n  - Gone: gone.md\n"))
    result = _build(project, tmp_path / "site")
    output = result.stdout + result.stderr
    # a message runs from its WARNING line to the next line that starts a log record
    warnings = re.findall(r"^WARNING\b.*?(?=^[A-Z]+\b|\Z)", output, flags=re.M | re.S)
    return result.returncode, warnings, output


def test_the_copied_project_warns_only_about_the_planted_defects(planted_build):
    """The copy itself builds clean: every warning of the planted build names one plant."""
    returncode, warnings, output = planted_build
    assert returncode != 0, output
    assert len(warnings) == len(PLANTS), output
    assert all(sum(named in w for named in PLANTS.values()) == 1 for w in warnings), warnings


@pytest.mark.parametrize("plant", list(PLANTS))
def test_strict_build_fails_on(planted_build, plant):
    returncode, warnings, output = planted_build
    assert returncode != 0, f"the strict build accepted a {plant}"
    assert any(PLANTS[plant] in w for w in warnings), output


# ---- docstrings are contracts ------------------------------------------------------------------
# A module's header says what it defines, the paper and equation it implements and its guarantee,
# in at most HEADER_MAX_LINES lines; the algorithm's steps, the rationale and the measurements live
# in docs/decisions/ and bench/results/. Checked on the source text (ast; nothing is imported).

HEADER_MAX_LINES = 12
DOCSTRING_MAX_CHARS = 100
# the package's folders: resources/ is installed as dp_synth_assets.resources
PACKAGE_FOLDERS = ("dp_synth_assets", "resources")
# where every public function and class documents itself: the whole package (the core, the
# infrastructure, the Dagster layer, the resources and the notebook API)
PUBLIC_DOCSTRING_SCOPE = PACKAGE_FOLDERS
# A measurement: a decimal figure with a unit of time or memory (`5.15 s`, `1.1 GB`: a setting is
# a whole number, `30 seconds`), a speed-up (`2.2x faster`), a memory cost per rows (`170 MB per
# million`), a score figure (`TVD 0.33`, `F1 of 0.81`) or a result on a benchmark dataset
# (`on adult`)
MEASUREMENT = re.compile(
    r"\b\d+\.\d+\s?(?:ms|s|sec|seconds|min|minutes|h|hours|[KMG]i?B)\b"
    r"|\b\d+(?:\.\d+)?x (?:faster|slower)\b"
    r"|\b\d+(?:\.\d+)?\s?[KMG]i?B (?:per|for) (?:a |one |ten )?(?:thousand|million|billion)\b"
    r"|\b(?:TVD|F1|error)(?: of| =)? 0\.\d+"
    r"|\bon adult\b", re.IGNORECASE)
CITED_DOCUMENT = re.compile(r"\bdocs/[\w./-]+\.md\b")


def _modules(root: Path) -> list[Path]:
    """The package's .py files (os.walk: the dp_synth_assets/resources link is not followed)."""
    found = []
    for folder in PACKAGE_FOLDERS:
        for path, _, names in os.walk(root / folder):
            found += [Path(path) / n for n in names if n.endswith(".py")]
    return sorted(found)


def _docstrings(tree: ast.Module):
    """(node, docstring expression) of the module and of every class and function in it."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            if ast.get_docstring(node, clean=False) is not None:
                yield node, node.body[0]


def long_headers(root: Path = ROOT) -> list[str]:
    """Each module without a header, or whose header is over HEADER_MAX_LINES source lines."""
    found = []
    for path in _modules(root):
        rel = path.relative_to(root).as_posix()
        tree = ast.parse(path.read_text())
        if ast.get_docstring(tree, clean=False) is None:
            found.append(f"{rel}: no module docstring: say what it defines")
            continue
        first = tree.body[0]
        lines = first.end_lineno - first.lineno + 1
        if lines > HEADER_MAX_LINES:
            found.append(f"{rel}: header of {lines} lines, over {HEADER_MAX_LINES}: move the "
                         "steps and the rationale to its decision record in docs/decisions/")
    return found


def undocumented_public(root: Path = ROOT, scope=PUBLIC_DOCSTRING_SCOPE) -> list[str]:
    """Each public (no leading underscore) top-level function or class of `scope` without a
    docstring; a class inherits its documentation from a documented base class of its module."""
    found = []
    for path in _modules(root):
        rel = path.relative_to(root).as_posix()
        if not any(rel == s or rel.startswith(s + "/") for s in scope):
            continue
        tree = ast.parse(path.read_text())
        documented = {n.name for n in tree.body if isinstance(n, ast.ClassDef)
                      and ast.get_docstring(n) is not None}
        for node in tree.body:
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            if node.name.startswith("_") or ast.get_docstring(node) is not None:
                continue
            bases = {b.id for b in getattr(node, "bases", ()) if isinstance(b, ast.Name)}
            if not bases & documented:
                found.append(f"{rel}:{node.lineno}: {node.name} has no docstring")
    return found


def docstring_violations(root: Path = ROOT) -> list[str]:
    """Each docstring line over DOCSTRING_MAX_CHARS characters, each measurement in a
    docstring, and each document a docstring cites (docs/...md) that does not exist."""
    found = []
    for path in _modules(root):
        rel = path.relative_to(root).as_posix()
        source = path.read_text()
        lines = source.splitlines()
        for node, expr in _docstrings(ast.parse(source)):
            for number in range(expr.lineno, expr.end_lineno + 1):
                if len(lines[number - 1]) > DOCSTRING_MAX_CHARS:
                    found.append(f"{rel}:{number}: a docstring line of "
                                 f"{len(lines[number - 1])} characters")
            text = expr.value.value
            for match in MEASUREMENT.finditer(text):
                found.append(f"{rel}:{expr.lineno}: a measurement in a docstring "
                             f"({match.group(0)!r}): move it to bench/results/ or its decision "
                             "record")
            for cited in CITED_DOCUMENT.findall(text):
                if not (root / cited).exists():
                    found.append(f"{rel}:{expr.lineno}: cites {cited}, which does not exist")
    return found


def test_every_module_header_is_short():
    violations = long_headers()
    assert not violations, "\n".join(violations)


def test_every_public_function_has_a_docstring():
    violations = undocumented_public()
    assert not violations, "\n".join(violations)


def test_docstrings_are_short_lines_without_measurements_citing_documents_that_exist():
    violations = docstring_violations()
    assert not violations, "\n".join(violations)


def test_docstring_rules_catch_planted_violations(tmp_path):
    """A planted module breaks each rule once; the clean one breaks none."""
    long_header = '"""What it defines.\n' + "more\n" * HEADER_MAX_LINES + '"""\n'
    files = {
        "dp_synth_assets/core/clean.py": (
            '"""What it defines (docs/present.md)."""\n\n\n'
            'class Base:\n    """Documented."""\n\n\n'
            'class Child(Base):\n    x: int\n\n\n'
            'def _private():\n    return 1\n\n\n'
            'def timeout(seconds: int = 30):\n    """Waits 30 seconds, a setting."""\n'),
        "dp_synth_assets/core/long_header.py": long_header,
        "dp_synth_assets/core/no_header.py": "X = 1\n",
        "dp_synth_assets/core/undocumented.py": '"""Header."""\n\n\ndef public():\n    return 1\n',
        "dp_synth_assets/api.py": '"""Header."""\n\n\nclass Synth:\n    pass\n',
        "dp_synth_assets/wiring.py": '"""Header."""\n\n\ndef wire():\n    return 1\n',
        "dp_synth_assets/wide.py": '"""' + "w" * DOCSTRING_MAX_CHARS + '"""\n',
        "dp_synth_assets/timed.py": ('"""Fits in 5.15 s, 2.2x faster, +170 MB per million rows '
                                     '(its TVD 0.33 on adult)."""\n'),
        # (split, so that tests/test_standalone.py does not read this file as citing it)
        "dp_synth_assets/cites.py": '"""See docs/decisions/' + '9999-gone.md."""\n',
        "resources/thing.py": '"""Header."""\n\n\ndef make():\n    return 1\n',
        "docs/present.md": "# Present\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    headers = long_headers(tmp_path)
    assert [v.split(":")[0] for v in headers] == ["dp_synth_assets/core/long_header.py",
                                                  "dp_synth_assets/core/no_header.py"], headers
    public = undocumented_public(tmp_path)
    assert [v.split(": ")[1] for v in public] == ["Synth has no docstring",
                                                  "public has no docstring",
                                                  "wire has no docstring",
                                                  "make has no docstring"], public
    other = docstring_violations(tmp_path)
    assert not [v for v in other if "clean.py" in v], other
    assert any(v.startswith("dp_synth_assets/wide.py:1: a docstring line of 106") for v in other)
    measured = [v for v in other if v.startswith("dp_synth_assets/timed.py")]
    assert [v.split("(")[1].split(")")[0] for v in measured] == [
        "'5.15 s'", "'2.2x faster'", "'170 MB per million'", "'TVD 0.33'", "'on adult'"], measured
    assert any("cites docs/decisions/" + "9999-gone.md" in v for v in other), other
