"""Failures of private stages: a generic public message, the details in a private log.

The Dagster event log is public (docs/decisions/0003-privacy-perimeter.md). `private_errors`
wraps every stage that reads private data: any exception becomes a `dagster.Failure`, raised
with no chained exception, whose description names the dataset, the stage and the kind of
problem, never a value, a count or a row, and gives the path of the dataset's private log
(`<warehouse dir>/private/<dataset>/private.log`, mode 0600), where the full message and
traceback go. What the public description may say, and why it does not depend on the rows'
values: docs/decisions/0003-privacy-perimeter.md, "As implemented: private_log.py"."""

import functools
import os
import traceback
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg
import duckdb

from dp_synth_assets.resources.warehouse import WarehouseResource

from .infra.private_files import OWNER_ONLY, make_private_dir
from .core.domain import SchemaError
from .core.source import SourceError
from .infra.store import append_bytes, location
from .writes import SPENT_STAYS, failed_write

LOG_NAME = "private.log"

VALUE_ERRORS = (duckdb.ConversionException, duckdb.OutOfRangeException,
                duckdb.InvalidInputException, ArithmeticError, ValueError)
READ_ERRORS = (duckdb.IOException, duckdb.CatalogException, OSError)


def private_dir(warehouse: WarehouseResource, dataset: str | None = None):
    """The private zone's folder (`WarehouseResource.private_root`: `private_dir`, else
    `<folder of database>/private`; made 0700 on a local disk), or its folder for one dataset."""
    base = warehouse.private_root()
    return make_private_dir(base / dataset if dataset else base)


def private_log_path(warehouse: WarehouseResource, dataset: str):
    """Where the dataset's private log is; its folder is made when an entry is written
    (`append_private_log`), so that an unwritable private zone fails the log's write only."""
    return warehouse.private_root() / dataset / LOG_NAME


def append_private_log(path, dataset: str, stage: str, run_id: str,
                       error: BaseException, public: str) -> None:
    """Append one failure entry (the public message, the full traceback) to the owner-only log
    at `path` (`append_private_note`)."""
    append_private_note(path, dataset, stage, run_id, f"public message: {public}\n"
                        + "".join(traceback.format_exception(error)).rstrip("\n"))


def append_private_note(path, dataset: str, stage: str, run_id: str, text: str) -> None:
    """Append one entry (time, run, stage, `text`) to the owner-only log at `path`, created 0600
    in a 0700 folder; one write per entry (O_APPEND; on an object store the log object is
    rewritten, `store.append_bytes`). Also what a stage found in the rows for the owner
    (`source.Fallbacks.report`), written on every run whatever the rows hold, so whether the
    write fails does not depend on them."""
    make_private_dir(location(path).parent)
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    entry = f"==== {when} dataset {dataset!r} stage {stage!r} run {run_id}\n{text}\n\n"
    append_bytes(path, entry.encode(errors="replace"), OWNER_ONLY)


def problem_kind(error: BaseException) -> str:
    """The public kind of an unexpected exception: no text of the exception itself."""
    if isinstance(error, VALUE_ERRORS):
        return ("a value of the source does not fit its declared spec (kind, bounds, "
                "categories or `missing:`)")
    if isinstance(error, READ_ERRORS):
        return "the source or the warehouse could not be read"
    return "an unexpected error"


def public_message(error: BaseException, dataset: str, stage: str, log,
                   unlogged: str | None = None, written: str | None = None) -> str:
    """The description of the public failure for `error` raised in `stage`
    (0003-privacy-perimeter.md); `unlogged`: why the private log could not be written, said instead
    of pointing to it; `written`: the failed write `error` is (`writes.failed_write`), said instead
    of its kind."""
    if isinstance(error, SourceError):
        reason = error.public
    elif isinstance(error, SchemaError):
        reason = str(error)
    elif written is not None:
        reason = f"{written}. Make it writable, with room, and run again. {SPENT_STAYS}"
    else:
        reason = problem_kind(error)
    if f"dataset {dataset!r}" not in reason:
        reason = f"dataset {dataset!r}: {reason}"
    if unlogged is not None:
        return f"{reason} (stage {stage!r}). {unlogged}"
    return (f"{reason} (stage {stage!r}). The data owner finds the details (the full message "
            f"and traceback) in the private log {log}")


def log_privately(log, dataset: str, stage: str, run_id: str, error: BaseException,
            public: str) -> str | None:
    """Append the entry to the private log; None when it is written, else the public sentence
    saying it could not be (the exception's type only: its text may quote the private one)."""
    try:
        append_private_log(log, dataset, stage, run_id, error, public)
        return None
    except Exception as failure:  # noqa: BLE001 - any failure to log is reported the same way
        return (f"The private log {log} could not be written ({type(failure).__name__}), so "
                f"the details of this failure are lost: make the private zone writable, with "
                f"room, and run again.")


@contextmanager
def private_errors(warehouse: WarehouseResource, dataset: str, stage: str, run_id: str):
    """Turn any exception of the block into a generic public `dagster.Failure` and log it privately
    (0003-privacy-perimeter.md). A `dagster.Failure` of the block is logged and passes unchanged."""
    try:
        yield
        return
    except dg.Failure as e:
        log = private_log_path(warehouse, dataset)
        unlogged = log_privately(log, dataset, stage, run_id, e, e.description or "")
        if unlogged is None:
            raise
        failure = dg.Failure(description=f"{e.description} {unlogged}", metadata=e.metadata)
    except Exception as e:  # noqa: BLE001 - every exception of a private stage is private
        log = private_log_path(warehouse, dataset)
        try:
            written = failed_write(warehouse, dataset, e)
        except Exception:  # noqa: BLE001 - a diagnosis that fails leaves the failure's kind
            written = None
        message = public_message(e, dataset, stage, log, written=written)
        unlogged = log_privately(log, dataset, stage, run_id, e, message)
        failure = dg.Failure(description=message if unlogged is None else
                             public_message(e, dataset, stage, log, unlogged, written))
    # raised outside the handlers and `from None`: nothing is published chained to it, neither
    # the stage's exception (its text may quote a private value) nor the log write's (caught in
    # `log_privately`); the context manager's exit would otherwise attach the stage's as context
    raise failure from None


def private_step(dataset: str, stage: str):
    """Decorate an asset's compute function (called as `fn(context, **resources)`, with a
    `warehouse` resource) so that its whole body runs under `private_errors`."""
    def decorate(fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            context = kwargs.get("context", args[0] if args else None)
            with private_errors(kwargs["warehouse"], dataset, stage, context.run_id):
                return fn(*args, **kwargs)
        return wrapped
    return decorate
