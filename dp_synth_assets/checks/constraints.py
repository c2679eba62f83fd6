"""The declared constraints' check: the share of synthetic rows violating each, goal 0.

DuckDB counts, in one scan of the synthetic table's Parquet copy, the rows where each declared
constraint (`core.constraints`) fails (check_aggregates.sql); GX validates a frame of one row
per constraint (its violating share must be 0). Public: the table and the constraints are."""

from ..core.constraints import condition_sql
from ..core.sql import sql
from .frames import SyntheticTable
from .gx import Expectation
from .suites import CheckResult, expectations_result


def constraints(table: SyntheticTable) -> CheckResult:
    """No synthetic row violates a declared constraint (the share violating each is 0).

    Counted by DuckDB over the whole table; a constraint naming a column the table lacks counts
    every row as violating it (the schema check names the column)."""
    import pandas as pd

    inputs = table.inputs
    kinds = {name: column.kind for name, column in inputs.declared.items()}
    judged = [c for c in inputs.constraints if all(n in table.present for n in c.columns)]
    counts = "".join(
        ", " + sql("check_count_if", condition=f"NOT {condition_sql(c, kinds)}", alias=f"v{i}")
        for i, c in enumerate(judged))
    row = table.con.execute(sql("check_aggregates", source=table.source,
                                aggregates=counts)).fetchall()[0]
    rows, found = int(row[0]), dict(zip((c.text for c in judged), (int(v) for v in row[1:])))
    records = [{"constraint": c.text,
                "violating_rows": found.get(c.text, rows),
                "violation_share": (found.get(c.text, rows) / rows) if rows else 0.0}
               for c in inputs.constraints]
    frame = pd.DataFrame(records, columns=["constraint", "violating_rows", "violation_share"])
    shares = {r["constraint"]: round(float(r["violation_share"]), 6) for r in records}
    metadata = {"violation_share": shares, "violating_rows":
                {r["constraint"]: int(r["violating_rows"]) for r in records}}
    if records:
        metadata["max_violation_share"] = float(max(shares.values()))
    return expectations_result("constraints", frame, [
        Expectation("ExpectColumnValuesToBeBetween",
                    {"column": "violation_share", "min_value": 0, "max_value": 0})]
        if records else [], inputs.dataset, metadata)
