"""A run's writes: checked before it reserves budget, named when one fails after.

`check_writes` runs in a run's first spending stage, before its budget is reserved: each volume
the run writes takes a real probe write (the warehouse a probe table), and each local volume
must have the room `core.volumes.estimate` asks. A refusal is a `dagster.Failure` naming the
volume, the cause and the fix; nothing is reserved or spent. A write that fails once budget is
spent is published as a write failure naming the volume and the exception type, never with the
engine's text (`write_failure`, `public_zone_writes`, `warehouse_writes`, `failed_write`); what
the run charged stays recorded, and only its unspent reservation is released."""

import errno
import os
import secrets
from contextlib import contextmanager
from pathlib import Path

import dagster as dg
import duckdb

from dp_synth_assets.resources.warehouse import WarehouseResource

from .budget import PRIVATE_STAGES, DatasetBudget, stages_in_run
from .infra.store import RunStore, location, probe_write, volume_of
from .core.sql import bookkeeping, ident, sql
from .core.volumes import MB, PRIVATE, PUBLIC, WAREHOUSE, estimate, megabytes, shortfalls

SETTINGS = {
    PUBLIC: "DP_SYNTH_PUBLIC, or `public_dir` of the factory or the component",
    PRIVATE: "DP_SYNTH_PRIVATE, or `private_dir` of the factory or the component",
    WAREHOUSE: "DP_SYNTH_WAREHOUSE, or `warehouse` of the factory or the component",
}
# errors a local write raises that no read does
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG})
WRITE_ERRORS = (OSError, duckdb.IOException)
NOTHING_SPENT = "Nothing was reserved or spent."
SPENT_STAYS = ("What this run charged to the privacy ledger stays charged; its unspent "
               "reservation is released.")


def places(warehouse: WarehouseResource, dataset: str) -> dict[str, str]:
    """Where the run of `dataset` writes, per volume: the dataset's public folder, the private
    zone, the warehouse file."""
    return {PUBLIC: str(location(warehouse.public_dir) / dataset),
            PRIVATE: str(warehouse.private_root()),
            WAREHOUSE: str(Path(warehouse.database).resolve())}


def folders(warehouse: WarehouseResource, dataset: str) -> dict[str, object]:
    """The folder each volume's probe goes to (the warehouse's: beside its file, where DuckDB
    writes its write-ahead log), the warehouse first: the writes of a stage that are not
    wrapped by `public_zone_writes` go there."""
    where = places(warehouse, dataset)
    return {WAREHOUSE: Path(where[WAREHOUSE]).parent, PUBLIC: where[PUBLIC],
            PRIVATE: where[PRIVATE]}


def describe(error: BaseException) -> str:
    """A write error, publicly: its type and, for an OS error, the system's sentence for its
    code (never the exception's own text)."""
    code = getattr(error, "errno", None)
    if isinstance(error, OSError) and code:
        return f"{type(error).__name__}: {os.strerror(code)}"
    return type(error).__name__


def planned_rows(rows: int | str, warehouse: WarehouseResource, dataset: str) -> int | None:
    """The synthetic rows the run will write, from public facts: the declared `rows:` setting
    `rows`, or for `rows: same` the noisy row count of the published measurements (None before
    any)."""
    if rows != "same":
        return int(rows)
    try:
        published = RunStore(places(warehouse, dataset)[PUBLIC], dataset)
        return max(int(round(published.measurements().noisy_total)), 0)
    except Exception:  # noqa: BLE001 - no published measurements yet: no row estimate
        return None


def probe_warehouse(warehouse: WarehouseResource) -> None:
    """Create and drop a probe table in the warehouse on a writable connection. A warehouse that
    does not exist yet is not created here: the probe file in its folder stands for it, and
    the stage creates it, or refuses a table source it lacks (`source_access.source_connection`)."""
    if not Path(warehouse.database).exists():
        return
    table = ident(bookkeeping(f"probe_{secrets.token_hex(8)}"))
    with warehouse.connect() as con:
        con.execute(sql("probe_table", table=table))
        con.execute(sql("drop_table", table=table))


def refused(dataset: str, zone: str, where: str, error: BaseException) -> dg.Failure:
    """The public refusal of a run whose `zone` at `where` cannot be written: the volume, the
    exception type, the fix and that nothing was spent."""
    return dg.Failure(description=(
        f"dataset {dataset!r}: the {zone} {where} cannot be written ({describe(error)}). Make "
        f"it writable by this process, with room, or set another location ({SETTINGS[zone]}), "
        f"then run again. {NOTHING_SPENT}"), metadata={"dataset": dataset, "volume": where})


def check_writes(context, warehouse: WarehouseResource, dataset: str, stage: str,
                 budget: DatasetBudget, rows: int | str, columns: int) -> None:
    """Refuse, before the run's first spending stage takes the dataset and reserves budget, a
    run whose volumes cannot take its writes (module docstring): `rows` is the dataset's
    `rows:` setting, `columns` its number of columns. Other stages pass."""
    in_run = stages_in_run(context, dataset)
    private = [s for s in PRIVATE_STAGES if s in in_run]
    if not private or stage != private[0] or budget.reservation(private) <= 0:
        return
    where = places(warehouse, dataset)
    failure = None
    for zone, folder in folders(warehouse, dataset).items():
        try:
            probe_write(folder, 0o700 if zone == PRIVATE else None)
        except Exception as e:  # noqa: BLE001 - any failure to write: the zone is unusable
            failure = refused(dataset, zone, where[zone], e)
            break
    if failure is None:
        try:
            probe_warehouse(warehouse)
        except WRITE_ERRORS as e:
            failure = refused(dataset, WAREHOUSE, where[WAREHOUSE], e)
    if failure is not None:
        raise failure  # outside the handler: the write's own text is never chained
    outputs = estimate(planned_rows(rows, warehouse, dataset), columns,
                       "synthetic" in in_run)
    volumes = {zone: volume_of(folder) for zone, folder in folders(warehouse, dataset).items()}
    short = shortfalls(outputs.needs, where, volumes)
    if not short:
        return
    first = short[0]
    names = " and ".join(f"the {zone} {path}" for zone, path in first.zones)
    settings = "; ".join(SETTINGS[zone] for zone, _ in first.zones)
    raise dg.Failure(description=(
        f"dataset {dataset!r}: the volume holding {names} has {megabytes(first.free)} free, "
        f"and this run's outputs need about {megabytes(first.needed)} there (estimated as "
        f"{outputs.how}). Free space on that volume, or move the location to a larger one "
        f"({settings}), then run again. {NOTHING_SPENT}"),
        metadata={"dataset": dataset, "free_mb": first.free // MB,
                  "needed_mb": first.needed // MB})


def write_failure(dataset: str, zone: str, where: str, error: BaseException,
                  what: str = "") -> dg.Failure:
    """The public failure of a write to `zone` at `where` that raised `error` (module doc)."""
    written = f" {what}" if what else ""
    return dg.Failure(description=(
        f"dataset {dataset!r}: writing{written} to the {zone} {where} failed "
        f"({describe(error)}). Make it writable, with room, and run again. {SPENT_STAYS}"),
        metadata={"dataset": dataset, "volume": where})


@contextmanager
def volume_writes(dataset: str, zone: str, where: str, what: str = ""):
    """Publish a write error of the block as a write failure of `zone` at `where`
    (`write_failure`); a `dagster.Failure` passes unchanged."""
    failure = None
    try:
        yield
    except dg.Failure:
        raise
    except WRITE_ERRORS as e:
        failure = write_failure(dataset, zone, where, e, what)
    if failure is not None:
        raise failure from None


def public_zone_writes(dataset: str, where: str, what: str = ""):
    """`volume_writes` of the public zone at `where`."""
    return volume_writes(dataset, PUBLIC, where, what)


def warehouse_writes(warehouse: WarehouseResource, dataset: str, what: str = ""):
    """`volume_writes` of the warehouse."""
    return volume_writes(dataset, WAREHOUSE, places(warehouse, dataset)[WAREHOUSE], what)


def failed_write(warehouse: WarehouseResource, dataset: str, error: BaseException) -> str | None:
    """The public sentence saying which volume a failed write went to, when `error` (an I/O
    error of a stage that reads and writes) is one: a volume of the run that now fails a probe
    write or has under 1 MB free, else the zone holding the file of an OS error whose code only
    a write raises. None: not recognized as a write (it is published as a read failure)."""
    if not isinstance(error, WRITE_ERRORS):
        return None
    where = places(warehouse, dataset)
    for zone, folder in folders(warehouse, dataset).items():
        try:
            probe_write(folder, 0o700 if zone == PRIVATE else None)
            volume = volume_of(folder)
        except Exception as e:  # noqa: BLE001 - the volume cannot be written now
            return f"writing to the {zone} {where[zone]} failed ({describe(error)}; a probe " \
                   f"write there fails too: {describe(e)})"
        if volume is not None and volume[1] < MB:
            return f"writing to the {zone} {where[zone]} failed ({describe(error)}; its " \
                   f"volume has {megabytes(volume[1])} free)"
    filename = getattr(error, "filename", None)
    if isinstance(error, OSError) and error.errno in WRITE_ERRNOS and filename:
        path = os.path.abspath(str(filename))
        for zone, folder in folders(warehouse, dataset).items():
            if path.startswith(os.path.abspath(str(folder)) + os.sep):
                return f"writing to the {zone} {where[zone]} failed ({describe(error)})"
    return None
