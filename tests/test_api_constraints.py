"""Declared constraints in the notebook API: `Synthesizer(..., constraints=[...])` samples rows
that satisfy them, as the pipeline's synthetic stage does, and refuses a bad one naming the
argument, the problem and the fix, before anything is spent."""

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

from dp_synth_assets.api import SpecError, Synthesizer
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.resources.ledger import PrivacyLedger

COLUMNS = {
    "pickup": {"kind": "datetime", "bounds": ["2024-03-01", "2024-04-01"]},
    "dropoff": {"kind": "datetime", "bounds": ["2024-03-01", "2024-04-01"]},
    "fare": {"kind": "float", "bounds": [0, 100]},
    "tip": {"kind": "float", "bounds": [0, 100]},
    "zone": {"kind": "categorical", "categories": ["a", "b", "c"]},
    "to_zone": {"kind": "categorical", "categories": ["a", "b", "c"]},
}
CONSTRAINTS = ["dropoff >= pickup", "fare >= tip", "fare >= 2.5", "to_zone != zone"]
FAST = {"iterations": 200}


def trips(n: int = 3000, seed: int = 5) -> pa.Table:
    rng = np.random.default_rng(seed)
    start = np.datetime64("2024-03-01T00:00:00")
    pickup = start + (rng.random(n) * 29 * 86400).astype("timedelta64[s]")
    dropoff = pickup + (rng.exponential(1800, n)).astype("timedelta64[s]")
    fare = 2.5 + rng.gamma(2.0, 8.0, n)
    tip = fare * rng.beta(1, 6, n)
    zone = rng.choice(["a", "b", "c"], n)
    to_zone = np.where(zone == "a", rng.choice(["b", "c"], n), "a")
    return pa.table({"pickup": pickup.astype("datetime64[us]"),
                     "dropoff": dropoff.astype("datetime64[us]"),
                     "fare": fare, "tip": tip, "zone": zone, "to_zone": to_zone})


def violations(table: pa.Table) -> dict:
    f = table.to_pandas()
    return {"dropoff >= pickup": float((f.dropoff < f.pickup).mean()),
            "fare >= tip": float((f.fare < f.tip).mean()),
            "fare >= 2.5": float((f.fare < 2.5).mean()),
            "to_zone != zone": float((f.to_zone == f.zone).mean())}


def test_sample_honours_the_declared_constraints_the_unconstrained_one_does_not():
    source = trips()
    free = Synthesizer(columns=COLUMNS, epsilon=1.0, method="absyn", model=FAST, seed=4)
    free.fit(source)
    found = violations(free.sample(4000))
    assert found["dropoff >= pickup"] > 0.05 and found["fare >= tip"] > 0.01  # can fail
    kept = Synthesizer(columns=COLUMNS, epsilon=1.0, method="absyn", model=FAST, seed=4,
                       constraints=CONSTRAINTS)
    assert [c.text for c in kept.spec.declared_constraints] == CONSTRAINTS
    kept.fit(source)
    table = kept.sample(4000)
    assert table.num_rows == 4000
    assert violations(table) == {c: 0.0 for c in CONSTRAINTS}
    assert table.equals(kept.sample(4000))  # the same seed, the same rows
    assert table.schema.field("pickup").type == pa.timestamp("us")
    # the order made preprocessing measure the trips' gap, and decoding follow it: trips last
    # minutes (median about 21), not the hours that drawing each inside its two-day bin gives
    assert "gap" in {t.mechanism for t in __import__(
        "dp_synth_assets.core.preprocess", fromlist=["all_tasks"]).all_tasks(
            kept.spec.columns, kept.spec.declared_constraints)}

    def median_minutes(t: pa.Table) -> float:
        f = t.to_pandas()
        return float((f.dropoff - f.pickup).dt.total_seconds().abs().median() / 60)

    real = median_minutes(source)
    assert median_minutes(free.sample(4000)) > 6 * real  # the test can fail
    assert real / 2 < median_minutes(table) < real * 2


def test_from_spec_takes_the_entry_constraints(tmp_path):
    path = tmp_path / "datasets.yaml"
    path.write_text("datasets:\n  trips:\n    source: {table: main.trips}\n"
                    "    privacy: {epsilon: 1.0, delta: 1.0e-9, limit: {epsilon: 1.0, delta: 1.0e-9}}\n"
                    "    constraints: ['fare >= tip']\n"
                    "    columns:\n      fare: {kind: float, bounds: [0, 100]}\n"
                    "      tip: {kind: float, bounds: [0, 100]}\n")
    synth = Synthesizer.from_spec(load_registry(path)["trips"])
    assert [c.text for c in synth.spec.declared_constraints] == ["fare >= tip"]


@pytest.mark.parametrize("bad, says, fix", [
    ("dropof >= pickup", "'dropof' is not a declared column", "declare it under `columns:`"),
    ("fare >= pickup", "compares a number column with a datetime column",
     "compare columns of comparable kinds"),
    ("dropoff => pickup", "does not read as", "write it as"),
    ("zone < to_zone", "categorical", "=="),
])
def test_a_bad_constraint_is_refused_naming_the_argument_and_spending_nothing(tmp_path, bad,
                                                                               says, fix):
    ledger = tmp_path / "ledger.sqlite"
    with pytest.raises(SpecError) as refused:
        Synthesizer(columns=COLUMNS, epsilon=1.0, constraints=["fare >= 0", bad], ledger=ledger)
    message = str(refused.value)
    assert "argument 'constraints'" in message and repr(bad) in message
    assert says in message and fix in message
    assert not ledger.exists() or PrivacyLedger(ledger).events("notebook") == []


def test_a_single_text_is_one_constraint_and_none_is_none():
    synth = Synthesizer(columns=COLUMNS, epsilon=1.0, constraints="fare >= tip")
    assert [c.text for c in synth.spec.declared_constraints] == ["fare >= tip"]
    assert Synthesizer(columns=COLUMNS, epsilon=1.0, constraints=None).spec.constraints == []
