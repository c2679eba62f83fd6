"""Is `auto`'s rule evidence or a fit? Leave-one-table-out over the development suite (issue 34).

`auto` (the default method, core/select/auto.py) picks its `mst` branch when absyn's pair scores
are drowned in noise and MST's edges are cheap, else `absyn`: two thresholds on two public
figures of a run, `score_noise_share` (sigma_s / n_hat) and `mst_edge_noise` (nu), in every run of
`auto` in bench/results/suite.json. This script asks whether those thresholds generalize:

- a cell is one (table, epsilon) with the means over seeds of the 2-way TVD of each of auto's
  branches, run with the branch fixed (`auto-absyn`, `auto-mst`, `auto-tree`: `selection.pick`),
  and of the two figures (over those runs and the default's; the noisy row count varies a little
  between seeds);
- a rule (a, b) picks the second branch (`auto-mst`; `--second auto-tree`: absyn's greedy over
  MST's tree) on a cell when share > a and nu <= b, else `auto-absyn`; its loss on a cell is the
  picked branch's tvd2 over the better of the two, minus 1;
- fitting: every (a, b) from the midpoints between the cells' sorted distinct figures (one value
  beyond each end, and `PRIOR`), the least mean loss beyond the goal over the training cells;
  among equal, the pair nearest `PRIOR` (in log distance), so a fold moves them only as far as
  the goal asks (fitting the mean loss instead lets a fold trade a large loss on the table it
  has not seen for small gains on the others);
- leave-one-table-out: for each table, the rule fitted on all the other tables' cells, applied to
  that table's cells; the goal (issue 34) is a loss of at most 10% on every held-out cell.

Printed and written (bench/results/auto_rule_loto.json and .md; `--second auto-tree`:
auto_rule_loto_tree.json and .md): every cell with the branches' tvd2, the shipped thresholds'
pick, each fold's thresholds and pick, and the held-out loss against the better of the two,
against the best of the three branches and against the best method a user could set instead on
that cell (AIM and the anchors included; `auto` does not choose AIM: it is outside the time
goal). The shipped thresholds were themselves chosen on these cells, so their loss is in-sample;
the folds' is the estimate of how the fitting generalizes.

    python bench/auto_rule_loto.py [--records bench/results/suite.json] [--second auto-tree]
"""

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))
from paths import RESULTS  # noqa: E402

# the branches the rule chooses between by default: the first, or the second when share > a and
# nu <= b (`--second auto-tree` passes ("auto-absyn", "auto-tree") instead)
CANDIDATES = ("auto-absyn", "auto-mst")
BRANCHES = ("auto-absyn", "auto-mst", "auto-tree")  # every branch of auto, scored
GOAL = 0.10  # the largest held-out loss the issue accepts
# where the fitting starts from (its tie-break): the thresholds fitted on the standalone absyn
# and mst methods' records, fixed here so that no fold's tie-break moves with the table it holds
# out
PRIOR = (0.15, 0.12)


@dataclass(frozen=True)
class Cell:
    dataset: str
    epsilon: float
    share: float               # sigma_s / n_hat, mean over the default's runs
    nu: float                  # MST's edge noise share, mean over the default's runs
    tvd2: tuple[tuple[str, float], ...]  # (method, mean tvd2) of every method measured

    def of(self, method: str) -> float:
        return dict(self.tvd2)[method]


def pick(cell: Cell, a: float, b: float, candidates: tuple[str, str] = CANDIDATES) -> str:
    return candidates[1] if cell.share > a and cell.nu <= b else candidates[0]


def loss(cell: Cell, method: str, against: tuple[str, ...] = CANDIDATES) -> float:
    best = min(cell.of(m) for m in against if m in dict(cell.tvd2))
    return cell.of(method) / best - 1.0


def grid(values: list[float]) -> list[float]:
    """Thresholds that separate the values every way they can be separated."""
    v = sorted(set(x for x in values if math.isfinite(x)))
    if not v:
        return [0.0]
    mids = [(x + y) / 2 for x, y in zip(v, v[1:])]
    return [v[0] / 2 if v[0] > 0 else v[0] - 1, *mids, v[-1] * 2 if v[-1] > 0 else v[-1] + 1]


def fit(cells: list[Cell], prior: tuple[float, float] = PRIOR,
        candidates: tuple[str, str] = CANDIDATES) -> tuple[float, float, float]:
    """(a, b, mean loss) of the rule that loses the least beyond the goal on `cells` (the mean of
    max(0, loss - GOAL)); among equal, the pair nearest `prior` in log distance, so the
    thresholds move from there only as far as the goal asks."""
    def distance(a: float, b: float) -> float:
        return sum(abs(math.log(max(x, 1e-9)) - math.log(p)) for x, p in zip((a, b), prior))

    best = None
    for a in sorted({*grid([c.share for c in cells]), prior[0]}):
        for b in sorted({*grid([c.nu for c in cells]), prior[1]}):
            losses = [loss(c, pick(c, a, b, candidates), candidates) for c in cells]
            beyond = sum(max(0.0, x - GOAL) for x in losses) / len(cells)
            score = (round(beyond, 12), distance(a, b))
            if best is None or score < best[0]:
                best = (score, a, b, sum(losses) / len(cells))
    return best[1], best[2], best[3]


def cells_of(records: list[dict], candidates: tuple[str, str] = CANDIDATES) -> list[Cell]:
    """One cell per (dataset, epsilon) where both candidates and the default's figures exist."""
    groups: dict[tuple, dict[str, list]] = {}
    for r in records:
        if r.get("epsilon") is None or r.get("tvd2") is None:
            continue
        g = groups.setdefault((r["dataset"], r["epsilon"]), {})
        g.setdefault(r["method"], []).append(r)
    cells = []
    for (dataset, epsilon), g in sorted(groups.items()):
        figures = [r for m in ("default", *BRANCHES) for r in g.get(m, [])
                   if r.get("score_noise_share") is not None
                   and r.get("mst_edge_noise") is not None]
        if not figures or any(m not in g for m in candidates):
            continue
        tvd2 = tuple(sorted((m, sum(r["tvd2"] for r in rs) / len(rs)) for m, rs in g.items()))
        cells.append(Cell(dataset, epsilon,
                          sum(r["score_noise_share"] for r in figures) / len(figures),
                          sum(r["mst_edge_noise"] for r in figures) / len(figures), tvd2))
    return cells


NOT_A_CHOICE = ("bootstrap", "independent",  # not private
                "default", "auto",  # the rule itself: its runs are its branches', drawn again
                "default-given-domain")  # given a free domain no user has


def private_methods(cell: Cell) -> tuple[str, ...]:
    """The methods of the cell a user could set instead (every private method and anchor)."""
    return tuple(m for m, _ in cell.tvd2 if m not in NOT_A_CHOICE)


def leave_one_table_out(cells: list[Cell], shipped: tuple[float, float],
                        prior: tuple[float, float] = PRIOR,
                        candidates: tuple[str, str] = CANDIDATES) -> list[dict]:
    """Each table's cells scored by the rule `fit` (from `prior`) finds on the other tables',
    beside the `shipped` thresholds' pick; the rule chooses between `candidates`."""
    rows = []
    for held in sorted({c.dataset for c in cells}):
        train = [c for c in cells if c.dataset != held]
        a, b, _ = fit(train, prior, candidates) if train else (*prior, 0.0)
        for c in (c for c in cells if c.dataset == held):
            chosen, shipped_pick = pick(c, a, b, candidates), pick(c, *shipped, candidates)
            rows.append({"dataset": held, "epsilon": c.epsilon, "a": a, "b": b,
                         "share": c.share, "nu": c.nu, "picked": chosen,
                         "shipped": shipped_pick,
                         **{m: c.of(m) for m in BRANCHES if m in dict(c.tvd2)},
                         "loss": loss(c, chosen, candidates),
                         "loss_vs_branches": loss(c, chosen, BRANCHES),
                         "shipped_loss": loss(c, shipped_pick, candidates),
                         "shipped_vs_branches": loss(c, shipped_pick, BRANCHES),
                         "loss_vs_suite": loss(c, chosen, private_methods(c)),
                         "best_of_suite": min(private_methods(c), key=c.of)})
    return rows


def summary(rows: list[dict], key: str) -> str:
    values = [r[key] for r in rows if r[key] is not None]
    if not values:
        return "no cell"
    return (f"mean {sum(values) / len(values):.3f}, worst {max(values):.3f}, above {GOAL:.2f} on "
            f"{sum(v > GOAL for v in values)} of {len(values)} cells")


def markdown(rows: list[dict], shipped: tuple[float, float], whole: tuple[float, float, float],
             candidates: tuple[str, str] = CANDIDATES) -> str:
    worst = max((r["loss"] for r in rows), default=float("nan"))
    over = [r for r in rows if r["loss"] > GOAL]
    lines = [
        "# `auto`'s rule, leave-one-table-out (bench/auto_rule_loto.py)", "",
        "Cells: (table, epsilon) of bench/results/suite.json with auto's branches run fixed "
        "(`auto-absyn`, `auto-mst`, `auto-tree`) and their figures; tvd2 the mean over seeds. "
        f"loss: the picked branch's tvd2 over the better of {candidates[0]} and "
        f"{candidates[1]}, minus 1. "
        "`vs branches`: the same against the best of the three. `vs suite`: against the best "
        "private method measured on the cell (AIM and the anchors included).", "",
        f"- shipped thresholds: {candidates[1]} when share > {shipped[0]:g} and nu <= "
        f"{shipped[1]:g}",
        f"- fitted on every cell (least loss beyond {GOAL:.2f}, then nearest {PRIOR}): share > "
        f"{whole[0]:.4g} and nu <= {whole[1]:.4g} (mean loss {whole[2]:.3f})",
        f"- loss of the shipped thresholds (in-sample): {summary(rows, 'shipped_loss')}; "
        f"against the best of the three branches: {summary(rows, 'shipped_vs_branches')}",
        f"- held-out loss of the folds: {summary(rows, 'loss')}",
        f"- held-out loss: worst {worst:.3f}; goal at most {GOAL:.2f} on every cell: "
        + ("**met**" if not over else f"**not met** on {len(over)} of {len(rows)} cells ("
           + ", ".join(f"{r['dataset']} {r['epsilon']:g}: {r['loss']:.2f}" for r in over)
           + ")"), "",
        f"- held-out loss against the best of the three branches: "
        f"{summary(rows, 'loss_vs_branches')}", "",
        "| held out | epsilon | share | nu | fold's a | fold's b | picked | shipped pick | "
        + " | ".join(BRANCHES) + " | loss | shipped loss | vs branches | "
        "vs suite (best) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['epsilon']:g} | {r['share']:.3g} | {r['nu']:.3g} | "
            f"{r['a']:.3g} | {r['b']:.3g} | {r['picked']} | {r['shipped']} | "
            + " | ".join(f"{r[m]:.4f}" if m in r else "-" for m in BRANCHES)
            + f" | {r['loss']:.3f} | {r['shipped_loss']:.3f} | {r['loss_vs_branches']:.3f} | "
            f"{r['loss_vs_suite']:.3f} ({r['best_of_suite']}) |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=RESULTS / "suite.json")
    parser.add_argument("--second", choices=BRANCHES[1:], default=CANDIDATES[1],
                        help="the branch the rule picks when share > a and nu <= b")
    args = parser.parse_args()
    from dp_synth_assets.core.select.auto import MST_NOISE_MAX, SCORE_NOISE_MAX

    candidates = (CANDIDATES[0], args.second)
    shipped = (SCORE_NOISE_MAX, MST_NOISE_MAX)
    cells = cells_of(json.loads(args.records.read_text()), candidates)
    whole = fit(cells, PRIOR, candidates) if cells else (*PRIOR, float("nan"))
    rows = leave_one_table_out(cells, shipped, PRIOR, candidates)
    out = RESULTS / ("auto_rule_loto.json" if args.second == "auto-mst"
                     else "auto_rule_loto_tree.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"shipped": list(shipped), "prior": list(PRIOR),
                               "candidates": list(candidates), "fitted_on_all": list(whole),
                               "goal": GOAL, "rows": rows}, indent=1))
    text = markdown(rows, shipped, whole, candidates)
    out.with_suffix(".md").write_text(text)
    print(text)
    print(f"wrote {out} and {out.with_suffix('.md')}")


if __name__ == "__main__":
    main()
