"""The bundled relational example (customers and orders) and the relation's views over it in a
real DuckDB file: the known dependencies are there, the declaration loads, and the bounded
views keep every family within max_children."""

import duckdb
import yaml

from dp_synth_assets.core import relational
from dp_synth_assets.core.config import load_registry
from dp_synth_assets.relational_example import (MAX_CHILDREN, RELATIONAL_DATASETS,
                                                generate_relational_example,
                                                write_relational_example)


def test_the_example_has_dependencies_across_the_relation():
    customers, orders = generate_relational_example(3000, seed=1)
    assert customers["id"].is_unique
    assert set(orders["customer_id"]) <= set(customers["id"])
    joined = orders.merge(customers, left_on="customer_id", right_on="id")
    amount = joined.groupby("segment")["amount"].mean()
    assert amount["business"] > 3 * amount["retail"]
    per = orders.groupby("customer_id").size().reindex(customers["id"], fill_value=0)
    by_segment = per.groupby(customers.set_index("id")["segment"]).mean()
    assert by_segment["business"] > 3 * by_segment["retail"]
    assert (per > MAX_CHILDREN).any()  # some families are over the bound: bounding is exercised


def test_the_example_loads_and_its_views_bound_each_family(tmp_path):
    path = tmp_path / "datasets.yaml"
    path.write_text(yaml.safe_dump({"datasets": RELATIONAL_DATASETS}))
    rel = load_registry(path)["orders"].parent
    database = tmp_path / "warehouse.duckdb"
    write_relational_example(database, customers=2000, seed=2)
    con = duckdb.connect(str(database))
    con.execute(relational.bounded_children_sql(
        "main.orders", "main.customers", rel.foreign_key, rel.key, rel.max_children, 7,
        "bounded", ["segment", "region"]))
    con.execute(relational.parents_sql("main.customers", rel.foreign_key, rel.key, "family",
                                       "bounded"))
    most = con.execute("SELECT max(n) FROM (SELECT count(*) AS n FROM bounded GROUP BY "
                       "customer_id)").fetchone()[0]
    assert most == MAX_CHILDREN
    total, kept = con.execute("SELECT (SELECT count(*) FROM main.orders), "
                              "(SELECT sum(children) FROM family)").fetchone()
    assert kept == con.execute("SELECT count(*) FROM bounded").fetchone()[0] < total
    assert con.execute("SELECT count(*) FROM family").fetchone()[0] == 2000
    assert con.execute("SELECT min(children), max(children) FROM family").fetchone() == (
        0, MAX_CHILDREN)
    columns = [r[0] for r in con.execute("DESCRIBE bounded").fetchall()]
    assert columns == ["order_id", "customer_id", "amount", "channel", "parent_segment",
                       "parent_region"]
