"""The ledger's pure core over plain rows, with no store: the fold of a unit's rows into its
budget (`core.ledger.Book`, `scope`, `summarize`) against hand-computed closed forms, and the
hash chain (`core.ledger_chain`). Rows are dicts with the ledger's columns, as a store returns
them; nothing here opens a file or a database."""

import json

import pytest

from dp_synth_assets.core.ledger import Book, LedgerError, scope, summarize
from dp_synth_assets.core.ledger_chain import genesis_hash, link, verify
from dp_synth_assets.core.units import alias_digest

# binary fractions: every sum below is exact in floating point, so equalities are exact
R, C = 0.5, 0.125  # a run's reservation, one charge


def rows_of(*events) -> list[dict]:
    """Ledger rows from (kind, dataset, run_id, rho, extra) tuples, ids in order; `extra` holds
    any other column (stage, unit, source, delta_extra, parameters as a dict, ts, owner)."""
    rows = []
    for position, (kind, dataset, run_id, rho, extra) in enumerate(events, start=1):
        row = {"id": position, "ts": f"2026-01-01T00:00:{position:02d}+00:00", "unit": "u",
               "source": "s", "dataset": dataset, "run_id": run_id, "stage": None,
               "mechanism": None, "kind": kind, "rho": rho, "delta_extra": 0.0,
               "parameters": {}, "owner": "host:1:1"}
        row.update(extra)
        row["parameters"] = json.dumps(row["parameters"], sort_keys=True)
        rows.append(row)
    return rows


def reserve(run, rho=R, dataset="d", **extra):
    return ("reserve", dataset, run, rho, extra)


def charge(run, rho=C, stage="measure", dataset="d", **extra):
    return ("charge", dataset, run, rho, {"stage": stage, **extra})


def release(run, rho=0.0, dataset="d", **extra):
    return ("release", dataset, run, rho, extra)


@pytest.mark.parametrize("runs,charges,released", [(1, 0, 0), (1, 2, 1), (3, 2, 1), (4, 4, 4),
                                                   (5, 1, 0), (2, 3, 2)])
def test_spent_and_reserved_follow_their_closed_forms(runs, charges, released):
    """n runs each reserve R and charge k times C (k C <= R); the first m release. Spent is
    n k C (a released run keeps what it spent); reserved is (n - m)(R - k C)."""
    events = []
    for run in range(runs):
        events += [reserve(f"r{run}")] + [charge(f"r{run}", stage=f"s{i}") for i in range(charges)]
    events += [release(f"r{run}") for run in range(released)]
    book = Book(rows_of(*events))
    assert book.spent_rho == runs * charges * C
    assert book.reserved() == ((runs - released) * (R - charges * C), 0.0)
    assert sorted(run for _, run in book.open) == [f"r{run}" for run in range(released, runs)]
    assert book.runs == ({f"r{run}": {f"s{i}": C for i in range(charges)} for run in range(runs)}
                         if charges else {})


def test_charges_of_one_stage_add_up_per_run_and_delta_extra_folds_like_rho():
    book = Book(rows_of(reserve("a", delta_extra=1e-9), charge("a", stage="x"),
                        charge("a", stage="x", delta_extra=2 ** -40),
                        charge("a", stage="y", rho=0.25)))
    assert book.runs == {"a": {"x": 2 * C, "y": 0.25}}
    assert book.spent_rho == 2 * C + 0.25
    assert book.spent_delta_extra == 2 ** -40
    [(key, held)] = book.open.items()
    assert key == ("d", "a") and held.remaining_rho == R - 2 * C - 0.25
    assert held.remaining_delta_extra == 1e-9 - 2 ** -40
    assert held.reservation().rho == R


def test_an_overcharged_reservation_holds_nothing_and_spent_still_counts_every_charge():
    book = Book(rows_of(reserve("a", rho=C), charge("a", rho=R)))
    assert book.reserved() == (0.0, 0.0)
    assert book.spent_rho == R


def test_a_reservation_belongs_to_its_dataset_and_run():
    """One run may reserve for two datasets of one unit; releasing one keeps the other."""
    book = Book(rows_of(reserve("a", dataset="d1"), reserve("a", dataset="d2"),
                        charge("a", dataset="d2"), release("a", dataset="d1")))
    assert list(book.open) == [("d2", "a")]
    assert book.reserved() == (R - C, 0.0)


def test_a_charge_without_an_open_reservation_counts_as_spent_only():
    book = Book(rows_of(reserve("a"), release("a"), charge("a")))
    assert book.spent_rho == C and book.open == {} and book.reserved() == (0.0, 0.0)


def test_the_kept_limit_is_the_first_reservations_until_a_limit_row():
    """The first reservation pins the limit (its `limit_rho` parameter, else its rho); a larger
    one recorded before any explicit limit replaces it, a smaller one does not; after a `limit`
    row, reservations change nothing."""
    assert Book([]).limit is None
    book = Book(rows_of(reserve("a", parameters={"limit_rho": 1.0})))
    assert (book.limit["rho"], book.limit["explicit"]) == (1.0, False)
    assert Book(rows_of(reserve("a"))).limit["rho"] == R  # no parameter: the rho reserved
    book = Book(rows_of(reserve("a", parameters={"limit_rho": 1.0}),
                        reserve("b", parameters={"limit_rho": 2.0}),
                        reserve("c", parameters={"limit_rho": 0.5})))
    assert (book.limit["rho"], book.limit["row"]["run_id"]) == (2.0, "b")
    book = Book(rows_of(reserve("a", parameters={"limit_rho": 2.0}),
                        ("limit", "d", "", 0.75, {"delta_extra": 1e-8}),
                        reserve("b", parameters={"limit_rho": 4.0})))
    assert (book.limit["rho"], book.limit["delta_extra"], book.limit["explicit"]) == (
        0.75, 1e-8, True)


def test_scope_counts_the_unit_its_sources_and_their_earlier_names():
    old_name = "duckdb:/abs/warehouse.duckdb:main.t"
    rows = rows_of(reserve("a", unit="u", source="s"), charge("a", unit="u", source="s"),
                   reserve("b", dataset="e", unit="group:g", source="s"),  # same source
                   charge("b", dataset="e", unit="group:g", source="s"),
                   reserve("c", dataset="old", unit=old_name, source=old_name),
                   charge("c", dataset="old", unit=old_name, source=old_name, rho=0.25),
                   reserve("z", dataset="other", unit="v", source="t"),
                   charge("z", dataset="other", unit="v", source="t", rho=1.0))
    (unit, source), counted = scope("d", rows, {"d": "u"}, {"d": "s"}, {})
    assert (unit, source) == ("u", "s")
    assert [r["id"] for r in counted] == [1, 2, 3, 4]
    assert Book(counted).spent_rho == 2 * C
    _, counted = scope("d", rows, {"d": "u"}, {"d": "s"}, {"d": (alias_digest(old_name),)})
    assert [r["id"] for r in counted] == [1, 2, 3, 4, 5, 6]
    assert Book(counted).spent_rho == 2 * C + 0.25
    # a dataset no mapping names is where its latest row was recorded
    assert scope("other", rows, {}, {}, {})[0] == ("v", "t")
    assert scope("new", rows, {}, {}, {}) == (("new", "new"), [])


def test_summarize_reports_spent_reserved_and_what_is_left():
    book = Book(rows_of(reserve("a"), charge("a"), reserve("b"), charge("b", rho=0.25),
                        release("b")))
    summary = summarize("d", "u", book)
    assert (summary.spent_rho, summary.reserved_rho, summary.unit) == (C + 0.25, R - C, "u")
    assert summary.runs == {"a": {"measure": C}, "b": {"measure": 0.25}}
    assert summary.remaining_rho(2.0) == 2.0 - (C + 0.25) - (R - C)
    assert summary.remaining_rho(0.5) == 0.0


# ---- the hash chain -----------------------------------------------------------------------------


def chain_of(rows: list[dict], genesis: str) -> list[dict]:
    previous = genesis
    for row in rows:
        row["hash"] = previous = link(previous, row)
    return rows


NAMES = dict(name="L", mirror="head file L.head", restore_hint="Restore L.",
             adopt_command="adopt L")


def test_a_chain_verifies_against_its_head_and_an_edit_anywhere_breaks_it():
    genesis = genesis_hash("secret")
    assert genesis != genesis_hash("another secret")
    rows = chain_of(rows_of(reserve("a"), charge("a"), release("a")), genesis)
    head = {"rows": 3, "head": rows[-1]["hash"], "genesis": genesis}
    verify(rows, genesis, head, **NAMES)
    verify(rows, genesis, {**head, "rows": 2, "head": rows[1]["hash"]}, **NAMES)  # ahead: fine
    verify([], genesis, None, **NAMES)
    edited = [dict(r) for r in rows]
    edited[1]["rho"] = 0.0
    with pytest.raises(LedgerError, match="fails its hash chain at row 2: .* Restore L."):
        verify(edited, genesis, head, **NAMES)
    with pytest.raises(LedgerError, match="has 2 rows, but its head file L.head records 3"):
        verify(rows[:2], genesis, head, **NAMES)
    with pytest.raises(LedgerError, match="is not the ledger its head file L.head mirrors"):
        verify(rows, genesis, {**head, "genesis": genesis_hash("other")}, **NAMES)
    with pytest.raises(LedgerError, match="does not carry the head hash"):
        verify(rows, genesis, {**head, "head": rows[0]["hash"]}, **NAMES)
    with pytest.raises(LedgerError, match="has 3 rows but no head file L.head.*`adopt L`"):
        verify(rows, genesis, None, **NAMES)
