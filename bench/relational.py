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

    python bench/relational.py [--customers 5000] [--epsilons 0.2 1 5] [--seeds 0 1 2]
"""

import argparse
import itertools
import json
import os
import platform
import time

import numpy as np
import pandas as pd

from paths import RESULTS

from dp_synth_assets import RelationalSynthesizer, Synthesizer
from dp_synth_assets.core.privacy import epsilon_from_rho
from dp_synth_assets.relational_example import (DEFAULT_SEED, MAX_CHILDREN, RELATIONAL_DATASETS,
                                                generate_relational_example)

PARENT_COLUMNS = RELATIONAL_DATASETS["customers"]["columns"]
CHILD_COLUMNS = RELATIONAL_DATASETS["orders"]["columns"]
DELTA = 1e-9
AMOUNT_EDGES = np.linspace(0.0, 1000.0, 21)


def binned(children: pd.DataFrame) -> pd.DataFrame:
    out = children.copy()
    out["amount"] = np.clip(np.digitize(out["amount"].astype(float), AMOUNT_EDGES[1:-1]), 0, 19)
    return out


def tvd(real: pd.DataFrame, syn: pd.DataFrame, columns: list[str]) -> float:
    a = real.groupby(columns).size() / max(len(real), 1)
    b = syn.groupby(columns).size() / max(len(syn), 1)
    return 0.5 * float(a.sub(b, fill_value=0).abs().sum())


def with_counts(parents: pd.DataFrame, children: pd.DataFrame) -> pd.DataFrame:
    """The parents with their children count, capped at max_children."""
    per = children.groupby("customer_id").size()
    out = parents.copy()
    out["children"] = np.minimum(per.reindex(parents["id"], fill_value=0).to_numpy(),
                                 MAX_CHILDREN)
    return out


def scores(real: tuple, syn: tuple) -> dict:
    """TVDs of the synthetic (parents, children) against the real ones."""
    (rp, rc), (sp, sc) = real, syn
    rc, sc = binned(rc), binned(sc)
    rj = rc.merge(rp, left_on="customer_id", right_on="id")
    sj = sc.merge(sp, left_on="customer_id", right_on="id")
    across = [tvd(rj, sj, [c, p]) for c, p in itertools.product(CHILD_COLUMNS, PARENT_COLUMNS)]
    rpc, spc = with_counts(rp, rc), with_counts(sp, sc)
    return {
        "tvd2_parents": float(np.mean([tvd(rp, sp, list(pair))
                                       for pair in itertools.combinations(PARENT_COLUMNS, 2)])),
        "tvd2_children": float(np.mean([tvd(rc, sc, list(pair))
                                        for pair in itertools.combinations(CHILD_COLUMNS, 2)])),
        "tvd2_join": float(np.mean(across)),
        "tvd_children_count": tvd(rpc, spc, ["children"]),
        "tvd_segment_by_count": tvd(rpc, spc, ["segment", "children"]),
        "resolves": bool(set(sc["customer_id"]) <= set(sp["id"])),
    }


def bounded(children: pd.DataFrame, seed: int) -> pd.DataFrame:
    """At most max_children children per parent, picked at random (never by value)."""
    shuffled = children.sample(frac=1.0, random_state=seed)
    return shuffled[shuffled.groupby("customer_id").cumcount() < MAX_CHILDREN]


def relational(real: tuple, epsilon: float, seed: int) -> tuple[tuple, float, float]:
    synth = RelationalSynthesizer(PARENT_COLUMNS, CHILD_COLUMNS, key="id",
                                  foreign_key="customer_id", max_children=MAX_CHILDREN,
                                  epsilon=epsilon, delta=DELTA, seed=seed)
    started = time.perf_counter()
    parents, children = synth.fit(*real).sample()
    return (parents.to_pandas(), children.to_pandas()), time.perf_counter() - started, synth.rho


def baseline(real: tuple, rho: float, seed: int) -> tuple[tuple, float]:
    """Each table alone with the family's privacy unit and noise, random keys."""
    parents, children = real
    started = time.perf_counter()
    eps_parent = epsilon_from_rho(rho / 2, DELTA)
    eps_child = epsilon_from_rho(rho / 2 / MAX_CHILDREN ** 2, DELTA)
    sp = Synthesizer(PARENT_COLUMNS, epsilon=eps_parent, delta=DELTA, seed=seed).fit(
        parents.drop(columns="id")).sample().to_pandas()
    sc = Synthesizer(CHILD_COLUMNS, epsilon=eps_child, delta=DELTA, seed=seed).fit(
        bounded(children, seed).drop(columns=["customer_id", "order_id"])).sample().to_pandas()
    sp.insert(0, "id", np.arange(1, len(sp) + 1))
    sc.insert(0, "customer_id", np.random.default_rng(seed).integers(1, len(sp) + 1, len(sc)))
    return (sp, sc), time.perf_counter() - started


def markdown(records: list[dict], meta: dict) -> str:
    frame = pd.DataFrame(records)
    metrics = ["tvd2_parents", "tvd2_children", "tvd2_join", "tvd_children_count",
               "tvd_segment_by_count"]
    table = frame.groupby(["epsilon", "method"])[metrics + ["seconds"]].mean().reset_index()
    lines = ["# Relational synthesis vs single tables with random keys", "",
             f"The bundled example ({meta['customers']} customers, {meta['orders']} orders, "
             f"max_children {MAX_CHILDREN}); mean over seeds {meta['seeds']}; delta {DELTA:g}. "
             "`relational`: RelationalSynthesizer (one family budget, half to each table). "
             "`baseline`: each table alone at the same privacy unit and noise (the child at "
             "d_in = max_children), random keys. TVDs against the real tables (lower is "
             "better): 2-way within each table, across the join (child x parent attribute, "
             "mean of 4), of the children-count distribution, and of (segment, children "
             "count). Written by bench/relational.py.", "",
             f"Machine: {meta['cpus']} CPUs, load {meta['load_before']} before and "
             f"{meta['load_after']} after; {meta['total_seconds']:.0f} s in all.", "",
             "| epsilon | method | parents 2-way | children 2-way | join 2-way | children count "
             "| segment x count | seconds |", "|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples():
        lines.append(f"| {r.epsilon:g} | {r.method} | {r.tvd2_parents:.3f} | "
                     f"{r.tvd2_children:.3f} | {r.tvd2_join:.3f} | {r.tvd_children_count:.3f} | "
                     f"{r.tvd_segment_by_count:.3f} | {r.seconds:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--customers", type=int, default=5_000)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.2, 1.0, 5.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = parser.parse_args()
    real = generate_relational_example(args.customers, seed=DEFAULT_SEED)
    load_before = os.getloadavg()
    started = time.perf_counter()
    records = []
    for epsilon, seed in itertools.product(args.epsilons, args.seeds):
        syn, seconds, rho = relational(real, epsilon, seed)
        records.append({"epsilon": epsilon, "seed": seed, "method": "relational",
                        "seconds": round(seconds, 2), **scores(real, syn)})
        syn, seconds = baseline(real, rho, seed)
        records.append({"epsilon": epsilon, "seed": seed, "method": "baseline",
                        "seconds": round(seconds, 2), **scores(real, syn)})
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
