"""Data Docs render offline: the site built by `write_data_docs` loads no stylesheet, script,
font or image from the network, and in a real browser with the network blocked its pages are
styled and scripted (Bootstrap's CSS applied, jQuery and bootstrap-table ran, Font Awesome's font
loaded, the logo shown, no failed load in the console).

The browser part needs chromium and chromedriver on PATH (`.ci/install-browser` installs
Debian's); without them those tests are skipped. Its control: the same pages as GX writes them
(the offline step taken out, a fault injected) stay unstyled and unscripted in that browser, so
the network is really blocked and the probe can tell the difference.
"""

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest

from dp_synth_assets.checks import data_docs, data_docs_offline as offline
from dp_synth_assets.checks.gx import Expectation, run_suite

REPO = Path(__file__).resolve().parents[1]
GX_DIR = Path(importlib.util.find_spec("great_expectations").submodule_search_locations[0])
GX_TEMPLATES = GX_DIR / "render" / "view" / "templates"
STATIC = Path(str(offline.STATIC_PACKAGE_DIR))

# a resource the browser fetches by itself (not a link a reader may follow), by absolute or
# protocol-relative URL
EXTERNAL_RESOURCE = re.compile(
    r"(?:<(?:script|img|iframe|audio|video|source|embed|input)\b[^>]*?\bsrc\s*=\s*[\"']?\s*"
    r"(?:https?:)?//"
    r"|<link\b[^>]*?\bhref\s*=\s*[\"']?\s*(?:https?:)?//"
    r"|\bsrcset\s*=\s*[\"'][^\"']*(?:https?:)?//"
    r"|url\(\s*[\"']?\s*(?:https?:)?//"
    r"|@import\s+(?:url\()?\s*[\"']?\s*(?:https?:)?//)[^\"'\s)>]*", re.I)
LOCAL_REFERENCE = re.compile(r"(?:src|href)=\"([^\"#:]*static/(?:vendor|images)/[^\"]+)\""
                             r"|url\('([^'#:]*static/images/[^']+)'\)")


def external_resources(site: Path) -> dict[str, list[str]]:
    """Every .html and .css file of `site` (not its JSON stores) -> its external resources."""
    found = {}
    for path in sorted([*site.rglob("*.html"), *site.rglob("*.css")]):
        rel = path.relative_to(site)
        if rel.parts[0] == data_docs.DOCS_STORES_DIR:
            continue
        hits = [m.group(0) for m in EXTERNAL_RESOURCE.finditer(path.read_text(encoding="utf-8"))]
        if hits:
            found[rel.as_posix()] = hits
    return found


def frame() -> pd.DataFrame:
    return pd.DataFrame({"status": ["new", "paid", "void", "paid"], "amount": [1.0, 2.5, 3.0, 9.0]})


def build_site(docs: Path) -> dict[str, Path]:
    """A two-suite site (one passing, one failing with unexpected values); its pages by kind."""
    good = run_suite(frame(), "orders_domain", [
        Expectation("ExpectColumnValuesToBeInSet",
                    {"column": "status", "value_set": ["new", "paid", "void"]}),
        Expectation("ExpectTableRowCountToEqual", {"value": 4})], docs_dir=docs)
    bad = run_suite(frame(), "orders_bounds", [
        Expectation("ExpectColumnValuesToBeBetween",
                    {"column": "amount", "min_value": 0, "max_value": 5}),
        Expectation("ExpectColumnValuesToBeInSet", {"column": "status", "value_set": ["new"]})],
        docs_dir=docs)
    assert good.success and not bad.success
    return {"index": docs / "index.html", "validation": bad.docs_page,
            "passed": good.docs_page, "expectations": docs / "expectations" / "orders_bounds.html"}


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> dict[str, Path]:
    return build_site(tmp_path_factory.mktemp("offline") / "data_docs")


@pytest.fixture(scope="module")
def gx_site(tmp_path_factory) -> dict[str, Path]:
    """The same site as GX writes it: the offline step taken out (an injected fault)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(data_docs, "make_offline", lambda docs, skip=(): None)
        return build_site(tmp_path_factory.mktemp("gx") / "data_docs")


# ------------------------------------------------------------------------------ the rewriting

GX_HEAD = """\
<head>
    <link rel="stylesheet" href="https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css"/>
    <style>  .navbar-brand a {
    background: url('https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/full_logo_dark.png') 0 0 no-repeat;
  }</style>
<script src="https://cdn.jsdelivr.net/npm/vega@5"></script>
<link rel="stylesheet" href="https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css">
<script src="https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js" integrity="sha384-JjSm" crossorigin="anonymous"></script>
<script src="https://cdn.example.org/unknown.js"></script>
<link rel="shortcut icon" href="../../../static/images/favicon.ico" type="image/x-icon"/>
</head>
<img class="NO-CACHE" src="https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/logo-long.png?d=20261127T124135.161739Z"/>
<a href="https://greatexpectations.io">Great Expectations</a>
"""

LOCAL_HEAD = """\
<head>
    <link rel="stylesheet" href="../../static/vendor/bootstrap-4.3.1/css/bootstrap.min.css">
    <style>  .navbar-brand a {
    background: url('../../static/images/logo-long.png') 0 0 no-repeat;
  }</style>
<link rel="stylesheet" href="../../static/vendor/fontawesome-free-6.6.0/css/fontawesome.min.css">
<link rel="stylesheet" href="../../static/vendor/fontawesome-free-6.6.0/css/solid.min.css">
<script src="../../static/vendor/bootstrap-4.3.1/js/bootstrap.min.js"></script>
<script src="https://cdn.example.org/unknown.js"></script>
<link rel="shortcut icon" href="../../static/images/favicon.ico" type="image/x-icon"/>
</head>
<img class="NO-CACHE" src="../../static/images/logo-long.png"/>
<a href="https://greatexpectations.io">Great Expectations</a>
"""


def test_localize_points_gx_cdn_tags_at_the_site_and_leaves_the_rest():
    assert offline.localize(GX_HEAD, "../../") == LOCAL_HEAD
    assert offline.localize(LOCAL_HEAD, "../../") == LOCAL_HEAD  # idempotent
    index = offline.localize(GX_HEAD, "")
    assert 'href="static/vendor/bootstrap-4.3.1/css/bootstrap.min.css"' in index
    assert 'href="static/images/favicon.ico"' in index
    assert offline.localize("<p>no resources</p>", "../") == "<p>no resources</p>"
    with pytest.raises(ValueError, match="to_root"):
        offline.localize(GX_HEAD, "..")


def test_every_cdn_resource_in_gx_templates_is_replaced():
    """A GX release that loads a new CDN file (or drops one) fails here, not in a user's
    air-gapped browser."""
    urls = set()
    for template in sorted(GX_TEMPLATES.glob("*.j2")):
        text = template.read_text(encoding="utf-8")
        urls |= set(re.findall(r"<script\b[^>]*\bsrc=\"(https?://[^\"]+)\"", text))
        urls |= set(re.findall(r"<link\b[^>]*\bhref=\"(https?://[^\"]+)\"", text))
        local = offline.localize(text, "")
        assert not EXTERNAL_RESOURCE.findall(local), template.name
    assert urls == set(offline.VENDORED)
    styles = (GX_DIR / "render" / "view" / "static" / "styles").glob("*.css")
    for css in styles:
        assert not EXTERNAL_RESOURCE.findall(offline.localize(css.read_text(), "../../")), css


def test_no_check_renders_a_chart_so_vega_is_not_needed():
    """Vega is not shipped: GX draws charts only in the renderers of a few expectations; none of
    them is among those dp-synth's checks run."""
    used = set(re.findall(r"\"(Expect[A-Za-z]+)\"", (REPO / "dp_synth_assets" / "checks" /
                                                    "suites.py").read_text()))
    assert "ExpectColumnPairValuesToBeEqual" in used and len(used) >= 4
    charts = {path.stem for path in (GX_DIR / "expectations" / "core").glob("expect_*.py")
              if "RenderedGraphContent" in path.read_text()}
    assert "expect_column_kl_divergence_to_be_less_than" in charts  # the search finds them
    snake = {re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower() for name in used}
    assert not snake & charts
    assert all(paths == () for url, paths in offline.VENDORED.items() if "vega" in url)


def test_the_shipped_files_are_what_the_pages_load_with_their_licenses():
    shipped = {p.relative_to(STATIC).as_posix() for p in STATIC.rglob("*") if p.is_file()}
    loaded = {path for paths in offline.VENDORED.values() for path in paths}
    assert loaded <= shipped
    fonts = set()
    for css in (p for p in loaded if p.endswith(".css")):
        refs = re.findall(r"url\(\s*[\"']?([^)\"']+)", (STATIC / css).read_text())
        for ref in (r for r in refs if not r.startswith("data:")):
            target = (STATIC / css).parent / ref
            if target.suffix == ".ttf":  # the woff2 beside it is loaded first; no ttf shipped
                target = target.with_suffix(".woff2")
            assert target.is_file(), f"{css} refers to {ref}"
            fonts.add(target.resolve().relative_to(STATIC.resolve()).as_posix())
    assert fonts == {"fontawesome-free-6.6.0/webfonts/fa-solid-900.woff2"}
    notes = (STATIC / "LICENSES.txt").read_text()
    folders = {p.split("/")[0] for p in loaded}
    texts = {p.split("/")[1] for p in shipped if p.startswith("license-texts/")}
    for folder in folders:
        assert folder in notes, folder
        package = re.sub(r"-(\d+\.\d+)(\.\d+)?$", "", folder)
        assert any(t.startswith(package) for t in texts), folder
    assert shipped == loaded | fonts | {"LICENSES.txt"} | {f"license-texts/{t}" for t in texts}
    size = sum((STATIC / p).stat().st_size for p in shipped)
    assert size < 1_200_000, size  # 1,045,979 bytes: only what the pages use


# -------------------------------------------------------------------------- the built site

def test_a_built_site_loads_nothing_from_the_network(site, gx_site):
    docs = site["index"].parent
    assert external_resources(docs) == {}
    # the same scan finds GX's own references: it can fail
    raw = external_resources(gx_site["index"].parent)
    assert set(raw) >= {"index.html", "expectations/orders_bounds.html",
                        "static/styles/data_docs_default_styles.css"}
    assert any("jquery" in hit for hits in raw.values() for hit in hits)

    # every local reference of every page resolves to a file of the site
    pages = [p for p in docs.rglob("*.html") if data_docs.DOCS_STORES_DIR not in p.parts]
    assert len(pages) == 5
    for page in pages:
        refs = [a or b for a, b in LOCAL_REFERENCE.findall(page.read_text(encoding="utf-8"))]
        assert len(refs) >= 14, page  # 6 scripts, 7 stylesheets, favicon (+ logos)
        for ref in refs:
            assert (page.parent / ref).resolve().is_file(), f"{page.relative_to(docs)}: {ref}"
    assert (docs / "static" / "vendor" / "LICENSES.txt").is_file()


def test_rewriting_again_changes_nothing(site):
    docs = site["index"].parent
    files = [p for p in docs.rglob("*") if p.is_file()]
    before = {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files}
    offline.make_offline(docs, skip=(data_docs.DOCS_STORES_DIR,))
    assert {p: (p.stat().st_mtime_ns, p.read_bytes()) for p in files} == before


# -------------------------------------------------------------------------------- a browser

CHROMIUM = shutil.which("chromium")
CHROMEDRIVER = shutil.which("chromedriver")
needs_browser = pytest.mark.skipif(
    not (CHROMIUM and CHROMEDRIVER),
    reason="needs chromium and chromedriver; run .ci/install-browser to install them")

# what a person would see, read once the page's ready handlers ran (jQuery calls them in order,
# asynchronously: bootstrap-table builds its tables in one) and its fonts are settled
PROBE = """
const done = arguments[arguments.length - 1];
const ready = window.jQuery ? new Promise(resolve => jQuery(resolve)) : Promise.resolve();
// bootstrap-table may build its tables after the ready handlers, on a loaded machine: wait
// (at most 20 s) until every table it is asked to build is built (wrapped in its
// div.bootstrap-table); a table nested in another's cell is not built itself, it is copied with
// that cell's content
const unbuilt = () => [...document.querySelectorAll('table[data-toggle="table"]')].filter(
  t => !t.parentElement.closest('table') && !t.closest('div.bootstrap-table')).length;
const built = () => new Promise(resolve => {
  const start = Date.now();
  const poll = () => {
    if (!window.jQuery || unbuilt() === 0 || Date.now() - start > 20000) resolve();
    else setTimeout(poll, 100);
  };
  poll();
});
ready.then(built).then(() => document.fonts.ready).then(() => {
  const nav = document.querySelector('nav.navbar');
  const icon = document.querySelector('.fas');
  done({
    jquery: typeof window.jQuery,
    bootstrap_table: window.jQuery ? typeof jQuery.fn.bootstrapTable : 'undefined',
    datepicker: window.jQuery ? typeof jQuery.fn.datepicker : 'undefined',
    bootstrap_js: window.jQuery ? typeof jQuery.fn.modal : 'undefined',
    popper: typeof window.Popper,
    navbar_display: getComputedStyle(nav).display,
    rendered_tables: document.querySelectorAll('div.bootstrap-table').length,
    unbuilt_tables: unbuilt(),
    filter_controls: document.querySelectorAll('.filter-control').length,
    icons: document.querySelectorAll('.fas').length,
    icon_font: icon ? getComputedStyle(icon, '::before').fontFamily : null,
    icon_font_loaded: [...document.fonts].some(
      f => f.family.includes('Font Awesome') && f.status === 'loaded'),
    images_shown: [...document.images].every(i => i.complete && i.naturalWidth > 0),
  });
});
"""


@pytest.fixture(scope="module")
def offline_browser():
    """Headless Chromium that cannot reach any host: every name resolves to nothing and every
    request goes to a proxy that does not exist."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1000",
                "--disable-dev-shm-usage", "--host-resolver-rules=MAP * ~NOTFOUND",
                "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    driver.set_script_timeout(90)
    try:
        yield driver
    finally:
        driver.quit()


def look_at(driver, page: Path) -> tuple[dict, list[str]]:
    driver.get_log("browser")  # drop what earlier pages logged
    driver.get(page.resolve().as_uri())
    seen = driver.execute_async_script(PROBE)
    errors = [e["message"] for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    return seen, errors


@needs_browser
def test_pages_are_styled_and_scripted_in_a_browser_without_network(offline_browser, site):
    for kind, page in site.items():
        seen, errors = look_at(offline_browser, page)
        assert errors == [], (kind, errors)
        context = json.dumps({kind: seen})
        assert seen["jquery"] == "function", context
        assert seen["bootstrap_table"] == seen["datepicker"] == "function", context
        assert seen["bootstrap_js"] == seen["popper"] == "function", context
        assert seen["navbar_display"] == "flex", context  # Bootstrap's .navbar (unstyled: block)
        # bootstrap-table built its tables, every one it was asked to
        assert seen["rendered_tables"] >= 1 and seen["unbuilt_tables"] == 0, context
        assert seen["images_shown"], context  # the logo
        if kind != "expectations":  # the status icons: Font Awesome's solid font
            assert seen["icons"] >= 1 and seen["icon_font_loaded"], context
            assert "Font Awesome" in seen["icon_font"], context
        if kind == "index":  # the filter row over the runs, with its date picker
            assert seen["filter_controls"] >= 5, context


@needs_browser
def test_pages_as_gx_writes_them_are_bare_in_that_browser(offline_browser, gx_site):
    seen, errors = look_at(offline_browser, gx_site["validation"])
    assert seen["jquery"] == "undefined" and seen["navbar_display"] == "block", seen
    assert seen["rendered_tables"] == 0 and seen["unbuilt_tables"] > 0, seen
    assert not seen["icon_font_loaded"], seen
    assert any("jquery" in e for e in errors), errors  # the CDN load failed
