"""Relational datasets: a parent dataset and its children, with the parent row together with all
its children as the unit of privacy (docs/relational.md).

Pure: the rules across registry entries (`relation_problems`), the sensitivity and charge of
the counts a relation answers by OpenDP's own map (`family_sensitivity`, which
`privacy.gaussian_counts` takes as its sensitivity), and
the SQL of the contribution bounding (`bounded_children_sql`, `parents_sql`): raw rows never
leave the database. After bounding, a family changes at most `max_children` child rows
(d_in = max_children on the child side) and one parent row (d_in = 1 on the parent side).
"""

from __future__ import annotations

import numpy as np

from opendp.metrics import symmetric_distance
from opendp.transformations import make_count_by_categories

from .opendp_api import dp
from .sql import ident, literal, qualified, sql

# the parent attribute that holds its bounded children count, on the public domain
# 0..max_children
CHILDREN = "children"
# the prefix of a parent column inside the bounded child view (`bounded_children_sql`)
PARENT_PREFIX = "parent_"


def relation_problems(specs: dict) -> list[str]:
    """The broken rules of the `parent:` declarations of a registry (dataset name -> validated
    `DatasetSpec`), one message per problem naming the entry and the fix; empty when none.

    Rules: the parent dataset is an entry of the same file; the parent's `key` is not under the
    parent's `columns:` and the child's `foreign_key` not under the child's (key columns are
    never measured); one level only (a parent has no parent of its own, a dataset is not its own
    parent, which also rules out cycles); the `children` attribute name is free in the parent."""
    problems = []
    for name, spec in specs.items():
        rel = getattr(spec, "parent", None)
        if rel is None:
            continue
        where = spec.entry
        if rel.dataset == name:
            problems.append(f"{where}: `parent.dataset` names the dataset itself; a dataset "
                            "cannot be its own parent: name another entry of this file")
            continue
        parent = specs.get(rel.dataset)
        if parent is None:
            known = ", ".join(sorted(n for n in specs if n != name)) or "none"
            problems.append(f"{where}: `parent.dataset` {rel.dataset!r} is not a dataset of this "
                            f"file (datasets: {known}); declare the parent dataset in the same "
                            "file or fix the name")
            continue
        if rel.foreign_key in spec.columns:
            problems.append(f"{where}: the foreign key column {rel.foreign_key!r} is listed under "
                            "`columns:`; key columns are named only in `parent:` and never "
                            f"measured: remove {rel.foreign_key!r} from `columns:`")
        if rel.key in parent.columns:
            problems.append(f"{parent.entry}: the key column {rel.key!r} (the `parent.key` of "
                            f"dataset {name!r}) is listed under `columns:`; key columns are named "
                            f"only in `parent:` and never measured: remove {rel.key!r} from "
                            "`columns:`")
        if CHILDREN in parent.columns:
            problems.append(f"{parent.entry}: a parent dataset gets the attribute {CHILDREN!r} "
                            f"(its children count); rename the column {CHILDREN!r} in the source "
                            "or leave it out of `columns:`")
        if getattr(parent, "parent", None) is not None:
            problems.append(f"{where}: its parent {rel.dataset!r} has a parent of its own; only "
                            "one level (a parent and its children) is supported yet: declare "
                            f"{name!r} without `parent:` or make {rel.dataset!r} a top-level "
                            "dataset")
    return problems


def family_sensitivity(max_children: int) -> int:
    """The L2 sensitivity of a count array over bounded child rows when one family (a parent with
    all its children) is added or removed: OpenDP's stability map of a count-by-categories
    transformation at symmetric distance d_in = `max_children` (at most that many child rows
    change, and all of them may fall in one cell). `max_children` = 1 gives the sensitivity of a
    count array over parent rows."""
    if not (isinstance(max_children, (int, np.integer)) and max_children >= 1):
        raise ValueError(f"max_children must be an integer >= 1, got {max_children!r}")
    count = make_count_by_categories(
        dp.vector_domain(dp.atom_domain(T="i64")), symmetric_distance(),
        categories=[0], null_category=True, MO="L2Distance<i64>", TOA="i64")
    return int(count.map(int(max_children)))


def unique_parents_sql(parents: str, key: str, seed: int, view: str) -> str:
    """The statement that creates `view`: one row of relation `parents` per non-NULL `key` (the
    rows sharing a key are one family's; which one is kept depends only on the public `seed`, the
    key and the rows' order in storage, never on their values: sql/relational_unique_parents.sql).
    A duplicated or missing key is never refused, so whether a source's keys are unique decides
    nothing public, not even whether a run succeeds. The other statements read this view as
    their `parents`."""
    return sql("relational_unique_parents", view=qualified(view),
               drawn=_drawn(parents, key, seed, 1))


def _drawn(rows: str, group: str, seed: int, bound: int) -> str:
    """The query of at most `bound` rows of `rows` per value of `group`, drawn by the public
    `seed` and the rows' order within their group (sql/relational_draw.sql)."""
    return sql("relational_draw", rows=rows, group=ident(group), seed=literal(str(int(seed))),
               bound=int(bound))


def bounded_children_sql(children: str, parents: str, foreign_key: str, key: str,
                         max_children: int, seed: int, view: str,
                         parent_columns: list[str]) -> str:
    """The statement that creates `view`: each child row of relation `children` whose
    `foreign_key` matches a parent of relation `parents` (orphans are dropped: they belong to no
    family), at most `max_children` per parent, joined to the parent's `parent_columns` (named
    `parent_<column>`). Which children are kept depends only on the public `seed`, the family and
    each child's position within its family in storage order, never on a child's values
    (sql/relational_children.sql). The foreign key column is carried, to count each parent's
    children (`parents_sql`); it is never measured. `children` and `parents` are quoted relation
    names (`sql.qualified`); `parents` is the view `unique_parents_sql` makes (one row per key)."""
    parent_cols = "".join(f", p.{ident(c)} AS {ident(PARENT_PREFIX + c)}"
                          for c in parent_columns)
    return sql("relational_children", view=qualified(view), parents=parents,
               drawn=_drawn(children, foreign_key, seed, max_children),
               fk=ident(foreign_key), key=ident(key), max_children=int(max_children),
               parent_columns=parent_cols)


def parents_sql(parents: str, foreign_key: str, key: str, view: str, bounded: str) -> str:
    """The statement that creates `view`: every parent row of `parents` with its bounded children
    count (`children`, 0..max_children) from the bounded child view `bounded` (made by
    `bounded_children_sql`). The key column is carried for joining only; it is never measured."""
    return sql("relational_parents", view=qualified(view), parents=parents,
               bounded=qualified(bounded),
               fk=ident(foreign_key), key=ident(key), children_column=ident(CHILDREN))
