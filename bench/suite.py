"""The development suite (issues 16 and 34): every selection method, the project's default and the
anchors, on fourteen tables at three budgets, owner-side fidelity, time and memory, in one session.

Tables (`--datasets`):
- `adult`: ../shared/datasets/adult, discretized (48,842 x 14), with its domain file;
- `adult_raw`, `titanic_raw`, `diamonds_raw`, `penguins_raw`: the raw CSVs of ../shared/datasets
  with only each column's kind declared (adult_raw and titanic_raw as in datasets.yaml; the other
  two declared in RAW_KINDS below), so categories, bounds and NULLs are learned with DP;
- `example`: the bundled example (`dp_synth_assets.example.generate_example`, 50,000 rows) with its
  declared columns (`EXAMPLE_COLUMNS`);
- `wide`: 30,000 rows of bench/wide_table.py's Bayesian network (26 columns of 2 to 4 codes, seed 0),
  whose true dependencies are known;
- seven tables of bench/suite_tables.py (its docstring), of the shapes a default has to survive:
  `digits` (1,797 rows x 65 columns of 10-17 codes, many unused) and the binary `binary_mix`
  (a latent-class mixture) and `binary_xor` (exclusive ors), discretized with their domain;
  `cancer` (569 rows x 31, raw), `orders` (categoricals of 150 and 300 values), `trips` (a month
  of timestamps) and `sessions` (ten days), raw with only kinds declared, the last two with their
  order declared as a constraint in ours' entry (`constraints:`; the anchors have no such input).

Methods (`--methods`):
- ours: every key of `core.methods.METHODS` but `manual`, each set as the entry's `method:`;
  `auto-absyn`, `auto-tree` and `auto-mst`: method auto with its branch fixed
  (`selection.pick`), what bench/auto_rule_loto.py chooses between; and
  `default`: the entry without `method:`, i.e. the project's default as a user gets it. Each run
  is bench/anchors/suite_ours_run.py (datasets.yaml entry -> `Synthesizer.from_spec().fit().sample()`,
  the pipeline's stage functions without Dagster), rows: `same`;
- references: `bootstrap` (a resample of the source) and `independent` (each column drawn from its
  exact 1-way marginal), not private, per seed (epsilon null); `noisy-independent`: our pipeline
  with `method: manual, selection.marginals: []`, i.e. the same preprocessing and only noisy 1-way
  marginals at the run's whole budget (what every method must beat);
- `default-given-domain` (tables that are not discretized): the project's default given exactly
  what pgm-mst and OpenDP are given there, the evaluation codes with their cells as a public
  categorical domain, so nothing is spent on preprocessing. Not what a user gets: it separates
  what the model loses against the anchors from what learning the domains with DP costs;
- anchors: `pgm-mst` (MST re-stated on mbi 2.0, bench/anchors/pgm_mst_run.py, our venv),
  `opendp-mst` and `opendp-aim` (OpenDP 0.16's `contingency_table`, bench/anchors/opendp_run.py, in
  --opendp-python), `dpmm-mst` and `dpmm-aim` (dpmm 0.1.9's pipelines, bench/anchors/dpmm_run.py,
  in --dpmm-python). On discretized tables every anchor gets the public domain. On the other
  tables pgm-mst and OpenDP get the evaluation discretization below as a free public domain
  (favouring them: ours pays for its domains), and dpmm gets the raw CSV and runs its own
  preprocessing (its docstring says what of it is private); `dpsynth-mst` and `dpsynth-aim`
  (Google dpsynth's `TabularConfig` with its MST or AIM, bench/anchors/dpsynth_table_run.py, in
  --dpsynth-python, the venv bench/relational_dpsynth.py installs from a dpsynth checkout) get
  the public domain of a discretized table, and a raw table's CSV with its declared kinds:
  dpsynth discovers categories with DP and takes each numeric column's declared bounds, or its
  exact minimum and maximum where none are declared (not private; the note says so).

Budget: (epsilon, delta 1e-9), rho by the tight conversion (`core.privacy.rho_from_epsilon_delta`);
OpenDP is given that rho (zCDP); dpsynth that rho on a discretized table, and on a raw table the
rho of (epsilon, delta / 2) with the other delta / 2 for its open-set categories' partition
selection; dpmm and ours take (epsilon, delta).

Fidelity (owner side, the same code for every run; benchmark paper section 8.3): tvd1, tvd2 and
tvd3 are the average total variation distance between the source's and the synthetic table's
1-way marginals (every column), 2-way marginals (every pair) and 3-way marginals (200 fixed random
triples, seed 0), each on a common discretization of both tables:
- discretized tables (adult, wide): the source's codes 0..k-1; any other synthetic value is one
  extra cell the source never fills;
- the other tables: per column, from the source only, fixed for every method: a numeric or
  datetime column with more than 20 distinct values -> 16 quantile bins of the source (cut at
  its distinct quantiles), values outside going to the end bins; any other column -> its values
  holding at least 0.5% of the source's rows (numbers compared as numbers, so 3 and 3.0 agree),
  every other value one `rest` cell; NULL (and a value that is not a number in a numeric
  column) its own cell. This discretization is the owner's evaluation, never released.

Each run is a fresh subprocess (its wall time and maximum RSS are its own), killed with its process
group at `--timeout-minutes`. Records are flat: dataset, method, epsilon, seed, tvd1, tvd2, tvd3,
seconds (the run's own fit + sample time as it reports it; the process's wall time if it failed),
peak_mb, load1 (the highest 1-minute load average seen while it ran: above the core count, other
work competed and the time is inflated), rows, note, and extras. They merge into
bench/results/suite.json by (dataset, method, epsilon, seed), so partial reruns accumulate; a run
with a record is skipped (a failure is retried; a timeout only with --retry-timeouts; --redo reruns).
bench/results/suite.md is rewritten from all records: per (dataset, method, epsilon) means, the
default's ratios to the best anchor and to noisy-independent, and the issue's goals met or not.

    .venv/bin/python bench/suite.py                                   # the full grid
    .venv/bin/python bench/suite.py --datasets adult wide --methods default pgm-mst \
        --epsilons 1 --seeds 0                                        # a slice
    .venv/bin/python bench/suite.py --table-only                      # rewrite suite.md
"""

import argparse
import itertools
import json
import math
import os
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

import suite_tables
from bounded import log_tail, run_bounded

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from paths import DATASETS, RESULTS, WORK  # noqa: E402
BENCH = ROOT / "bench"
ANCHORS_DIR = BENCH / "anchors"
SHARED = DATASETS
WORK = WORK / "suite"
RESULTS = RESULTS / "suite.json"
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(BENCH))

DELTA = 1e-9
EPSILONS = (0.2, 1.0, 5.0)
SEEDS = (0, 1, 2)
DATASETS = ("adult", "adult_raw", "titanic_raw", "diamonds_raw", "penguins_raw", "example", "wide",
            *suite_tables.TABLES)
REFERENCES = ("bootstrap", "independent")  # exact data, per seed
NOISY_INDEPENDENT = "noisy-independent"
GIVEN_DOMAIN = "default-given-domain"  # ours on the anchors' input: the evaluation codes, public
AUTO_BRANCH = "auto-"  # auto-<branch>: method auto with its `selection.pick` fixed
ANCHORS = ("pgm-mst", "dpmm-mst", "dpmm-aim", "opendp-aim", "opendp-mst", "dpsynth-mst",
           "dpsynth-aim")
MST_ANCHORS = ("pgm-mst", "dpmm-mst", "opendp-mst", "dpsynth-mst")
RAW_ANCHORS = ("dpmm", "dpsynth")  # libraries given a raw table's CSV, preprocessing it themselves
FREE = "given the evaluation discretization as a free domain"
FREE_BOUNDS = "not private"  # in the note of a run given exact bounds (dpmm_run.py, dpsynth_table_run.py)
WIDE_ROWS = 30_000
# kinds of the two raw tables datasets.yaml does not declare
RAW_KINDS = {
    "diamonds_raw": {"carat": "float", "cut": "categorical", "color": "categorical",
                     "clarity": "categorical", "depth": "float", "table": "float",
                     "price": "integer", "x": "float", "y": "float", "z": "float"},
    "penguins_raw": {"species": "categorical", "island": "categorical",
                     "bill_length_mm": "float", "bill_depth_mm": "float",
                     "flipper_length_mm": "float", "body_mass_g": "float",
                     "sex": "categorical"},
}
EVAL_BINS = 16
EVAL_MIN_SHARE = 0.005
EVAL_NUMERIC_DISTINCT = 20


def our_methods() -> list[str]:
    from dp_synth_assets.core.methods import METHODS
    from dp_synth_assets.core.select.auto import PICKS

    return [m for m in METHODS if m != "manual"] + [f"{AUTO_BRANCH}{p}" for p in PICKS]


# ---- tables -------------------------------------------------------------------------------------


@dataclass
class Table:
    """One table of the suite: its source for ours, its codes for the anchors, its evaluation."""

    name: str
    source: Path            # what ours reads (CSV or Parquet)
    columns: dict           # datasets.yaml `columns:` block
    codes_csv: Path         # the source in the evaluation's codes (anchors' input)
    domain_json: Path       # {column: cells} of the evaluation's codes
    raw_csv: Path | None    # the raw CSV dpmm preprocesses itself (None: discretized table)
    evaluation: "Evaluation"
    constraints: tuple[str, ...] = ()  # declared in ours' entry (public, a user's declaration)


def load_table(name: str) -> Table:
    """Write the table's files under bench/work/suite/data/<name>/ (once) and build its evaluation."""
    folder = WORK / "data" / name
    folder.mkdir(parents=True, exist_ok=True)
    if name in suite_tables.TABLES:
        return generated_table(name, folder)
    if name in ("adult", "wide"):
        if name == "adult":
            source = SHARED / "adult" / "adult.csv"
            domain = json.loads((SHARED / "adult" / "adult-domain.json").read_text())
            real = pd.read_csv(source)[list(domain)]
        else:
            from wide_table import DOMAIN, generate

            domain, source = dict(DOMAIN), folder / "wide.csv"
            if not source.exists():
                generate(WIDE_ROWS, 0).to_csv(source, index=False)
            real = pd.read_csv(source)
        columns = {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
                   for c, k in domain.items()}
        evaluation = Evaluation.of_codes(real, domain)
        return Table(name, source, columns, source, write_domain(folder, domain), None, evaluation)
    if name == "example":
        from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example

        source = folder / "example.parquet"
        raw_csv = folder / "example.csv"
        if not source.exists():
            import pyarrow.parquet as pq

            table = generate_example()
            pq.write_table(table, source)
            table.to_pandas().to_csv(raw_csv, index=False)
        real = pd.read_parquet(source)
        columns = json.loads(json.dumps(EXAMPLE_COLUMNS, default=str))
    else:
        source = raw_csv = SHARED / name / f"{name}.csv"
        real = pd.read_csv(source)
        registry = yaml.safe_load((ROOT / "datasets.yaml").read_text())["datasets"]
        if name in registry:
            columns = registry[name]["columns"]
        else:
            columns = {c: {"kind": k} for c, k in RAW_KINDS[name].items()}
    evaluation = Evaluation.of_frame(real)
    codes_csv = folder / "codes.csv"
    if not codes_csv.exists():
        pd.DataFrame(evaluation.real, columns=evaluation.columns).to_csv(codes_csv, index=False)
    return Table(name, source, columns, codes_csv, write_domain(folder, evaluation.domain),
                 raw_csv, evaluation)


def generated_table(name: str, folder: Path) -> Table:
    """A table of bench/suite_tables.py: a discretized one as codes with its domain; a raw one as
    Parquet for ours (types kept) and CSV for the libraries that read a raw table."""
    make, discretized, constraints = suite_tables.TABLES[name]
    real, declared = make()
    if discretized:
        source = folder / f"{name}.csv"
        if not source.exists():
            real.to_csv(source, index=False)
        columns = {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
                   for c, k in declared.items()}
        return Table(name, source, columns, source, write_domain(folder, declared), None,
                     Evaluation.of_codes(real, declared), tuple(constraints))
    source, raw_csv = folder / f"{name}.parquet", folder / f"{name}.csv"
    if not source.exists():
        real.to_parquet(source, index=False)
        real.to_csv(raw_csv, index=False)
    evaluation = Evaluation.of_frame(real)
    codes_csv = folder / "codes.csv"
    if not codes_csv.exists():
        pd.DataFrame(evaluation.real, columns=evaluation.columns).to_csv(codes_csv, index=False)
    return Table(name, source, {c: {"kind": k} for c, k in declared.items()}, codes_csv,
                 write_domain(folder, evaluation.domain), raw_csv, evaluation, tuple(constraints))


def write_domain(folder: Path, domain: dict) -> Path:
    path = folder / "domain.json"
    path.write_text(json.dumps({c: int(k) for c, k in domain.items()}))
    return path


# ---- evaluation (owner side) ------------------------------------------------------------------


def tvd(real: np.ndarray, synth: np.ndarray, idx: tuple[int, ...], sizes: np.ndarray) -> float:
    """Total variation distance (half the L1 distance) of two code tables' marginals on `idx`."""
    dims = tuple(int(sizes[i]) for i in idx)
    cells = int(np.prod(dims))
    p = np.bincount(np.ravel_multi_index(real[:, idx].T, dims), minlength=cells) / len(real)
    q = np.bincount(np.ravel_multi_index(synth[:, idx].T, dims), minlength=cells) / len(synth)
    return 0.5 * float(np.abs(p - q).sum())


class ColumnCells:
    """One column's evaluation cells, fitted on the source (module docstring)."""

    def __init__(self, real: pd.Series):
        self.datetime = (pd.api.types.is_datetime64_any_dtype(real)
                         or (real.dtype == object and real.dropna().map(
                             lambda v: hasattr(v, "isoformat")).all() and real.notna().any()))
        values = self.numbers(real)
        numeric = values.notna().sum() == real.notna().sum() and not pd.api.types.is_bool_dtype(real)
        finite = values.dropna()
        self.edges = None
        if numeric and finite.nunique() > EVAL_NUMERIC_DISTINCT:
            quantiles = np.quantile(finite.to_numpy(float), np.linspace(0, 1, EVAL_BINS + 1))
            self.edges = np.unique(quantiles)[1:-1]  # interior cut points
            self.size = len(self.edges) + 2          # bins, then NULL/invalid
        else:
            keys = self.keys(real).dropna()
            shares = keys.value_counts() / len(real)
            self.categories = list(shares[shares >= EVAL_MIN_SHARE].index)
            self.size = len(self.categories) + 2     # values, rest, NULL
        self.numeric = numeric

    def numbers(self, s: pd.Series) -> pd.Series:
        if self.datetime:  # seconds since the epoch, whatever resolution pandas parsed
            instants = pd.to_datetime(s, errors="coerce", utc=True)
            return (instants - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
        if pd.api.types.is_bool_dtype(s):
            return s.astype(float)
        return pd.to_numeric(s, errors="coerce")

    def keys(self, s: pd.Series) -> pd.Series:
        """Values as comparable text: numbers by their float value, the rest as strings."""
        n = self.numbers(s)
        text = s.astype("string")
        return text.where(n.isna(), n.map(lambda v: repr(float(v))).astype("string")).where(s.notna())

    def codes(self, s: pd.Series) -> np.ndarray:
        null = s.isna().to_numpy()
        if self.edges is not None:
            v = self.numbers(s).to_numpy(float)
            binned = np.searchsorted(self.edges, v, side="right")
            return np.where(null | np.isnan(v), self.size - 1, binned)
        index = {k: i for i, k in enumerate(self.categories)}
        rest = len(self.categories)
        coded = self.keys(s).map(lambda k: index.get(k, rest) if k is not pd.NA else rest)
        return np.where(null, self.size - 1, coded.to_numpy(np.int64, na_value=rest))


class Evaluation:
    """The source in evaluation codes, and tvd1/tvd2/tvd3 of a synthetic table against it."""

    def __init__(self, columns: list[str], real: np.ndarray, sizes: np.ndarray, encode):
        self.columns, self.real, self.sizes, self.encode = columns, real, sizes, encode
        self.domain = dict(zip(columns, (int(k) for k in sizes)))
        d = len(columns)
        self.pairs = list(itertools.combinations(range(d), 2))
        rng = np.random.default_rng(0)
        self.triples = [tuple(sorted(int(i) for i in rng.choice(d, 3, replace=False)))
                        for _ in range(200)] if d >= 3 else []

    @classmethod
    def of_codes(cls, real: pd.DataFrame, domain: dict[str, int]) -> "Evaluation":
        """A discretized table: the codes 0..k-1, anything else the extra cell k."""
        cols = list(domain)

        def encode(frame: pd.DataFrame) -> np.ndarray:
            out = np.empty((len(frame), len(cols)), dtype=np.int64)
            for j, (c, k) in enumerate(domain.items()):
                v = pd.to_numeric(frame[c], errors="coerce").to_numpy(np.float64)
                ok = np.isfinite(v) & (v == np.round(v)) & (v >= 0) & (v < k)
                out[:, j] = np.where(ok, v, k).astype(np.int64)
            return out

        return cls(cols, encode(real), np.array([k + 1 for k in domain.values()]), encode)

    @classmethod
    def of_frame(cls, real: pd.DataFrame) -> "Evaluation":
        cells = {c: ColumnCells(real[c]) for c in real.columns}

        def encode(frame: pd.DataFrame) -> np.ndarray:
            return np.column_stack([cells[c].codes(frame[c].reset_index(drop=True))
                                    for c in cells]).astype(np.int64)

        return cls(list(cells), encode(real), np.array([cells[c].size for c in cells]), encode)

    def scores(self, synth: np.ndarray) -> dict[str, float]:
        """tvd1, tvd2, tvd3 of synthetic codes (same columns and cells as `real`)."""
        r, s, k = self.real, synth, self.sizes
        return {"tvd1": float(np.mean([tvd(r, s, (j,), k) for j in range(len(k))])),
                "tvd2": float(np.mean([tvd(r, s, p, k) for p in self.pairs])),
                "tvd3": float(np.mean([tvd(r, s, t, k) for t in self.triples]))
                if self.triples else None}

    def of_codes_csv(self, path: Path) -> dict[str, float]:
        """Scores of an anchor's output in the evaluation's codes (its columns by name)."""
        return self.of_codes_frame(pd.read_csv(path))

    def of_codes_frame(self, frame: pd.DataFrame) -> dict[str, float]:
        """Scores of a table in the evaluation's codes (its columns by name)."""
        frame = frame[self.columns]
        codes = frame.apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
        top = self.sizes - 1  # anything outside the source's cells: the last cell
        ok = np.isfinite(codes) & (codes >= 0) & (codes < self.sizes)
        return self.scores(np.where(ok, codes, top).astype(np.int64))

    def of_table(self, frame: pd.DataFrame) -> dict[str, float]:
        return self.scores(self.encode(frame[self.columns]))


def reference_records(table: Table, seed: int) -> list[dict]:
    """bootstrap and independent columns on the evaluation codes (exact data, not private)."""
    ev = table.evaluation
    rng = np.random.default_rng([seed, 7])
    n = len(ev.real)
    boot = ev.real[rng.integers(0, n, n)]
    indep = np.column_stack([ev.real[rng.integers(0, n, n), j] for j in range(len(ev.columns))])
    return [{"dataset": table.name, "method": name, "epsilon": None, "seed": seed,
             **ev.scores(codes), "seconds": 0.0, "peak_mb": None, "load1": None, "rows": n,
             "note": "reference: exact data, not private"}
            for name, codes in (("bootstrap", boot), ("independent", indep))]


# ---- one run ------------------------------------------------------------------------------------


def our_entry(table: Table, method: str, epsilon: float, seed: int, source: Path) -> dict:
    """The datasets.yaml entry a user writes: columns, privacy, rows same, seed; `method` unless
    `default`; noisy-independent is method manual with no declared marginal."""
    columns = table.columns
    if method == GIVEN_DOMAIN:
        source = table.codes_csv
        columns = {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
                   for c, k in table.evaluation.domain.items()}
    entry = {"source": {"parquet" if source.suffix == ".parquet" else "csv": str(source)},
             "columns": columns,
             "privacy": {"epsilon": epsilon, "delta": DELTA,
                         "limit": {"epsilon": max(20.0, epsilon), "delta": 1e-8}},
             "rows": "same", "seed": seed}
    if table.constraints and method != GIVEN_DOMAIN:
        entry["constraints"] = list(table.constraints)
    if method == NOISY_INDEPENDENT:
        entry["method"] = "manual"
        entry["selection"] = {"marginals": []}
    elif method.startswith(AUTO_BRANCH):
        entry["method"] = "auto"
        entry["selection"] = {"pick": method.removeprefix(AUTO_BRANCH)}
    elif method not in ("default", GIVEN_DOMAIN):
        entry["method"] = method
    return entry


def command(table: Table, method: str, epsilon: float, seed: int, out: Path, run_dir: Path,
            args) -> list[str]:
    """The subprocess that runs `method` once, writing its rows to `out`."""
    if method in ANCHORS:
        library, algorithm = method.split("-")
        if library == "pgm":
            return [sys.executable, str(ANCHORS_DIR / "pgm_mst_run.py"),
                    "--data", str(table.codes_csv), "--domain", str(table.domain_json),
                    "--epsilon", repr(epsilon), "--delta", repr(DELTA), "--seed", str(seed),
                    "--out", str(out)]
        if library == "opendp":
            from dp_synth_assets.core.privacy import rho_from_epsilon_delta

            return [str(args.opendp_python), str(ANCHORS_DIR / "opendp_run.py"),
                    "--algorithm", algorithm, "--data", str(table.codes_csv),
                    "--domain", str(table.domain_json),
                    "--rho", repr(rho_from_epsilon_delta(epsilon, DELTA)), "--seed", str(seed),
                    "--out", str(out)]
        data = (["--raw", str(table.raw_csv)] if table.raw_csv else
                ["--data", str(table.codes_csv), "--domain", str(table.domain_json)])
        if library == "dpsynth":
            from dp_synth_assets.core.privacy import rho_from_epsilon_delta

            # a raw table's open-set categories spend delta on partition selection: half of
            # DELTA goes there, and rho is what (epsilon, the other half) converts to, so the
            # whole run is (epsilon, DELTA)-DP as every other run is
            selection = DELTA / 2 if table.raw_csv else 0.0
            if table.raw_csv:
                declared = run_dir / "columns.json"
                declared.write_text(json.dumps(table.columns, default=str))
                data += ["--columns", str(declared)]
            return [str(args.dpsynth_python), str(ANCHORS_DIR / "dpsynth_table_run.py"),
                    "--algorithm", algorithm, *data,
                    "--rho", repr(rho_from_epsilon_delta(epsilon, DELTA - selection)),
                    "--delta", repr(selection), "--seed", str(seed), "--out", str(out)]
        return [str(args.dpmm_python), str(ANCHORS_DIR / "dpmm_run.py"), "--model", algorithm,
                *data, "--epsilon", repr(epsilon), "--delta", repr(DELTA), "--seed", str(seed),
                "--out", str(out)]
    registry = run_dir / "datasets.yaml"
    registry.write_text(yaml.safe_dump(
        {"datasets": {table.name: our_entry(table, method, epsilon, seed, table.source)}},
        sort_keys=False))
    source = table.codes_csv if method == GIVEN_DOMAIN else table.source
    return [sys.executable, str(ANCHORS_DIR / "suite_ours_run.py"), "--registry", str(registry),
            "--dataset", table.name, "--source", str(source), "--out", str(out)]


def run_one(table: Table, method: str, epsilon: float, seed: int, args) -> dict:
    name = f"{table.name}_{method}_eps{epsilon:g}_seed{seed}".replace(".", "p")
    run_dir = WORK / "runs" / name
    run_dir.mkdir(parents=True, exist_ok=True)
    ours = method not in ANCHORS
    out = run_dir / ("synthetic.parquet" if ours else "synthetic.csv")
    out.unlink(missing_ok=True)
    log = WORK / "logs" / f"{name}.log"
    base = {"dataset": table.name, "method": method, "epsilon": epsilon, "seed": seed}
    python = {"opendp": args.opendp_python, "dpmm": args.dpmm_python,
              "dpsynth": args.dpsynth_python}.get(method.split("-")[0])
    if python is not None and not Path(python).exists():
        return {**base, "tvd1": None, "tvd2": None, "tvd3": None, "seconds": None,
                "peak_mb": None, "load1": None, "rows": None,
                "note": f"skipped: {python} missing (see bench/anchors/{method.split('-')[0]}_run.py)"}
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "JAX_ENABLE_COMPILATION_CACHE": "false"}
    run = run_bounded(command(table, method, epsilon, seed, out, run_dir, args), log,
                      args.timeout_minutes * 60, env)
    res = run["result"] or {}
    record = {**base, "tvd1": None, "tvd2": None, "tvd3": None, "seconds": run["wall"],
              "peak_mb": run["maxrss_mb"], "load1": run["max_load1"], "rows": None,
              "process_seconds": run["wall"]}
    if run["timed_out"]:
        return {**record, "note": f"timeout: killed after {args.timeout_minutes:g} min"}
    if run["code"] != 0 or res.get("status") != "ok" or not out.exists():
        return {**record, "note": f"failed (exit {run['code']}): {log_tail(log, 2, 240)}"}
    scores = (table.evaluation.of_codes_frame(pd.read_parquet(out)) if method == GIVEN_DOMAIN
              else table.evaluation.of_table(pd.read_parquet(out)) if ours
              else table.evaluation.of_table(pd.read_csv(out))
              if method.split("-")[0] in RAW_ANCHORS and table.raw_csv
              else table.evaluation.of_codes_csv(out))
    extras = {("method_run" if k == "method" else k): v for k, v in res.items()
              if k not in ("status", "seconds", "peak_mb", "rows", "note")}
    note = res.get("note", "")
    if method in ANCHORS and table.raw_csv and method.split("-")[0] not in RAW_ANCHORS:
        note = "; ".join(n for n in (note, FREE) if n)
    return {**record, **scores, "seconds": res["seconds"], "peak_mb": res["peak_mb"],
            "rows": res["rows"], "note": note, **extras}


# ---- records and the table -------------------------------------------------------------------


def key(r: dict) -> tuple:
    return (r["dataset"], r["method"], r["epsilon"], r["seed"])


def load_records(path: Path) -> dict[tuple, dict]:
    return {key(r): r for r in json.loads(path.read_text())} if path.exists() else {}


def save_records(path: Path, records: dict[tuple, dict]) -> None:
    """Merge into what is on disk (two sessions never drop each other's records)."""
    merged = {**load_records(path), **records}
    order = {m: i for i, m in enumerate((*REFERENCES, NOISY_INDEPENDENT, "default"))}
    rows = sorted(merged.values(), key=lambda r: (r["dataset"], r["epsilon"] or 0,
                                                  order.get(r["method"], 9), r["method"], r["seed"]))
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".json.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(rows, indent=1))
    tmp.replace(path)


def summarize(records: list[dict]) -> dict[tuple, dict]:
    """Per (dataset, method, epsilon): means over the seeds that finished, and tvd2's standard
    error (sample sd / sqrt(runs), None for one run). A seed labels a repetition: OpenDP draws
    its noise from the system's randomness, so two runs of one seed differ by run-to-run noise."""
    groups: dict[tuple, list[dict]] = {}
    for r in records:
        groups.setdefault((r["dataset"], r["method"], r["epsilon"]), []).append(r)
    out = {}
    for k, rs in groups.items():
        done = [r for r in rs if r.get("tvd2") is not None]

        def mean(field):
            vals = [r[field] for r in done if r.get(field) is not None]
            return float(np.mean(vals)) if vals else None

        loads = [r["load1"] for r in rs if r.get("load1") is not None]
        tvd2 = [r["tvd2"] for r in done]
        out[k] = {"runs": len(done), "failed": len(rs) - len(done),
                  **{f: mean(f) for f in ("tvd1", "tvd2", "tvd3", "seconds", "peak_mb")},
                  "tvd2_se": float(np.std(tvd2, ddof=1) / np.sqrt(len(tvd2)))
                  if len(tvd2) > 1 else None,
                  "load1": max(loads) if loads else None,
                  # read before the notes are cut to 160 characters for the table
                  "free": any(FREE in r.get("note", "") or FREE_BOUNDS in r.get("note", "")
                              for r in done),
                  "notes": sorted({r["note"][:160] for r in rs if r.get("note")
                                   and r["method"] not in REFERENCES})}
    return out


def fmt(x, digits=4) -> str:
    return "" if x is None else f"{x:.{digits}f}"


def ratio(a, b) -> str:
    return "" if a is None or not b else f"{a / b:.2f}"


def best_anchor(summary: dict, dataset: str, epsilon: float,
                paid: bool = False) -> tuple[str, dict] | None:
    """The anchor with the least mean tvd2; `paid`: only anchors that learned their own domain
    or were given the table's public one (not the evaluation discretization, nor the exact
    numeric bounds dpmm gets where its DP bounds fail, for free)."""
    found = [(m, summary[(dataset, m, epsilon)]) for m in ANCHORS
             if (dataset, m, epsilon) in summary and summary[(dataset, m, epsilon)]["tvd2"] is not None
             and not (paid and summary[(dataset, m, epsilon)]["free"])]
    return min(found, key=lambda x: x[1]["tvd2"]) if found else None


def goals(summary: dict) -> list[str]:
    """The issue's goals, each met / not met / not measured, from the means."""
    lines = []
    cells = sorted({(d, e) for d, m, e in summary if m == "default" and e is not None})
    failures, measured = [], 0
    for d, e in cells:
        ours = summary[(d, "default", e)]["tvd2"]
        best = best_anchor(summary, d, e)
        noisy = summary.get((d, NOISY_INDEPENDENT, e), {}).get("tvd2")
        if ours is None or best is None or noisy is None:
            continue
        measured += 1
        paid = best_anchor(summary, d, e, paid=True)
        if ours > 0.75 * best[1]["tvd2"] or ours > noisy:
            se = [summary[(d, m, e)]["tvd2_se"] for m in ("default", NOISY_INDEPENDENT)]
            within = ours > noisy and None not in se and ours - noisy < 2 * math.hypot(*se)
            failures.append(f"{d} eps {e:g}: {ours:.4f} vs 0.75 x {best[0]} "
                            f"{best[1]['tvd2']:.4f} = {0.75 * best[1]['tvd2']:.4f} and "
                            f"noisy-independent {noisy:.4f}"
                            + ("" if paid is None or paid[0] == best[0] else
                               f" (best anchor that paid for its domain: {paid[0]} "
                               f"{paid[1]['tvd2']:.4f})")
                            + (" (above noisy-independent by less than 2 standard errors)"
                               if within else ""))
    status = "not measured" if not measured else ("met" if not failures else "**not met**")
    lines.append(f"- Default's tvd2 <= 0.75 x best anchor's and <= noisy-independent, every "
                 f"table and epsilon: {status} ({measured} (table, epsilon) cells measured; on "
                 f"tables that are not discretized, pgm-mst and opendp are given the evaluation "
                 f"discretization as their domain and scored in it, and dpmm, where its DP "
                 f"bounds fail, each numeric column's exact min and max: a bound no private "
                 f"pipeline that learns its own domain can be expected to reach)"
                 + "".join(f"\n  - {f}" for f in failures))
    given = []
    for d, m, e in sorted(k for k in summary if k[1] == GIVEN_DOMAIN):
        best = best_anchor(summary, d, e)
        s = summary[(d, m, e)]["tvd2"]
        if best is not None and s is not None:
            given.append(f"{d} eps {e:g}: {s:.4f} = {s / best[1]['tvd2']:.2f} x {best[0]} "
                         f"{best[1]['tvd2']:.4f}")
    if given:
        lines.append("- Diagnostic, not a goal: the default given the anchors' own input "
                     f"(`{GIVEN_DOMAIN}`: the evaluation codes as a public domain), tvd2 and its "
                     "ratio to the best anchor" + "".join(f"\n  - {g}" for g in given))
    for e, target, strict in ((1.0, 0.035, False), (0.2, 0.078, True)):
        s = summary.get(("adult", "default", e), {}).get("tvd2")
        ok = None if s is None else (s < target if strict else s <= target)
        word = "not measured" if ok is None else ("met" if ok else "**not met**")
        lines.append(f"- Adult at epsilon {e:g}: tvd2 {'<' if strict else '<='} {target}: {word}"
                     + ("" if s is None else f" ({s:.4f})"))
    times = {e: summary[("adult", "default", e)]["seconds"]
             for d, m, e in summary if d == "adult" and m == "default"
             and summary[(d, m, e)]["seconds"] is not None}
    parts = []
    for e, ours in sorted(times.items()):
        mst = [(summary[("adult", m, e)]["seconds"], m) for m in MST_ANCHORS
               if ("adult", m, e) in summary and summary[("adult", m, e)]["tvd2"] is not None]
        if mst:
            fastest = min(mst)
            parts.append((ours < fastest[0] / 3, f"eps {e:g}: {ours:.1f} s vs {fastest[1]} "
                          f"{fastest[0]:.1f} s / 3 = {fastest[0] / 3:.1f} s"))
    word = "not measured" if not parts else ("met" if all(p[0] for p in parts) else "**not met**")
    lines.append(f"- Default's whole run on adult under a third of the fastest MST anchor's time: "
                 f"{word}" + (f" ({'; '.join(p[1] for p in parts)})" if parts else ""))
    return lines


def markdown(records: list[dict]) -> str:
    summary = summarize(records)
    lines = [
        "# Development suite (bench/suite.py)",
        "",
        f"Written {datetime.now(UTC).isoformat(timespec='seconds')} from bench/results/suite.json "
        f"({len(records)} records). delta {DELTA:g}; means over the seeds that finished (`runs`). "
        "tvd1/tvd2/tvd3: average 1-way (every column), 2-way (every pair), 3-way (200 fixed "
        "triples) total variation distance on the evaluation discretization (bench/suite.py "
        "docstring). seconds: the run's fit + sample; peak MB: its process's maximum RSS; load1: "
        f"the highest 1-minute load average seen during the runs ({os.cpu_count()} cores: above "
        "that, times are inflated). `/ best anchor` and `/ noisy-ind.`: the row's tvd2 over the "
        "best anchor's (named) and over noisy-independent columns' at the same epsilon. `± se`: "
        "tvd2's standard error over the runs (a seed labels a repetition: OpenDP's noise is not "
        "seedable, so one seed's runs differ).",
        "",
        "## Goals (issue 16)",
        "",
        *goals(summary),
        "",
        "## Means",
        "",
        "| dataset | method | epsilon | runs | tvd1 | tvd2 | ± se | tvd3 | seconds | peak MB | "
        "/ best anchor | / noisy-ind. | load1 | note |",
        "|" + " --- |" * 14,
    ]
    order = {m: i for i, m in enumerate((*REFERENCES, NOISY_INDEPENDENT, "default"))}
    for (d, m, e), s in sorted(summary.items(), key=lambda kv: (
            kv[0][0], kv[0][2] or 0, order.get(kv[0][1], 5 if kv[0][1] not in ANCHORS else 6),
            kv[0][1])):
        best = best_anchor(summary, d, e) if e is not None else None
        noisy = summary.get((d, NOISY_INDEPENDENT, e), {}).get("tvd2")
        vs_best = "" if best is None or m in ANCHORS else \
            f"{ratio(s['tvd2'], best[1]['tvd2'])} ({best[0]})"
        vs_noisy = "" if m in (NOISY_INDEPENDENT, *REFERENCES) else ratio(s["tvd2"], noisy)
        runs = f"{s['runs']}" + (f" (+{s['failed']} failed)" if s["failed"] else "")
        lines.append(f"| {d} | {m} | {'' if e is None else f'{e:g}'} | {runs} | {fmt(s['tvd1'])} "
                     f"| {fmt(s['tvd2'])} | {fmt(s['tvd2_se'])} | {fmt(s['tvd3'])} | {fmt(s['seconds'], 1)} | "
                     f"{fmt(s['peak_mb'], 0)} | {vs_best} | {vs_noisy} | {fmt(s['load1'], 1)} | "
                     f"{'; '.join(s['notes'])} |")
    return "\n".join(lines) + "\n"


# ---- main -------------------------------------------------------------------------------------


def main() -> None:
    all_methods = [*REFERENCES, NOISY_INDEPENDENT, "default", GIVEN_DOMAIN, *our_methods(),
                   *ANCHORS]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--methods", nargs="+", default=all_methods, choices=all_methods)
    parser.add_argument("--epsilons", nargs="+", type=float, default=list(EPSILONS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--timeout-minutes", type=float, default=30.0, help="per run")
    parser.add_argument("--redo", action="store_true", help="rerun runs that have a record")
    parser.add_argument("--retry-timeouts", action="store_true")
    parser.add_argument("--opendp-python", type=Path, default=Path("/work/venv-opendp/bin/python"))
    parser.add_argument("--dpmm-python", type=Path, default=Path("/work/venv-dpmm/bin/python"))
    parser.add_argument("--dpsynth-python", type=Path,
                        default=WORK.parent / "dpsynth-venv" / "bin" / "python",
                        help="dpsynth's venv (bench/relational_dpsynth.py installs it)")
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--table-only", action="store_true", help="only rewrite the .md table")
    args = parser.parse_args()
    records = load_records(args.results)

    def done(k) -> bool:
        r = records.get(k)
        if r is None or args.redo:
            return False
        if r.get("tvd2") is not None or str(r.get("note", "")).startswith("skipped"):
            return True
        return str(r.get("note", "")).startswith("timeout") and not args.retry_timeouts

    def keep(r: dict) -> None:
        records[key(r)] = r
        save_records(args.results, {key(r): r})
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:g}"
        print(f"  {r['dataset']:12s} {r['method']:17s} eps {eps:3s} seed {r['seed']}: "
              f"tvd1 {fmt(r['tvd1'])} tvd2 {fmt(r['tvd2'])} tvd3 {fmt(r['tvd3'])} "
              f"{fmt(r['seconds'], 1)} s {fmt(r['peak_mb'], 0)} MB load {r['load1']} "
              f"{r.get('note') or ''}", flush=True)

    if not args.table_only:
        for name in args.datasets:
            table = load_table(name)
            print(f"{name}: {len(table.evaluation.real)} rows x {len(table.evaluation.columns)} "
                  f"columns, evaluation cells {table.evaluation.domain}", flush=True)
            for seed in args.seeds:
                for r in reference_records(table, seed):
                    if r["method"] in args.methods and not done(key(r)):
                        keep(r)
            for epsilon in args.epsilons:
                for seed in args.seeds:
                    for method in args.methods:
                        if method in REFERENCES or done((name, method, epsilon, seed)) or (
                                method == GIVEN_DOMAIN and table.raw_csv is None):
                            continue
                        print(f"{name} {method} eps {epsilon:g} seed {seed} ...", flush=True)
                        keep(run_one(table, method, epsilon, seed, args))
    records = load_records(args.results)
    table_md = markdown(list(records.values()))
    args.results.with_suffix(".md").write_text(table_md)
    print(table_md)
    print(f"wrote {args.results} and {args.results.with_suffix('.md')}")


if __name__ == "__main__":
    main()
