"""A check of the synthetic table that lives outside the package, for tests/test_plugins.py: it
reads a frame of the table (so it runs while the table's connection is open) and passes when no
column of the first rows is entirely NULL."""

import pandas as pd

from dp_synth_assets.checks.gx import Expectation
from dp_synth_assets.checks.suites import CheckResult, expectations_result
from dp_synth_assets.checks.frames import SyntheticTable


def no_empty_column(table: SyntheticTable) -> CheckResult:
    """No column of the synthetic table's first rows is entirely NULL."""
    head = table.frame(table.present, limit=1000)
    filled = pd.DataFrame({"column": list(head.columns),
                           "values": [int(head[c].notna().sum()) for c in head.columns]})
    return expectations_result("no_empty_column", filled, [
        Expectation("ExpectColumnValuesToBeBetween", {"column": "values", "min_value": 1})],
        table.inputs.dataset, {"columns": len(filled)})
