"""The bundled example dataset: a generated, census-like table and its column specs.

`generate_example` draws a deterministic table (a seeded numpy Generator, vectorized, no loop over
rows) from a small hand-written Bayesian network, so that the selection stage has real dependencies
to find and a few columns with nothing to find. `EXAMPLE_COLUMNS` is the `columns:` block of the
`example` entry in datasets.yaml, written as a dict literal. `write_example` puts the table into a
DuckDB file once; `python -m dp_synth_assets.example [database]` does that from the shell."""

import sys
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from .core.config import QUALIFIED_TABLE
from .core.sql import qualified, sql

DEFAULT_ROWS = 50_000
DEFAULT_SEED = 20261122
DEFAULT_DATABASE = "data/warehouse.duckdb"
DEFAULT_TABLE = "main.example"
_ARROW_VIEW = "dp_synth_example_arrow"

SEXES = ["Female", "Male"]
RACES = ["White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"]
# (country, share of non-NULL rows, region); regions index the rows of RACE_GIVEN_REGION.
_COUNTRIES = [
    ("United-States", 0.8962, 0),
    ("Mexico", 0.030, 1),
    ("Philippines", 0.010, 2),
    ("Germany", 0.008, 3),
    ("Canada", 0.008, 3),
    ("Puerto-Rico", 0.007, 1),
    ("El-Salvador", 0.006, 1),
    ("India", 0.006, 2),
    ("Cuba", 0.005, 1),
    ("England", 0.005, 3),
    ("Jamaica", 0.004, 4),
    ("China", 0.004, 2),
    ("Italy", 0.003, 3),
    ("Vietnam", 0.003, 2),
    ("Japan", 0.002, 2),
    ("Poland", 0.002, 3),
    ("Holand-Netherlands", 0.0008, 3),
]
COUNTRIES = [name for name, _, _ in _COUNTRIES]
# The one generated category datasets.yaml does not declare (it maps to the 'other' code).
UNDECLARED_CATEGORY = ("country", "Holand-Netherlands")
# rows: regions United States (and NULL country), Latin America, Asia, Europe/Canada, Caribbean.
RACE_GIVEN_REGION = np.array(
    [
        [0.8475, 0.1050, 0.0420, 0.0040, 0.0015],
        [0.8900, 0.0500, 0.0050, 0.0050, 0.0500],
        [0.0400, 0.0050, 0.9500, 0.0000, 0.0050],
        [0.9500, 0.0300, 0.0150, 0.0020, 0.0030],
        [0.0500, 0.9300, 0.0100, 0.0000, 0.0100],
    ]
)
EDUCATIONS = [
    "Preschool", "Elementary", "HS-grad", "Some-college", "Assoc", "Bachelors", "Masters",
    "Doctorate",
]
# rows: age groups 17-21, 22-29, 30-59, 60+
_AGE_GROUP_EDGES = [22, 30, 60]
EDUCATION_GIVEN_AGE_GROUP = np.array(
    [
        [0.005, 0.080, 0.450, 0.445, 0.010, 0.010, 0.000, 0.000],
        [0.002, 0.050, 0.300, 0.250, 0.080, 0.250, 0.060, 0.008],
        [0.002, 0.060, 0.320, 0.210, 0.080, 0.190, 0.100, 0.020],
        [0.005, 0.150, 0.380, 0.150, 0.060, 0.140, 0.080, 0.035],
    ]
)
MARITAL_STATUSES = ["Never-married", "Married", "Divorced", "Separated", "Widowed"]
# rows: age groups 17-24, 25-34, 35-49, 50-64, 65+
_LIFE_STAGE_EDGES = [25, 35, 50, 65]
MARITAL_GIVEN_LIFE_STAGE = np.array(
    [
        [0.900, 0.080, 0.010, 0.010, 0.000],
        [0.450, 0.450, 0.070, 0.028, 0.002],
        [0.170, 0.600, 0.160, 0.050, 0.020],
        [0.080, 0.620, 0.200, 0.040, 0.060],
        [0.050, 0.550, 0.120, 0.020, 0.260],
    ]
)
# per marital status: household size = offset + Poisson(mean), clipped to 1..8
HOUSEHOLD_OFFSET = np.array([1, 2, 1, 1, 1])
HOUSEHOLD_POISSON_MEAN = np.array([0.6, 1.1, 0.7, 0.8, 0.3])
# (occupation, base weight, education rank it suits, log-odds shift for men,
#  hours shift, log-income shift)
_OCCUPATIONS = [
    ("Exec-managerial", 0.80, 5.0, 0.3, 5.0, 0.35),
    ("Prof-specialty", 0.90, 6.0, 0.0, 3.0, 0.30),
    ("Tech-support", 0.25, 4.0, 0.2, 0.0, 0.10),
    ("Sales", 0.75, 3.5, 0.2, 1.0, 0.00),
    ("Adm-clerical", 1.10, 3.0, -1.2, -2.0, -0.15),
    ("Craft-repair", 0.40, 2.5, 1.5, 2.0, 0.00),
    ("Machine-op", 0.35, 2.0, 0.6, 0.0, -0.15),
    ("Transport", 0.15, 2.0, 1.5, 4.0, -0.05),
    ("Service", 0.80, 2.0, -0.6, -6.0, -0.45),
    ("Farming-fishing", 0.09, 1.5, 1.2, 5.0, -0.40),
    ("Armed-Forces", 0.003, 3.0, 1.5, 4.0, -0.10),
]
OCCUPATIONS = [o[0] for o in _OCCUPATIONS]
SIGNUP_START = np.datetime64("2015-01-01", "D")
SIGNUP_END = np.datetime64("2024-12-31", "D")
INCOME_UPPER = 400_000.0

EXAMPLE_COLUMNS: dict[str, dict] = {
    "age": {"kind": "integer", "bounds": [17, 90], "bins": 24},
    "sex": {"kind": "categorical", "categories": ["Female", "Male"]},
    "race": {
        "kind": "categorical",
        "categories": ["White", "Black", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other"],
    },
    "country": {
        "kind": "categorical",
        "categories": [
            "United-States", "Mexico", "Philippines", "Germany", "Canada", "Puerto-Rico",
            "El-Salvador", "India", "Cuba", "England", "Jamaica", "China", "Italy", "Vietnam",
            "Japan", "Poland",
        ],
        "nullable": True,
    },
    "education": {
        "kind": "categorical",
        "categories": [
            "Preschool", "Elementary", "HS-grad", "Some-college", "Assoc", "Bachelors", "Masters",
            "Doctorate",
        ],
    },
    "marital_status": {
        "kind": "categorical",
        "categories": ["Never-married", "Married", "Divorced", "Separated", "Widowed"],
    },
    "occupation": {
        "kind": "categorical",
        "categories": [
            "Exec-managerial", "Prof-specialty", "Tech-support", "Sales", "Adm-clerical",
            "Craft-repair", "Machine-op", "Transport", "Service", "Farming-fishing", "Armed-Forces",
        ],
        "nullable": True,
    },
    "hours_per_week": {"kind": "integer", "bounds": [1, 99], "bins": 20},
    "income": {"kind": "float", "bounds": [0.0, 400000.0], "bins": 31, "nullable": True},
    "household_size": {"kind": "integer", "bounds": [1, 8], "bins": 8, "type": "INTEGER"},
    "signup_date": {"kind": "datetime", "bounds": ["2015-01-01", "2024-12-31"], "bins": 20,
                    "type": "DATE"},
    "newsletter": {"kind": "boolean"},
}


def _draw(rng: np.random.Generator, probs: np.ndarray) -> np.ndarray:
    """One categorical draw per row of `probs` (rows x k, rows need not be normalized)."""
    cdf = np.cumsum(probs, axis=1)
    u = rng.random(len(probs)) * cdf[:, -1]
    return np.minimum((u[:, None] >= cdf).sum(axis=1), probs.shape[1] - 1)


def _strings(codes: np.ndarray, names: list[str], null: np.ndarray | None = None) -> pa.Array:
    indices = pa.array(codes.astype(np.int32), mask=null)
    return pa.DictionaryArray.from_arrays(indices, pa.array(names, pa.string())).dictionary_decode()


def _occupation_table() -> np.ndarray:
    """P(occupation | education, sex) as an array [education, sex, occupation]."""
    base = np.array([o[1] for o in _OCCUPATIONS])
    suits = np.array([o[2] for o in _OCCUPATIONS])
    male_shift = np.array([o[3] for o in _OCCUPATIONS])
    edu = np.arange(len(EDUCATIONS))[:, None, None]
    male = np.arange(2)[None, :, None]
    logits = np.log(base) - (edu - suits) ** 2 / (2 * 1.3**2) + male * male_shift
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def generate_example(rows: int = DEFAULT_ROWS, seed: int = DEFAULT_SEED) -> pa.Table:
    """The example table: `rows` rows drawn from a small Bayesian network.

    The network, each line a node and the parents it is drawn from:

        age             (root: 17 + a gamma, clipped at 90)
        sex             (root)
        country         (root; NULL at random)
        newsletter      (root; no children: independent of every other column)
        race            <- country              (so nearly independent of everything else)
        education       <- age
        marital_status  <- age
        household_size  <- marital_status
        occupation      <- education, sex; whether it is NULL <- age (the young and the old)
        hours_per_week  <- sex, occupation, age
        income          <- education, occupation, age, hours_per_week; NULL at random
        signup_date     <- age                  (loosely: younger people signed up later)

    NULLs: country about 4% (at random), occupation about 5% (depends on age), income about 3% (at
    random). Rare categories: race 'Amer-Indian-Eskimo' and 'Other' each under 0.5%, several
    countries under 0.5%, occupation 'Armed-Forces' and education 'Preschool' well under 1%. The
    rarest country, 'Holand-Netherlands' (about 0.08%), is deliberately left out of the declared
    categories so that it exercises the 'other' code. About 0.2% of incomes lie above the declared
    upper bound and get clamped by the encoding. The probabilities are invented to look plausible,
    not fitted to any data.

    The same (rows, seed) always gives the identical table. Columns and Arrow types: strings for
    the categoricals, int64 for age and hours_per_week, int32 for household_size, float64 for
    income, date32 for signup_date, bool for newsletter.
    """
    if rows < 1:
        raise ValueError(f"rows must be at least 1, got {rows}")
    rng = np.random.default_rng(seed)
    n = rows

    age = np.minimum(17 + np.floor(rng.gamma(2.2, 10.0, n)), 90).astype(np.int64)
    male = (rng.random(n) < 0.67).astype(np.int64)

    country_p = np.array([c[1] for c in _COUNTRIES])
    country = _draw(rng, np.broadcast_to(country_p, (n, len(country_p))))
    country_null = rng.random(n) < 0.04
    region = np.array([c[2] for c in _COUNTRIES])[country]
    region[country_null] = 0
    race = _draw(rng, RACE_GIVEN_REGION[region])

    education = _draw(rng, EDUCATION_GIVEN_AGE_GROUP[np.digitize(age, _AGE_GROUP_EDGES)])
    marital = _draw(rng, MARITAL_GIVEN_LIFE_STAGE[np.digitize(age, _LIFE_STAGE_EDGES)])
    household = HOUSEHOLD_OFFSET[marital] + rng.poisson(HOUSEHOLD_POISSON_MEAN[marital])
    household = np.clip(household, 1, 8).astype(np.int32)

    occupation = _draw(rng, _occupation_table()[education, male])
    occupation_null_p = np.where(age < 22, 0.15, np.where(age >= 65, 0.20, 0.035))
    occupation_null = rng.random(n) < occupation_null_p

    hours_shift = np.array([o[4] for o in _OCCUPATIONS])[occupation]
    hours_mean = 36.5 + 6.0 * male + hours_shift
    hours_mean = np.where(occupation_null, 22.0, hours_mean)
    hours_mean = hours_mean - 12.0 * ((age < 22) | (age >= 65))
    full_time = (rng.random(n) < 0.45) & ~occupation_null & (age >= 22) & (age < 65)
    hours = np.where(full_time, 40.0, rng.normal(hours_mean, 11.0))
    hours = np.clip(np.rint(hours), 1, 99).astype(np.int64)

    income_shift = np.array([o[5] for o in _OCCUPATIONS])[occupation]
    income_shift = np.where(occupation_null, -0.6, income_shift)
    years = age - 17
    log_income = (
        9.75
        + 0.13 * education
        + income_shift
        + 0.045 * years
        - 0.0006 * years**2
        + 0.45 * np.log(hours / 40.0)
        + rng.normal(0.0, 0.6, n)
    )
    income = np.round(np.exp(log_income), 2)
    income_null = rng.random(n) < 0.03

    span = int((SIGNUP_END - SIGNUP_START).astype(int))
    eagerness = 1.0 + np.maximum(0, 50 - age) / 20.0
    signup_offset = np.minimum(np.floor(rng.beta(eagerness, 1.3) * (span + 1)), span)
    signup_days = SIGNUP_START.astype(np.int64) + signup_offset.astype(np.int64)

    newsletter = rng.random(n) < 0.38

    return pa.table(
        {
            "age": pa.array(age, pa.int64()),
            "sex": _strings(male, SEXES),
            "race": _strings(race, RACES),
            "country": _strings(country, COUNTRIES, country_null),
            "education": _strings(education, EDUCATIONS),
            "marital_status": _strings(marital, MARITAL_STATUSES),
            "occupation": _strings(occupation, OCCUPATIONS, occupation_null),
            "hours_per_week": pa.array(hours, pa.int64()),
            "income": pa.array(income, pa.float64(), mask=income_null),
            "household_size": pa.array(household, pa.int32()),
            "signup_date": pa.array(signup_days.astype(np.int32), pa.date32()),
            "newsletter": pa.array(newsletter, pa.bool_()),
        }
    )


def write_example(
    database: str | Path,
    table: str = DEFAULT_TABLE,
    rows: int = DEFAULT_ROWS,
    seed: int = DEFAULT_SEED,
) -> bool:
    """Create `table` in the DuckDB file `database` from `generate_example(rows, seed)`.

    Does nothing if the table already exists. Returns True if it wrote the table, False if it was
    already there. Creates the file's parent directories and the table's schema as needed.
    """
    if not QUALIFIED_TABLE.match(table):
        raise ValueError(f"{table!r} is not a table name like schema.table")
    parts = table.split(".")
    schema = parts[-2] if len(parts) >= 2 else "main"
    database = Path(database)
    database.parent.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect(str(database))
    try:
        con.execute("BEGIN TRANSACTION")
        if con.execute(sql("table_exists"), [schema, parts[-1]]).fetchone()[0]:
            con.execute("ROLLBACK")
            return False
        if len(parts) >= 2:
            con.execute(sql("create_schema", schema=qualified(".".join(parts[:-1]))))
        con.register(_ARROW_VIEW, generate_example(rows, seed))
        con.execute(sql("write_table", table=qualified(table), relation=_ARROW_VIEW))
        con.unregister(_ARROW_VIEW)
        con.execute("COMMIT")
        return True
    finally:
        con.close()


def main(argv: list[str] | None = None) -> int:
    """`python -m dp_synth_assets.example [database]`: write the example table; the exit status."""
    args = sys.argv[1:] if argv is None else argv
    if len(args) > 1:
        print("usage: python -m dp_synth_assets.example [database]", file=sys.stderr)
        return 2
    database = args[0] if args else DEFAULT_DATABASE
    if write_example(database):
        print(f"wrote the example table {DEFAULT_TABLE} to {database}")
    else:
        print(f"the example table {DEFAULT_TABLE} is already in {database}; left unchanged")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
