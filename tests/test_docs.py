"""The documentation: the README's size and links, the configuration reference generated from
the models, and the mkdocs site built in strict mode (a broken link, a broken anchor, a page
missing from the nav, a nav entry without its page or a link to a repository file that does not
exist fails the build)."""

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
    """What the site is built from (mkdocs.yml, docs/, bench/README.md), copied to change it."""
    project = tmp_path / "project"
    shutil.copytree(ROOT / "docs", project / "docs")
    shutil.copy(ROOT / "mkdocs.yml", project / "mkdocs.yml")
    (project / "bench").mkdir()
    shutil.copy(ROOT / "bench" / "README.md", project / "bench" / "README.md")
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


@pytest.mark.parametrize("plant, named", [("broken link", "no-such-page.md"),
                                          ("broken anchor", "no-such-section"),
                                          ("page not in nav", "orphan.md"),
                                          ("nav entry without page", "gone.md"),
                                          ("link to a missing repository file",
                                           "no_such_module.py")])
def test_strict_build_fails_on(tmp_path, plant, named):
    project = _copy_project(tmp_path)
    page = project / "docs" / "tests.md"
    if plant == "broken link":
        page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    elif plant == "broken anchor":
        page.write_text(page.read_text() + "\nSee [a section](layout.md#no-such-section).\n")
    elif plant == "link to a missing repository file":
        page.write_text(page.read_text() + "\nSee [it](../dp_synth_assets/no_such_module.py).\n")
    elif plant == "page not in nav":
        (project / "docs" / "orphan.md").write_text("# Orphan\n")
    else:
        config = project / "mkdocs.yml"
        config.write_text(config.read_text().replace("  - Tests: tests.md\n",
                                                     "  - Tests: tests.md\n  - Gone: gone.md\n"))
    result = _build(project, tmp_path / "site")
    assert result.returncode != 0, f"the strict build accepted a {plant}"
    assert named in result.stdout + result.stderr, result.stdout + result.stderr
