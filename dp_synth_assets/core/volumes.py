"""Room for a run's outputs, judged before any budget is reserved, from public facts only.

A run that spends writes to three volumes: the public zone (the dataset's artifacts and the
synthetic Parquet), the private zone (the private log, the utility report) and the warehouse
(the encoded view, the marginals, the synthetic table). `estimate` says how many bytes each may
take; `shortfalls` adds up the needs of zones that share one local volume and returns those
whose free space is below the sum. Nothing here reads the source: the estimate depends on the
spec, the published measurements and the free space of the volumes, never on a private row."""

from dataclasses import dataclass

MB = 1024 * 1024
BYTES_PER_VALUE = 8
MARGIN = 2
FLOOR_BYTES = 32 * MB

PUBLIC, PRIVATE, WAREHOUSE = "public zone", "private zone", "warehouse"


@dataclass(frozen=True)
class Outputs:
    """What a run may write, in bytes, per volume (`PUBLIC`, `PRIVATE`, `WAREHOUSE`), and how
    the estimate was made (a public sentence for messages)."""

    needs: dict[str, int]
    how: str


def estimate(rows: int | None, columns: int, synthetic: bool) -> Outputs:
    """The bytes a run may write on each volume.

    The synthetic table, when the run writes it, takes `rows x columns x BYTES_PER_VALUE x
    MARGIN` bytes in the public zone (its Parquet copy) and as much again in the warehouse (the
    table is staged whole before it replaces the old one); `BYTES_PER_VALUE` is a 64-bit value,
    `MARGIN` covers longer strings, Parquet and DuckDB overheads and the write-ahead log. Every
    volume also needs `FLOOR_BYTES` for the small artifacts, the marginals table, the private
    log and the model's unit pickles.

    Args:
        rows: the synthetic rows: the declared `rows:`, or for `rows: same` the noisy row count
            of the published measurements (public); None before a first measurement (only the
            floor is asked).
        columns: the declared columns.
        synthetic: whether the run writes the synthetic table.

    Returns:
        The bytes per zone (`Outputs`).
    """
    table = rows * columns * BYTES_PER_VALUE * MARGIN if synthetic and rows else 0
    floor = f"{FLOOR_BYTES // MB} MB per volume"
    if table:
        how = (f"{rows} rows x {columns} columns x {BYTES_PER_VALUE} bytes x {MARGIN} for the "
               f"synthetic table in the public zone and in the warehouse, plus {floor}")
    elif synthetic:
        how = f"{floor} (no row count is known before the first measurement of `rows: same`)"
    else:
        how = f"{floor} (this run writes no synthetic table)"
    return Outputs({PUBLIC: FLOOR_BYTES + table, PRIVATE: FLOOR_BYTES,
                    WAREHOUSE: FLOOR_BYTES + table}, how)


@dataclass(frozen=True)
class Shortfall:
    """One local volume without room: the zones on it (name, location), what they need
    together and what it has free, in bytes."""

    zones: tuple[tuple[str, str], ...]
    needed: int
    free: int


def shortfalls(needs: dict[str, int], places: dict[str, str],
               volumes: dict[str, tuple[int, int] | None]) -> list[Shortfall]:
    """The volumes whose free space is below the needs of the zones they hold: `needs` bytes
    per zone, `places` its location (for the message), `volumes` its (device, free bytes) or
    None (an object store: not measured). Zones on one device add up."""
    devices: dict[int, list[str]] = {}
    for zone, volume in volumes.items():
        if volume is not None:
            devices.setdefault(volume[0], []).append(zone)
    short = []
    for zones in devices.values():
        needed = sum(needs[z] for z in zones)
        free = volumes[zones[0]][1]
        if free < needed:
            short.append(Shortfall(tuple((z, places[z]) for z in zones), needed, free))
    return short


def megabytes(size: int) -> str:
    """`size` bytes as whole megabytes for a message (at least 1 when not zero)."""
    return f"{max(size // MB, 1 if size else 0)} MB"
