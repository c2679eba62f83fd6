"""mkdocs hook: a page's links to files of the repository outside docs/ (a module, a benchmark
record, a test) are checked, and rendered as their text.

GitHub follows such a relative link, but the site holds only docs/, so mkdocs would report it as
not found. `on_page_markdown` resolves each relative link against the page's own folder: a
target that exists in the repository, outside docs/, becomes the link's text; any other link is
left as written, so a link to a file that does not exist still fails the strict build.
"""

import re
from pathlib import Path

# [text](target) or [text](target#anchor), not an image; fenced code is skipped (FENCE)
LINK = re.compile(r"(?<!!)\[([^\]\n]+)\]\(([^)\s#]+)(#[^)\s]*)?\)")
FENCE = re.compile(r"^[ \t]*(```|~~~)", re.M)
URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _repository_file(target: str, page_folder: Path, docs: Path, root: Path) -> bool:
    if URL.match(target):
        return False
    path = (page_folder / target).resolve()
    return (path.is_relative_to(root) and not path.is_relative_to(docs)
            and path.exists())


def on_page_markdown(markdown, page, config, files):
    docs = Path(config["docs_dir"]).resolve()
    root = Path(config["config_file_path"]).resolve().parent
    folder = (docs / page.file.src_path).parent

    def replace(match: re.Match) -> str:
        text, target = match.group(1), match.group(2)
        return text if _repository_file(target, folder, docs, root) else match.group(0)

    # the text between fences alternates prose (even) and code (odd)
    parts = FENCE.split(markdown)
    out, in_code = [], False
    for part in parts:
        if FENCE.fullmatch(part):
            in_code = not in_code
            out.append(part)
        else:
            out.append(part if in_code else LINK.sub(replace, part))
    return "".join(out)
