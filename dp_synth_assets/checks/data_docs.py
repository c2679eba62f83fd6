"""GX Data Docs: the checks' verdicts as GX's own static site (open index.html).

`write_data_docs(outcome, d)` renders a `SuiteOutcome` into the site in folder `d`, which holds
the latest outcome of every suite written into it. Guarantees: nothing is written outside `d`;
no value of the data can inject markup (every string GX writes unescaped is HTML-escaped in the
docs copy); writers of one `d` take turns (a lock, and flock across processes); a suite name may
hold only letters, digits, "_" and "-" (`check_docs_name`); the site loads nothing from the
network (`data_docs_offline`). Each guarantee and the findings about GX's renderer behind them:
docs/great_expectations.md, "Data Docs guarantees"."""

import contextlib
import datetime as _dt
import html
import json
import os
import re
import uuid
from pathlib import Path
from typing import Any

from .data_docs_offline import make_offline
from .gx_context import LOCK, context, quiet_environment
from .outcomes import SuiteOutcome


DOCS_STORES_DIR = "gx_stores"  # inside docs_dir: the JSON stores the site is built from
_DOCS_NAME = re.compile(r"[A-Za-z0-9_-]+")
_VIEWS: dict = {}
_VIEWS_PID: int | None = None


def check_docs_name(suite: str) -> None:
    """Raise ValueError unless `suite` can name a page: GX turns a suite name into a path (dots
    become directories, "/" is forbidden), so only letters, digits, "_" and "-"."""
    if not isinstance(suite, str) or not _DOCS_NAME.fullmatch(suite):
        raise ValueError(
            f"suite name {suite!r} cannot name a Data Docs page: use only letters, digits, '_', '-'"
        )


def _docs_result_dict(outcome: SuiteOutcome) -> dict:
    """The validation result to document, as a GX result dict named after `outcome.suite`."""
    raw = outcome.raw
    if isinstance(raw, dict) and isinstance(raw.get("results"), list) and "statistics" in raw:
        text = json.dumps(raw, allow_nan=False)
        base = raw.get("suite_name")
        if isinstance(base, str) and base.startswith(f"{outcome.suite}__"):
            # run_suite's per-call names (suite, data source, asset, batch id) -> the caller's name
            text = text.replace(json.dumps(base)[1:-1], json.dumps(outcome.suite)[1:-1])
        data = json.loads(text)
    elif not outcome.results:
        # e.g. a suite with nothing to check, reported without running GX: an empty page
        now = _dt.datetime.now(_dt.UTC).isoformat()
        data = {
            "success": bool(outcome.success),
            "results": [],
            "statistics": {
                "evaluated_expectations": 0,
                "successful_expectations": 0,
                "unsuccessful_expectations": 0,
                "success_percent": None,
            },
            "suite_parameters": {},
            "meta": {"run_id": {"run_name": None, "run_time": now}, "validation_time": now},
        }
    else:
        raise ValueError(
            f"outcome {outcome.suite!r}: raw is not a GX validation result (e.g. outcomes merged "
            "by hand); document each run_suite outcome instead"
        )
    data["suite_name"] = outcome.suite
    for r in data["results"]:
        # GX 1.24 puts column names, unexpected and observed values and exception tracebacks
        # into the HTML unescaped; escape the strings of these data-derived parts so that no
        # value can inject markup (where GX does escape, such a value shows escaped: "a&lt;b")
        if "result" in r:
            r["result"] = _escape_strings(r["result"])
        if "exception_info" in r:  # (flat or nested by metric id) GX escapes the message only
            r["exception_info"] = _escape_strings(r["exception_info"], keep={"exception_message"})
        config = r.get("expectation_config")
        if isinstance(config, dict) and isinstance(config.get("kwargs"), dict):
            config["kwargs"] = {
                k: v if k == "batch_id" else _escape_strings(v) for k, v in config["kwargs"].items()
            }
    return data


def _escape_strings(obj: Any, keep: frozenset | set = frozenset()) -> Any:
    """HTML-escape every string in a JSON value, except the values of dict keys in `keep`."""
    if isinstance(obj, str):
        return html.escape(obj, quote=True)
    if isinstance(obj, dict):
        return {k: v if k in keep else _escape_strings(v, keep) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_escape_strings(v, keep) for v in obj]
    return obj


def _suite_configs(data: dict) -> list[dict]:
    """The evaluated expectations as suite entries (for the suite's own page)."""
    configs = []
    for r in data["results"]:
        config = r.get("expectation_config")
        if isinstance(config, dict) and isinstance(config.get("type"), str):
            kwargs = {k: v for k, v in (config.get("kwargs") or {}).items() if k != "batch_id"}
            configs.append({"type": config["type"], "kwargs": kwargs, "meta": config.get("meta")})
    return configs


@contextlib.contextmanager
def _directory_lock(path: Path):
    """Exclusive flock on the directory itself, so processes writing one site take turns."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX: the in-process lock only
        yield
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _reuse_views(site: Any) -> None:
    """Give the site builder's sections the process's cached Jinja views. GX builds a fresh Jinja
    Environment per view, so every build would recompile all templates; a view holds
    no per-page state, so the cached ones render the same HTML."""
    global _VIEWS, _VIEWS_PID
    if _VIEWS_PID != os.getpid():
        _VIEWS, _VIEWS_PID = {}, os.getpid()
    # GX internals (1.24): a missing attribute only means no reuse, never a failure
    sections = getattr(site, "site_section_builders", None) or {}
    for holder in [*sections.values(), getattr(site, "site_index_builder", None)]:
        view = getattr(holder, "view_class", None)
        if view is None:  # pragma: no cover
            continue
        key = (
            type(view),
            getattr(view, "custom_styles_directory", None),
            getattr(view, "custom_views_directory", None),
        )
        holder.view_class = _VIEWS.setdefault(key, view)


def _prune_empty_dirs(root: Path) -> None:
    """Remove empty directories under `root` and `root` itself when it ends up empty."""
    if not root.is_dir():
        return
    for dirpath, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):  # not empty
            os.rmdir(dirpath)


def write_data_docs(
    outcome: SuiteOutcome, docs_dir: str | os.PathLike, site_name: str | None = None
) -> Path:
    """Render `outcome` into the GX Data Docs site in `docs_dir` and return its validation page.

    The site holds the latest outcome of every suite written into it: this suite's previous
    result and page are replaced, other suites' stay, and index.html lists them all (and links
    each suite's expectation page). `outcome` is one run_suite outcome (rebuilt from its `raw`),
    or an outcome with no results, shown as an empty page with the outcome's success. The suite
    name must be docs-safe (only letters, digits, "_" and "-"). Errors while writing
    raise; a page GX failed to render raises RuntimeError. `site_name` is the index's title
    (default: the last two components of docs_dir, e.g. "orders/data_docs").
    """
    if not isinstance(outcome, SuiteOutcome):
        raise TypeError(f"expected a SuiteOutcome, got {type(outcome).__name__}")
    check_docs_name(outcome.suite)
    data = _docs_result_dict(outcome)
    quiet_environment()
    import great_expectations as gx
    from great_expectations.core.expectation_validation_result import (
        ExpectationSuiteValidationResultSchema,
    )
    from great_expectations.core.run_identifier import RunIdentifier
    from great_expectations.data_context.types.resource_identifiers import (
        ExpectationSuiteIdentifier,
        ValidationResultIdentifier,
    )
    from great_expectations.render.renderer.site_builder import SiteBuilder

    result = ExpectationSuiteValidationResultSchema().load(data)
    suite = gx.ExpectationSuite(name=outcome.suite, expectations=_suite_configs(data))
    run = data["meta"].get("run_id") if isinstance(data["meta"].get("run_id"), dict) else {}
    run_id = RunIdentifier(run_name=run.get("run_name"), run_time=run.get("run_time"))
    markers = data["meta"].get("batch_markers") or {}
    batch = str(markers.get("pandas_data_fingerprint") or "dataframe")
    suite_key = ExpectationSuiteIdentifier(name=outcome.suite)
    result_key = ValidationResultIdentifier(
        expectation_suite_identifier=suite_key, run_id=run_id, batch_identifier=batch
    )

    docs = Path(docs_dir).resolve()
    docs.mkdir(parents=True, exist_ok=True)
    stores = docs / DOCS_STORES_DIR
    page = docs.joinpath("validations", outcome.suite, *run_id.to_tuple(), f"{batch}.html")
    token = uuid.uuid4().hex[:12]
    names = {"results": f"docs_results__{token}", "suites": f"docs_suites__{token}"}

    def backend(base: Path, **extra: Any) -> dict:
        return {"class_name": "TupleFilesystemStoreBackend", "base_directory": str(base), **extra}

    with LOCK, _directory_lock(docs):
        ctx = context()
        added: list[str] = []
        try:
            results_store = ctx.add_store(names["results"], {
                "class_name": "ValidationResultsStore",
                "store_backend": backend(stores / "validations", suppress_store_backend_id=True),
            })
            added.append(names["results"])
            suites_store = ctx.add_store(names["suites"], {
                "class_name": "ExpectationsStore",
                "store_backend": backend(stores / "expectations", suppress_store_backend_id=True),
            })
            added.append(names["suites"])
            # the latest run only: drop this suite's older results; building the index then
            # deletes every page whose result is gone (GX's skip_and_clean_missing)
            for key in results_store.list_keys():
                if key.expectation_suite_identifier.name == outcome.suite:
                    results_store.remove_key(key)
            results_store.set(result_key, result)
            suites_store.set(suite_key, suite)
            site = SiteBuilder(
                data_context=ctx,
                store_backend=backend(docs),
                site_name=site_name or "/".join(docs.parts[-2:]),
                show_how_to_buttons=False,
                site_section_builders={
                    "expectations": {"source_store_name": names["suites"]},
                    "validations": {"source_store_name": names["results"]},
                    "profiling": "None",
                },
            )
            _reuse_views(site)
            site.build(resource_identifiers=[result_key, suite_key])
            make_offline(docs, skip=(DOCS_STORES_DIR,))
        finally:
            for name in added:
                with contextlib.suppress(Exception):
                    ctx.delete_store(name)
            for root in (docs / "validations", stores / "validations"):
                _prune_empty_dirs(root / outcome.suite)
    if not page.is_file():
        raise RuntimeError(f"GX did not render the Data Docs page for {outcome.suite!r} ({page})")
    return page
