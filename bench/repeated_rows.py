"""The checks' count of repeated rows under a DuckDB memory limit, alone: sorted keys against the
count(DISTINCT) it replaced.

    .venv/bin/python bench/repeated_rows.py --rows 10000000 100000000 --limits 1GB 200MB
    .venv/bin/python bench/repeated_rows.py --rows 20000 --limits 100MB    # smoke

For each row count, a DuckDB file under bench/work/repeated_rows/ holds a table of 15 columns of
random codes (the scale table's domain sizes, so nearly every row is distinct) with 1,020 rows
planted again (1,000 once, 10 three times), kept between runs. For each limit and each method, a
fresh process opens it read-only with that `memory_limit` and does what `SyntheticTable.read`
does: copies the codes into the narrow temporary table (`marginals.narrow_codes`) and counts the
repeated rows, `sort` with `marginals.repeated_rows` (sql/repeated_rows.sql), `distinct` with
`count(*) - count(DISTINCT key)` over the same key (the query before). Recorded: the count (or
DuckDB's error), the copy's and the count's seconds, the process's peak resident memory (VmHWM) and
/proc/loadavg before and after, into bench/results/repeated_rows.json.
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import RESULTS, WORK  # noqa: E402
sys.path.insert(0, str(ROOT))
WORK = WORK / "repeated_rows"
RESULTS = RESULTS / "repeated_rows.json"
SIZES = [2, 3, 5, 7, 10, 12, 16, 20, 24, 30, 40, 50, 8, 9, 11]
DOMAIN = {f"c{i}": size for i, size in enumerate(SIZES)}
PLANTED = 1000 + 2 * 10


def ensure_table(rows: int) -> Path:
    """The table of `rows` random rows plus the planted repeats (written once)."""
    import duckdb

    database = WORK / f"codes_{rows}.duckdb"
    if database.exists():
        return database
    WORK.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(database))
    codes = ", ".join(f"CAST(floor(random() * {s}) AS UTINYINT) AS {c}" for c, s in DOMAIN.items())
    con.execute("SELECT setseed(0.5)")
    con.execute(f"CREATE TABLE drawn AS SELECT {codes} FROM range({rows})")
    con.execute("CREATE TABLE codes AS SELECT * FROM drawn UNION ALL "
                "SELECT * FROM (SELECT * FROM drawn LIMIT 1000) UNION ALL "
                "SELECT * FROM (SELECT * FROM drawn LIMIT 10) UNION ALL "
                "SELECT * FROM (SELECT * FROM drawn LIMIT 10)")
    con.execute("DROP TABLE drawn")
    con.close()
    return database


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().strip()


def peak_rss_mb() -> float:
    """This process's peak resident memory (VmHWM: ru_maxrss would include the parent's, which
    a forked and exec'd child inherits)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(args) -> None:
    import duckdb

    from dp_synth_assets.core import marginals as margs

    out = {"loadavg": [loadavg()]}
    con = duckdb.connect(args.database, read_only=True, config={"memory_limit": args.limit})
    started = time.perf_counter()
    try:
        with margs.narrow_codes(con, "codes", list(DOMAIN), DOMAIN) as codes:
            out["copy_seconds"] = round(time.perf_counter() - started, 2)
            started = time.perf_counter()
            if args.method == "sort":
                out["repeated"] = margs.repeated_rows(con, codes, DOMAIN)
            else:
                out["repeated"] = int(con.execute(
                    f"SELECT count(*) - count(DISTINCT {margs.row_key(DOMAIN)}) FROM {codes}"
                ).fetchone()[0])
    except duckdb.Error as e:
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
    out["count_seconds"] = round(time.perf_counter() - started, 2)
    out["peak_rss_mb"] = peak_rss_mb()
    out["loadavg"].append(loadavg())
    print("RESULT " + json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[10_000_000])
    parser.add_argument("--limits", nargs="+", default=["1GB"])
    parser.add_argument("--methods", nargs="+", default=["sort", "distinct"],
                        choices=["sort", "distinct"])
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--database", help=argparse.SUPPRESS)
    parser.add_argument("--limit", help=argparse.SUPPRESS)
    parser.add_argument("--method", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    records = []
    for rows in args.rows:
        database = ensure_table(rows)
        for limit in args.limits:
            for method in args.methods:
                proc = subprocess.run(
                    [sys.executable, __file__, "--child", "--database", str(database),
                     "--limit", limit, "--method", method], capture_output=True, text=True)
                lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
                if proc.returncode != 0 or not lines:
                    sys.exit(f"the {method} count failed:\n{proc.stdout[-2000:]}"
                             f"\n{proc.stderr[-4000:]}")
                record = {"rows": rows + PLANTED, "planted": PLANTED, "memory_limit": limit,
                          "method": method, **json.loads(lines[-1][len("RESULT "):])}
                records.append(record)
                print(json.dumps(record), flush=True)
    old = json.loads(RESULTS.read_text()) if RESULTS.exists() else []
    key = lambda r: (r["rows"], r["memory_limit"], r["method"])  # noqa: E731
    merged = {key(r): r for r in old}
    merged.update({key(r): r for r in records})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(list(merged.values()), indent=1))


if __name__ == "__main__":
    main()
