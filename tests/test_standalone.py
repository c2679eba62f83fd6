"""The repository stands alone: no tracked file refers to a document outside it.

The design rationale lives in docs/decisions/ (one record per decision in force); the code's
comments cite those records and the papers by author and section. This test scans every file
`git ls-files` lists (text files only: a file with a NUL byte in its first 8 KB, or that is not
UTF-8, is binary and skipped) for references to the design notes and papers the project was
started from, which are not part of it: their file names, and the folder beside the checkout
that held them (by relative path, or by its absolute path on the development machine).

One narrow exception: the optional benchmark tables are read from a `datasets` folder beside the
checkout (`datasets.yaml`'s optional entries, bench/, the tests that skip without them). That is
data a run reads when present, not a document the code relies on; any other path into that
folder is refused.

The scanner is tested on a planted repository (`test_the_scanner_finds_planted_references`), so
this test can fail.
"""

import os
import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# The patterns are written so that this file does not match them itself.
RULES = {
    "the design notes": re.compile(r"\bDESIGN\.md\b"),
    "the seed notes": re.compile(r"SEED-NOTE[S]"),
    "the folder beside the checkout": re.compile(r"\.\./shared(?!/datasets\b)"),
    "its absolute path": re.compile(r"/work/share[d]\b"),
    "a paper's text file": re.compile(
        r"\b(absyn|ppsyn-partition-based|privsyn-gum-excerpt|privsyn-selection-excerpt"
        r"|benchmark-dp-tabular-synthesis)\.tx[t]\b"),
}


def tracked_files(root: Path) -> list[str]:
    """The paths `git ls-files` lists under `root` (tracked or staged)."""
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True)
    return [p for p in out.stdout.decode().split("\0") if p]


def text_of(path: Path) -> str | None:
    """The file's text (a symbolic link's: its target, which git stores), or None for a binary
    file (a NUL byte in its first 8 KB, or not UTF-8), a directory (a submodule) or a path that is
    listed but absent (deleted in the work tree)."""
    if path.is_symlink():
        return os.readlink(path)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, IsADirectoryError):
        return None
    if b"\0" in data[:8192]:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def violations(root: Path, files: list[str]) -> list[tuple[str, int, str, str]]:
    """(path, line number, rule, line) for every line of a text file that breaks a rule."""
    found = []
    for name in files:
        text = text_of(root / name)
        if text is None:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for rule, pattern in RULES.items():
                if pattern.search(line):
                    found.append((name, number, rule, line.strip()[:120]))
    return found


def test_no_tracked_file_refers_outside_the_repository():
    if not (REPO / ".git").exists():
        pytest.skip(f"{REPO} is not a git checkout: nothing to list")
    found = violations(REPO, tracked_files(REPO))
    assert not found, (
        "files refer to documents outside the repository; cite docs/decisions/ or the paper by "
        "author and section instead:\n" + "\n".join(f"{p}:{n}: {rule}: {line}"
                                                    for p, n, rule, line in found))


def test_the_scanner_finds_planted_references(tmp_path):
    notes = "DESIGN" + ".md"
    seed = "SEED-" + "NOTES.md"
    folder = ".." + "/shared"
    machine = "/work" + "/shared"
    paper = "absyn" + ".txt"
    planted = {
        "module.py": f'"""Budget rules ({notes} section 5)."""\n',
        "docs/page.md": f"As {seed} corrects it.\n",
        "bench/run.py": f"PAPERS = '{folder}/papers'\n",
        "conf.yaml": f"path: {machine}/anything\n",
        "select.py": f"# References: {paper} section V\n",
        "mixed.py": f"x = 1\n\n# see {folder}/{notes}\n",
    }
    clean = {
        "clean.py": "# docs/decisions/0013-absyn.md: ABSyn section V\n",
        "data.yaml": f"source: {{csv: {folder}/datasets/adult_raw/adult_raw.csv}}\n",
        "binary.bin": b"\0\1" + notes.encode(),
        "latin1.txt": f"caf\xe9 {notes}".encode("latin-1"),
    }
    for name, content in {**planted, **clean}.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.write_bytes if isinstance(content, bytes) else path.write_text)(content)
    (tmp_path / "untracked.md").write_text(f"{notes}\n")
    planted["link"] = None
    (tmp_path / "link").symlink_to(f"{folder}/{seed}")
    clean["alias"] = None
    (tmp_path / "alias").symlink_to("clean.py")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", *planted, *clean], cwd=tmp_path, check=True)

    files = tracked_files(tmp_path)
    assert "untracked.md" not in files and set(files) == set(planted) | set(clean)
    found = violations(tmp_path, files)
    assert {(p, rule) for p, _, rule, _ in found} == {
        ("module.py", "the design notes"),
        ("docs/page.md", "the seed notes"),
        ("bench/run.py", "the folder beside the checkout"),
        ("conf.yaml", "its absolute path"),
        ("select.py", "a paper's text file"),
        ("mixed.py", "the design notes"),
        ("mixed.py", "the folder beside the checkout"),
        ("link", "the seed notes"),
        ("link", "the folder beside the checkout"),
    }
    assert ("mixed.py", 3) in {(p, n) for p, n, _, _ in found}


RECORD_LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")
RECORD_CITATION = re.compile(r"docs/decisions/[0-9]{4}-[a-z0-9-]+\.md")


def test_the_decision_records_links_resolve_inside_the_repository():
    records = sorted((REPO / "docs" / "decisions").glob("*.md"))
    assert len(records) > 2, "docs/decisions/ holds the index, the references and the records"
    broken = []
    for record in records:
        for target in RECORD_LINK.findall(record.read_text()):
            if "://" in target:
                continue
            path = (record.parent / target).resolve()
            if not path.exists() or REPO not in path.parents:
                broken.append(f"{record.relative_to(REPO)}: {target}")
    assert not broken, "links that do not resolve inside the repository:\n" + "\n".join(broken)


def test_every_cited_decision_record_exists_and_is_indexed():
    if not (REPO / ".git").exists():
        pytest.skip(f"{REPO} is not a git checkout: nothing to list")
    index = (REPO / "docs" / "decisions" / "index.md").read_text()
    missing = []
    for name in tracked_files(REPO):
        text = text_of(REPO / name)
        for cited in set(RECORD_CITATION.findall(text or "")):
            if not (REPO / cited).is_file():
                missing.append(f"{name} cites {cited}, which does not exist")
    for record in (REPO / "docs" / "decisions").glob("[0-9][0-9][0-9][0-9]-*.md"):
        if f"]({record.name})" not in index:
            missing.append(f"docs/decisions/index.md does not list {record.name}")
    assert not missing, "\n".join(missing)
