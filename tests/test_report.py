"""The owner-only `utility_report` asset against an independent computation: the 2-way TVD of
every pair recomputed with DuckDB GROUP BYs over the encoded held-out rows and the encoded
synthetic table (not the numpy code of evaluation/), on the bundled example and, when the
shared datasets are present, on adult (skipped, saying so, in a fresh clone). The report stays in
the private zone: owner-only files, and only their paths in the (public) event log."""

import itertools
import json
import os
import stat

import dagster as dg
import duckdb
import pandas as pd
import pytest
import yaml

from dp_synth_assets.core.domain import EncodingPlan, encode_expression
from dp_synth_assets.core.sql import ident, literal, qualified
from dp_synth_assets.definitions import build_definitions
from dp_synth_assets.evaluation.ml import CLASSIFIERS, classifier_line
from tests.helpers import EXAMPLE_REPORT, REPO, make_project, stage_logs

ADULT = REPO.parent / "shared" / "datasets" / "adult"


def independent_pair_tvds(warehouse, public, dataset: str) -> dict[str, float]:
    plan = EncodingPlan.from_json((public / dataset / "plan.json").read_text())
    encoded = ", ".join(f"{encode_expression(e)} AS {ident(e.column)}" for e in plan.encodings)
    synthetic = f"(SELECT {encoded} FROM read_parquet({literal(str(public / dataset / 'synthetic.parquet'))}))"
    holdout = qualified(f"private.{dataset}_encoded_holdout")
    out = {}
    with duckdb.connect(str(warehouse), read_only=True) as con:
        for a, b in itertools.combinations(plan.columns, 2):
            cols = f"{ident(a)} AS x, {ident(b)} AS y"
            frame = con.execute(f"""
                WITH r AS (SELECT {cols}, count(*) AS n FROM {holdout} GROUP BY ALL),
                     s AS (SELECT {cols}, count(*) AS n FROM {synthetic} GROUP BY ALL)
                SELECT coalesce(r.n, 0) / (SELECT sum(n) FROM r) AS p,
                       coalesce(s.n, 0) / (SELECT sum(n) FROM s) AS q
                FROM r FULL OUTER JOIN s ON r.x = s.x AND r.y = s.y""").df()
            out[f"{a} x {b}"] = 0.5 * float((frame.p - frame.q).abs().sum())
    return out


def report_of(warehouse, dataset: str) -> dict:
    return json.loads((warehouse.parent / "private" / dataset / "report.json").read_text())


def assert_matches(report: dict, independent: dict) -> None:
    assert report["summary"]["reference"] == "test_real"  # against rows synthesis never saw
    assert set(report["pair_tvd"]) == set(independent)
    for pair, value in independent.items():
        assert report["pair_tvd"][pair] == pytest.approx(value, abs=1e-9), pair
    mean = sum(independent.values()) / len(independent)
    assert report["summary"]["fidelity"] == pytest.approx(mean, abs=1e-6)


def test_example_report_matches_an_independent_duckdb_computation(tmp_path):
    project = make_project(tmp_path, rows=3000, report=EXAMPLE_REPORT)
    defs = project.defs_fn()
    instance = dg.DagsterInstance.ephemeral()
    # the report reads the synthetic table and the held-out rows; the checks are not its input
    result = dg.materialize([*defs.assets], resources=defs.resources, instance=instance,
                            selection=dg.AssetSelection.all().without_checks())
    assert result.success
    report = report_of(project.warehouse, "example")
    assert_matches(report, independent_pair_tvds(project.warehouse, project.public, "example"))
    # ML efficiency ran on the held-out rows: three classifiers and their mean
    assert [r["classifier"] for r in report["ml"]][-1] == "mean" and len(report["ml"]) == 4
    assert_stays_private(project, instance, result)


def assert_stays_private(project, instance, result) -> None:
    """The figures and plots are owner-only files in the private zone; the public event log
    holds their paths and nothing else."""
    folder = project.warehouse.parent / "private" / "example"
    mode = lambda p: stat.S_IMODE(os.stat(p).st_mode)  # noqa: E731
    assert mode(folder) == mode(folder.parent) == 0o700
    files = {p.name: p for p in folder.iterdir() if p.name.startswith("report")}
    assert set(files) == {"report.json", "report.html", "report_histograms.png",
                          "report_tvd_heatmap.png"}
    assert {n: mode(p) for n, p in files.items()} == dict.fromkeys(files, 0o600)
    assert files["report_histograms.png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = files["report.html"].read_text()
    assert page.count('src="data:image/png;base64,') == 2 and "ML efficiency" in page
    assert not list(project.public.rglob("report*")), "the report must stay in the private zone"
    event = [e for e in result.get_asset_materialization_events()
             if e.asset_key == dg.AssetKey(["example", "utility_report"])][0]
    meta = event.materialization.metadata
    assert {k: v.value for k, v in meta.items()} == {
        "report_html": str(files["report.html"]), "report_json": str(files["report.json"]),
        "histograms_png": str(files["report_histograms.png"]),
        "tvd_heatmap_png": str(files["report_tvd_heatmap.png"])}
    assert all(isinstance(v, dg.PathMetadataValue) for v in meta.values())
    logs = [e.user_message for e in stage_logs(instance, result.run_id, "example", "utility_report")
            if e.dagster_event is None]
    # where the report is, and each classifier's name as it starts (public: the list is
    # fixed), nothing the report says
    progress = [classifier_line(name) for name in CLASSIFIERS]
    assert [m for m in logs if m in progress] == progress
    others = [m for m in logs if m not in progress]
    assert others and all(str(folder) in m for m in others)


@pytest.mark.skipif(not (ADULT / "adult.csv").exists(),
                    reason=f"needs ../shared/datasets/adult ({ADULT}; present in CI, not in a fresh clone)")
def test_adult_report_matches_an_independent_duckdb_computation(tmp_path):
    domain = json.loads((ADULT / "adult-domain.json").read_text())
    warehouse = tmp_path / "w.duckdb"
    with duckdb.connect(str(warehouse)) as con:
        con.register("frame", pd.read_csv(ADULT / "adult.csv")[list(domain)])
        con.execute("CREATE TABLE main.adult AS SELECT * FROM frame")
    entry = {"source": {"table": "main.adult"},
             "columns": {c: {"kind": "categorical", "categories": list(range(k)), "other": False}
                         for c, k in domain.items()},
             "privacy": {"epsilon": 1.0, "delta": 1e-9, "limit": {"epsilon": 10.0, "delta": 1e-6}},
             "model": {"iterations": 200}, "seed": 0,
             "report": {"holdout": 0.2, "target": "income>50K"}}
    (tmp_path / "datasets.yaml").write_text(yaml.safe_dump({"datasets": {"adult": entry}}))
    defs = build_definitions(tmp_path / "datasets.yaml", warehouse, tmp_path / "ledger.sqlite",
                             tmp_path / "public")
    result = dg.materialize([*defs.assets], resources=defs.resources,
                            instance=dg.DagsterInstance.ephemeral(),
                            selection=dg.AssetSelection.all().without_checks())
    assert result.success
    report = report_of(warehouse, "adult")
    assert_matches(report, independent_pair_tvds(warehouse, tmp_path / "public", "adult"))
    ml = {r["classifier"]: r for r in report["ml"]}
    # income>50K from the other columns: the classifiers trained on the source beat the majority
    # class (about 76% of adult) on the held-out rows
    assert ml["mean"]["accuracy_real"] > 0.8
