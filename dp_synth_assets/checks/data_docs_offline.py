"""Data Docs that render offline: GX's CDN stylesheets and scripts, served from the site itself.

The package ships the versions GX's page templates load from public CDNs (`data-docs-static/`,
with their licenses in `data-docs-static/LICENSES.txt`); `make_offline(docs)` copies them into
the site's `static/vendor/` and rewrites every page and stylesheet of the site to load them by a
relative path, so a site opened from file:// in an air-gapped network looks as it does online.
A CDN URL not in `VENDORED` stays unchanged. The deliberate differences from GX's pages:
docs/great_expectations.md, "Offline Data Docs"."""

import os
import re
from importlib.resources import files
from pathlib import Path

STATIC_PACKAGE_DIR = files("dp_synth_assets.checks") / "data-docs-static"
VENDOR_DIR = "static/vendor"  # inside the site: where the shipped files are copied
LOGO = "static/images/logo-long.png"  # copied into every site by GX itself
FAVICON = "static/images/favicon.ico"  # likewise

# the CDN URL in GX's templates -> the shipped files (under data-docs-static/) that replace it;
# () removes the tag
VENDORED: dict[str, tuple[str, ...]] = {
    "https://code.jquery.com/jquery-3.7.1.min.js": ("jquery-3.7.1/jquery.min.js",),
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js":
        ("popper.js-1.12.9/umd/popper.min.js",),
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css":
        ("bootstrap-4.3.1/css/bootstrap.min.css",),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js":
        ("bootstrap-4.3.1/js/bootstrap.min.js",),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css":
        ("bootstrap-table-1.19.1/bootstrap-table.min.css",),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js":
        ("bootstrap-table-1.19.1/bootstrap-table.min.js",),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.js":
        ("bootstrap-table-1.19.1/extensions/filter-control/bootstrap-table-filter-control.min.js",),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.css":
        ("bootstrap-table-1.19.0/extensions/filter-control/bootstrap-table-filter-control.css",),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.css":
        ("bootstrap-table-1.19.0/extensions/filter-control/"
         "bootstrap-table-filter-control.min.css",),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/"
    "bootstrap-datepicker.min.css":
        ("bootstrap-datepicker-1.9.0/css/bootstrap-datepicker.min.css",),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/"
    "bootstrap-datepicker.min.js": ("bootstrap-datepicker-1.9.0/js/bootstrap-datepicker.min.js",),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/"
    "bootstrap-prefers-dark.css": ("bootstrap-dark-1.1.0/css/bootstrap-prefers-dark.min.css",),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css":
        ("fontawesome-free-6.6.0/css/fontawesome.min.css",
         "fontawesome-free-6.6.0/css/solid.min.css"),
    "https://cdn.jsdelivr.net/npm/vega@5": (),
    "https://cdn.jsdelivr.net/npm/vega-lite@5": (),
    "https://cdn.jsdelivr.net/npm/vega-embed@6": (),
}

_SCRIPT = re.compile(r'<script\b[^>]*?\bsrc="(https?://[^"]+)"[^>]*>\s*</script>[ \t]*\n?')
_LINK = re.compile(r'<link\b[^>]*?\bhref="(https?://[^"]+)"[^>]*>[ \t]*\n?')
# GX's navbar logo (with its cache-busting "?d=<time>") and the dark-mode logo of its stylesheet
_LOGO = re.compile(r"https://great-expectations-web-assets\.s3\.us-east-2\.amazonaws\.com/"
                   r"(?:logo-long|full_logo_dark)\.png(?:\?[^\"')\s]*)?")
_FAVICON = re.compile(r'href="(?:\./|(?:\.\./)*)static/images/favicon\.ico"')


def localize(text: str, to_root: str) -> str:
    """`text` (a page or stylesheet of the site) with every CDN resource of `VENDORED` loaded
    from the site: a script or stylesheet tag becomes one tag per shipped file (without
    `integrity`/`crossorigin`) or is removed, GX's S3 logo becomes the site's own and the
    favicon link is relative to `to_root`: the relative path from the file to the site's root
    ("" for index.html, "../../" for static/styles/x.css). Idempotent; other text unchanged."""
    if to_root and not to_root.endswith("/"):
        raise ValueError(f"to_root must be '' or end with '/', got {to_root!r}")

    def tags(match: re.Match, template: str) -> str:
        url = match.group(1)
        if url not in VENDORED:
            return match.group(0)
        tail = "\n" if match.group(0).endswith("\n") else ""
        return "".join(template.format(f"{to_root}{VENDOR_DIR}/{path}") + tail
                       for path in VENDORED[url])

    text = _SCRIPT.sub(lambda m: tags(m, '<script src="{}"></script>'), text)
    text = _LINK.sub(lambda m: tags(m, '<link rel="stylesheet" href="{}">'), text)
    text = _FAVICON.sub(lambda m: f'href="{to_root}{FAVICON}"', text)
    return _LOGO.sub(lambda m: f"{to_root}{LOGO}", text)


def _copy_tree(source, target: Path) -> None:
    """Copy the files of a resources folder into `target`, writing only what differs."""
    for entry in source.iterdir():
        if entry.is_dir():
            _copy_tree(entry, target / entry.name)
            continue
        data = entry.read_bytes()
        dest = target / entry.name
        if dest.is_file() and dest.stat().st_size == len(data) and dest.read_bytes() == data:
            continue
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)


def make_offline(docs: Path, skip: tuple[str, ...] = ()) -> None:
    """Copy the shipped files into `docs`/static/vendor and `localize` every .html and .css of
    the site `docs` (except under the top-level folders in `skip`, and the vendor folder), so
    the site loads nothing from the network. Files already offline are left untouched."""
    docs = Path(docs)
    _copy_tree(STATIC_PACKAGE_DIR, docs / VENDOR_DIR)
    excluded = {docs / name for name in skip} | {docs / VENDOR_DIR}
    for dirpath, dirnames, filenames in os.walk(docs):
        here = Path(dirpath)
        dirnames[:] = [d for d in dirnames if here / d not in excluded]
        depth = len(here.relative_to(docs).parts)
        for name in filenames:
            if not name.endswith((".html", ".css")):
                continue
            path = here / name
            text = path.read_text(encoding="utf-8")
            local = localize(text, "../" * depth)
            if local != text:
                path.write_text(local, encoding="utf-8")
