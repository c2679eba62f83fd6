"""Relational synthesis against single tables joined by random keys, on the bundled example
(dp_synth_assets/relational_example.py: a customer's segment sets its orders' count, amount
and channel).

For each epsilon and seed: `RelationalSynthesizer` (the family's budget, half to each table)
and the baseline: each table synthesized alone by `Synthesizer` with the same privacy unit and
noise (the parent at half the family's rho, the bounded children at the other half over
max_children squared: the child's noise at d_in = max_children), the synthetic children given
uniformly random synthetic parent keys. Measured against the real tables: the 2-way TVD within
each table, across the join (each child attribute by each parent attribute) and of the
children-count distribution (real counts capped at max_children, as bounding does), and of
(segment, children count). Writes RESULTS/relational.json and relational.md.

The comparison itself (`Relation`, `relational`, `baseline`, `scores`) takes any relation; bench/
relational_public.py runs it on a public dataset.

    python bench/relational.py [--customers 5000] [--epsilons 0.2 1 5] [--seeds 0 1 ... 19]
"""

import argparse
import itertools
import json
import os
import platform
import time
from dataclasses import dataclass

import numpy as np
import pandas as pd

from paths import RESULTS
from scale import RssSampler

from dp_synth_assets import RelationalSynthesizer, Synthesizer
from dp_synth_assets.core.privacy import epsilon_from_rho
from dp_synth_assets.relational_example import (DEFAULT_SEED, MAX_CHILDREN, RELATIONAL_DATASETS,
                                                generate_relational_example)

DELTA = 1e-9


@dataclass(frozen=True)
class Relation:
    """A parent table and its children as the benchmark declares them: each side's `columns:`
    block, the key columns, the public bound, and the parent column whose dependence on the
    children count is scored on its own (`count_by`)."""
    parent_columns: dict
    child_columns: dict
    key: str
    foreign_key: str
    max_children: int
    count_by: str


EXAMPLE = Relation(RELATIONAL_DATASETS["customers"]["columns"],
                   RELATIONAL_DATASETS["orders"]["columns"], key="id", foreign_key="customer_id",
                   max_children=MAX_CHILDREN, count_by="segment")


def coded(frame: pd.DataFrame, columns: dict) -> pd.DataFrame:
    """The declared `columns` of `frame` on the evaluation's discretization, from the public
    declaration only: a binned column cut into its declared `bins` equal bins over its `bounds`
    (an integer with a bin per value keeps its value), values outside the bounds in the end
    bins; a categorical value outside its declared list reads as the other label (the only
    value the synthetic table can give it); NULL is a value of its own."""
    out = pd.DataFrame(index=frame.index)
    for name, spec in columns.items():
        values = frame[name]
        if spec["kind"] == "categorical":
            listed = [str(c) for c in spec["categories"]]
            text = values.astype(object).where(values.notna(), None)
            text = text.map(lambda v: v if v is None else str(v))
            other = spec.get("other_label", "other")
            out[name] = text.map(lambda v: "NULL" if v is None else (v if v in listed else other))
            continue
        low, high = (float(b) for b in spec["bounds"])
        bins = int(spec["bins"])
        number = pd.to_numeric(values, errors="coerce").astype(float)
        if spec["kind"] == "integer" and bins >= high - low + 1:
            code = np.clip(np.round(number.to_numpy()), low, high) - low
        else:
            edges = np.linspace(low, high, bins + 1)
            code = np.clip(np.digitize(number.to_numpy(), edges[1:-1]), 0, bins - 1).astype(float)
        code = np.where(number.isna().to_numpy(), -1, code)
        out[name] = code.astype(np.int64)
    return out


def tvd(real: pd.DataFrame, syn: pd.DataFrame, columns: list[str]) -> float:
    a = real.groupby(columns).size() / max(len(real), 1)
    b = syn.groupby(columns).size() / max(len(syn), 1)
    return 0.5 * float(a.sub(b, fill_value=0).abs().sum())


def with_counts(rel: Relation, parents: pd.DataFrame, children: pd.DataFrame,
                keys: pd.Series, foreign_keys: pd.Series) -> pd.DataFrame:
    """The coded parents with their children count, capped at max_children."""
    per = children.assign(dp_fk=foreign_keys.to_numpy()).groupby("dp_fk").size()
    out = parents.copy()
    out["children"] = np.minimum(per.reindex(keys.to_numpy(), fill_value=0).to_numpy(),
                                 rel.max_children)
    return out


def joined(rel: Relation, parents: pd.DataFrame, children: pd.DataFrame,
           parent_coded: pd.DataFrame, child_coded: pd.DataFrame) -> pd.DataFrame:
    """Each coded child with its parent's coded columns (`parent_<column>`)."""
    return child_coded.assign(dp_key=children[rel.foreign_key].to_numpy()).merge(
        parent_coded.add_prefix("parent_").assign(dp_key=parents[rel.key].to_numpy()),
        on="dp_key")


def scores(rel: Relation, real: tuple, syn: tuple) -> dict:
    """TVDs of the synthetic (parents, children) against the real ones, on `coded` columns.
    Real children whose foreign key matches no parent (orphans) belong to no family and are
    left out, as the synthesizer leaves them out."""
    (rp, rc), (sp, sc) = real, syn
    rc = rc[rc[rel.foreign_key].isin(rp[rel.key])]
    rpc, spc = coded(rp, rel.parent_columns), coded(sp, rel.parent_columns)
    rcc, scc = coded(rc, rel.child_columns), coded(sc, rel.child_columns)
    rj, sj = joined(rel, rp, rc, rpc, rcc), joined(rel, sp, sc, spc, scc)
    across = [tvd(rj, sj, [c, f"parent_{p}"])
              for c, p in itertools.product(rel.child_columns, rel.parent_columns)]
    rpn = with_counts(rel, rpc, rcc, rp[rel.key], rc[rel.foreign_key])
    spn = with_counts(rel, spc, scc, sp[rel.key], sc[rel.foreign_key])
    return {
        "tvd2_parents": float(np.mean([tvd(rpc, spc, list(pair)) for pair in
                                       itertools.combinations(rel.parent_columns, 2)])),
        "tvd2_children": float(np.mean([tvd(rcc, scc, list(pair)) for pair in
                                        itertools.combinations(rel.child_columns, 2)])),
        "tvd2_join": float(np.mean(across)),
        "tvd_children_count": tvd(rpn, spn, ["children"]),
        f"tvd_{rel.count_by}_by_count": tvd(rpn, spn, [rel.count_by, "children"]),
        "resolves": bool(set(sc[rel.foreign_key]) <= set(sp[rel.key])),
        "parents": len(sp), "children": len(sc),
    }


def bounded(rel: Relation, parents: pd.DataFrame, children: pd.DataFrame,
            seed: int) -> pd.DataFrame:
    """The children of a parent (orphans dropped, as the synthesizer drops them), at most
    max_children per parent, picked at random (never by value)."""
    children = children[children[rel.foreign_key].isin(parents[rel.key])]
    shuffled = children.sample(frac=1.0, random_state=seed)
    return shuffled[shuffled.groupby(rel.foreign_key).cumcount() < rel.max_children]


def measured(run) -> tuple[object, dict]:
    """`run()`'s value and its costs: wall seconds, this process's resident memory (MB) when it
    started and its peak while it ran."""
    sampler = RssSampler(os.getpid())
    sampler.start()
    started = time.perf_counter()
    try:
        value = run()
    finally:
        seconds = time.perf_counter() - started
        rss = [mb for _, mb in sampler.stop()] or [0.0]
    return value, {"seconds": round(seconds, 2), "peak_mb": round(max(rss), 1),
                   "start_mb": round(rss[0], 1)}


def relational(rel: Relation, real: tuple, epsilon: float,
               seed: int) -> tuple[tuple, dict, float]:
    """RelationalSynthesizer's tables, its costs (`measured`) and the family's run rho."""
    synth = RelationalSynthesizer(rel.parent_columns, rel.child_columns, key=rel.key,
                                  foreign_key=rel.foreign_key, max_children=rel.max_children,
                                  epsilon=epsilon, delta=DELTA, seed=seed)
    (parents, children), costs = measured(lambda: synth.fit(*real).sample())
    costs["model_children"] = synth.model_children  # k: children a family the child's model read
    return (parents.to_pandas(), children.to_pandas()), costs, synth.rho


def baseline(rel: Relation, real: tuple, rho: float, seed: int) -> tuple[tuple, dict]:
    """Each table alone with the family's privacy unit and noise, random keys; the tables and
    their costs (`measured`)."""
    parents, children = real

    def run():
        eps_parent = epsilon_from_rho(rho / 2, DELTA)
        eps_child = epsilon_from_rho(rho / 2 / rel.max_children ** 2, DELTA)
        sp = Synthesizer(rel.parent_columns, epsilon=eps_parent, delta=DELTA, seed=seed).fit(
            parents[list(rel.parent_columns)]).sample().to_pandas()
        kept = bounded(rel, parents, children, seed)[list(rel.child_columns)]
        sc = Synthesizer(rel.child_columns, epsilon=eps_child, delta=DELTA,
                         seed=seed).fit(kept).sample().to_pandas()
        sp.insert(0, rel.key, np.arange(1, len(sp) + 1))
        sc.insert(0, rel.foreign_key,
                  np.random.default_rng(seed).integers(1, len(sp) + 1, len(sc)))
        return sp, sc

    return measured(run)


def compare(rel: Relation, real: tuple, epsilon: float, seed: int) -> list[dict]:
    """The relational synthesizer's record and the baseline's at one epsilon and seed."""
    syn, costs, rho = relational(rel, real, epsilon, seed)
    records = [{"epsilon": epsilon, "seed": seed, "method": "relational", **costs,
                **scores(rel, real, syn)}]
    syn, costs = baseline(rel, real, rho, seed)
    records.append({"epsilon": epsilon, "seed": seed, "method": "baseline", **costs,
                    **scores(rel, real, syn)})
    return records


def markdown(records: list[dict], meta: dict) -> str:
    frame = pd.DataFrame(records)
    metrics = ["tvd2_parents", "tvd2_children", "tvd2_join", "tvd_children_count",
               "tvd_segment_by_count"]
    table = frame.groupby(["epsilon", "method"])[metrics + ["seconds"]].mean().reset_index()
    spread = frame.groupby(["epsilon", "method"])["tvd2_join"].std()
    paired = frame.pivot_table(index=["epsilon", "seed"], columns="method", values="tvd2_join")
    wins = (paired["relational"] < paired["baseline"]).groupby(level="epsilon").agg(
        lambda w: f"{int(w.sum())} of {w.size}")
    ks = frame.groupby(["epsilon", "method"])["model_children"].agg(
        lambda v: "" if v.isna().all() else "/".join(str(int(k)) for k in sorted(set(v.dropna()))))
    lines = ["# Relational synthesis vs single tables with random keys", "",
             f"The bundled example ({meta['customers']} customers, {meta['orders']} orders, "
             f"max_children {MAX_CHILDREN}); mean over seeds {meta['seeds']}; delta {DELTA:g}. "
             "`relational`: RelationalSynthesizer (one family budget, half to each table). "
             "`baseline`: each table alone at the same privacy unit and noise (the child at "
             "d_in = max_children), random keys. TVDs against the real tables (lower is "
             "better): 2-way within each table, across the join (child x parent attribute, "
             "mean of 4; its standard deviation over runs in brackets), of the children-count distribution, and of (segment, children "
             "count). k: the children a family the child's model read (`model_children`, "
             "chosen per run from public facts; each seed's). Wins: the runs whose join 2-way "
             "TVD is below the baseline's of the same seed. Written by bench/relational.py.",
             "",
             f"Machine: {meta['cpus']} CPUs, load {meta['load_before']} before and "
             f"{meta['load_after']} after; {meta['total_seconds']:.0f} s in all.", "",
             "| epsilon | method | k | parents 2-way | children 2-way | join 2-way | wins | "
             "children count | segment x count | seconds |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.epsilon:g} | {r.method} | {ks[(r.epsilon, r.method)]} | "
                     f"{r.tvd2_parents:.3f} | "
                     f"{r.tvd2_children:.3f} | {r.tvd2_join:.3f} "
                     f"({spread[(r.epsilon, r.method)]:.3f}) | "
                     f"{wins[r.epsilon] if r.method == 'relational' else ''} | "
                     f"{r.tvd_children_count:.3f} | "
                     f"{r.tvd_segment_by_count:.3f} | {r.seconds:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=5_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 1.0, 5.0])
    # the noise is not seedable (OpenDP's own sampler): at epsilon 0.2 one run's join TVD
    # spreads over 0.1-0.3, so the means need many runs
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(20)))
    args = parser.parse_args()
    real = generate_relational_example(args.customers, seed=DEFAULT_SEED)
    load_before = os.getloadavg()
    started = time.perf_counter()
    records = []
    for epsilon, seed in itertools.product(args.epsilons, args.seeds):
        records += compare(EXAMPLE, real, epsilon, seed)
        print(json.dumps(records[-2]), json.dumps(records[-1]), flush=True)
    meta = {"customers": args.customers, "orders": len(real[1]), "seeds": args.seeds,
            "cpus": os.cpu_count(), "load_before": [round(x, 2) for x in load_before],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "total_seconds": round(time.perf_counter() - started, 1),
            "python": platform.python_version()}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "relational.json").write_text(json.dumps(
        [{**r, "load": meta["load_before"], "cpus": meta["cpus"]} for r in records], indent=1)
        + "\n")
    (RESULTS / "relational.md").write_text(markdown(records, meta))
    print(markdown(records, meta))


if __name__ == "__main__":
    main()
