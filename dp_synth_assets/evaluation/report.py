"""The owner's utility report: how well a synthetic table reproduces its private source.

It reads the private source, is exact and not DP: it is for the data owner, never for the public
zone. Three encoded tables take part (`tables`): `train_real`, `test_real` (source rows split off
before synthesis) and `synthetic`. `utility_report` gathers fidelity, 3-way query error and TVD,
ML efficiency and the figures, against `test_real` with `train_real` as the baseline (the
benchmark paper's section 8.3) when there are at least `ml.MIN_TEST_ROWS` test rows, else against
`train_real`; deterministic given `seed`. The report lives only in owner-only files (0600 in 0700
folders). The reference table and the files: docs/decisions/0022-evaluation-metrics.md,
"As implemented: the report"."""

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, time, timedelta

import numpy as np
import pandas as pd

from ..core.domain import Encoding, EncodingPlan
from .fidelity import column_comparison, pair_tvd
from .ml import CLASSIFIERS, MIN_TEST_ROWS, classifier_line, ml_efficiency, ml_skip_reason
from .plots import histograms_png, tvd_heatmap_png
from .queries import DEFAULT_QUERIES_PER_TRIPLE, DEFAULT_TRIPLES, Triple, query_error, triples
from .tables import Ordinal, Table, encoded, ordered_codes, require_rows, rows_of


@dataclass(frozen=True, eq=False)
class UtilityReport:
    """Everything the owner sees about one synthetic table. Metrics named without a suffix are
    against `reference` ("test_real" or "train_real", see the module docstring); `*_baseline`
    are train_real against test_real (None when reference is train_real)."""

    reference: str
    rows: dict[str, int]                      # train_real, test_real, synthetic
    fidelity: float | None                    # mean 2-way TVD (None with fewer than 2 columns)
    pair_tvds: dict[tuple[str, str], float]
    fidelity_train: float | None              # against train_real, whatever the reference
    fidelity_baseline: float | None
    query_error: float | None                 # None with fewer than 3 columns
    tvd3: float | None
    query_error_baseline: float | None
    tvd3_baseline: float | None
    triples: tuple[Triple, ...]
    queries: int
    ml: pd.DataFrame | None
    ml_reason: str | None                     # why `ml` is None
    columns: list[dict]                       # column_comparison against the reference
    histograms_png: bytes
    tvd_heatmap_png: bytes

    def summary(self) -> dict:
        """Headline numbers, JSON-safe (floats rounded to 6 places, NaN as None)."""

        def num(x):
            return None if x is None or not math.isfinite(x) else round(float(x), 6)

        worst = sorted(self.pair_tvds.items(), key=lambda kv: -kv[1])[:5]
        out = {
            "reference": self.reference, "rows": dict(self.rows),
            "fidelity": num(self.fidelity), "fidelity_train": num(self.fidelity_train),
            "fidelity_baseline": num(self.fidelity_baseline),
            "query_error": num(self.query_error), "query_error_baseline": num(self.query_error_baseline),
            "tvd3": num(self.tvd3), "tvd3_baseline": num(self.tvd3_baseline),
            "pairs": len(self.pair_tvds), "triples": len(self.triples), "queries": self.queries,
            "worst_pairs": [{"pair": list(p), "tvd": num(v)} for p, v in worst],
            "worst_columns": [{"column": c["column"], "tvd": num(c["tvd"])}
                              for c in sorted(self.columns, key=lambda c: -c["tvd"])[:3]],
            "ml_reason": self.ml_reason,
        }
        if self.ml is not None:
            mean = self.ml.set_index("classifier").loc["mean"]
            out.update({f"ml_{k}": num(mean[k]) for k in
                        ("f1_synthetic", "f1_real", "accuracy_synthetic", "accuracy_real")})
        return out


def utility_report(train_real: Table, test_real: Table | None, synthetic: Table,
                   domain: Mapping[str, int], target: str | None = None, ordinal: Ordinal = (),
                   seed: int = 0, triples_count: int = DEFAULT_TRIPLES,
                   queries_per_triple: int | None = DEFAULT_QUERIES_PER_TRIPLE,
                   labels: Mapping[str, Sequence[str]] | None = None, log=None) -> UtilityReport:
    """The full owner-only report; exact, not DP (the module docstring says against which
    reference).

    Args:
        train_real: the encoded source rows the synthesizer was fitted on.
        test_real: encoded source rows it never saw; None or empty: the metrics are against
            `train_real` and ML efficiency is None with its reason.
        synthetic: the encoded synthetic table.
        domain: column -> number of codes.
        target: the column the classifiers predict; None: no ML efficiency.
        ordinal: the columns whose codes are ordered (`tables`).
        seed: fixes every sample and classifier.
        triples_count: how many 3-way marginals the queries cover (`queries.triples`).
        queries_per_triple: boxes per triple; None enumerates them all.
        labels: column -> its codes' labels, for the figures' axes.
        log: each classifier's `classifier_line` at its turn; the lines depend only on public
            facts (the target and the domain), not on whether there are enough held-out rows to
            train (a private count): then the turns pass without training.

    Returns:
        Fidelity, query error, 3-way TVD, ML efficiency, their baselines and the figures.
    """
    domain = dict(domain)
    train = encoded(train_real, domain, "train_real")
    synth = encoded(synthetic, domain, "synthetic")
    test = encoded(test_real, domain, "test_real") if test_real is not None else \
        {c: np.zeros(0, dtype=np.int64) for c in domain}
    require_rows(train, "train_real")
    require_rows(synth, "synthetic")
    ordered_codes(ordinal, domain)  # validate early
    has_test = rows_of(test) >= MIN_TEST_ROWS
    reference = test if has_test else train
    columns = list(domain)

    pairs = pair_tvd(reference, synth, domain)
    fid = float(np.mean(list(pairs.values()))) if pairs else None
    fid_train = (float(np.mean(list(pair_tvd(train, synth, domain).values())))
                 if has_test else fid) if pairs else None
    fid_base = float(np.mean(list(pair_tvd(train, test, domain).values()))) \
        if has_test and pairs else None

    chosen = triples(domain, triples_count, seed)
    qe = tv3 = qe_base = tv3_base = None
    n_queries = 0
    if chosen:
        result = query_error(reference, synth, domain, chosen, queries_per_triple, seed,
                             ordinal=ordinal)
        qe, tv3, n_queries = result.query_error, result.tvd3, result.queries
        if has_test:
            base = query_error(test, train, domain, chosen, queries_per_triple, seed,
                               ordinal=ordinal)
            qe_base, tv3_base = base.query_error, base.tvd3

    reason = ml_skip_reason(rows_of(test), target, domain)
    ml = None if reason is not None else ml_efficiency(train, test, synth, target, domain, seed,
                                                       ordinal, log)
    if reason is not None and log is not None and \
            ml_skip_reason(MIN_TEST_ROWS, target, domain) is None:
        for name in CLASSIFIERS:  # the same lines as when the classifiers train
            log(classifier_line(name))
    comparison = column_comparison(reference, synth, domain)
    return UtilityReport(
        reference="test_real" if has_test else "train_real",
        rows={"train_real": rows_of(train), "test_real": rows_of(test), "synthetic": rows_of(synth)},
        fidelity=fid, pair_tvds=pairs, fidelity_train=fid_train, fidelity_baseline=fid_base,
        query_error=qe, tvd3=tv3, query_error_baseline=qe_base, tvd3_baseline=tv3_base,
        triples=tuple(chosen), queries=n_queries, ml=ml, ml_reason=reason, columns=comparison,
        histograms_png=histograms_png(reference, synth, domain, labels),
        tvd_heatmap_png=tvd_heatmap_png(pairs, columns),
    )


REPORT_FILES = {"json": "report.json", "html": "report.html",
                "histograms": "report_histograms.png", "heatmap": "report_tvd_heatmap.png"}


def report_document(report: UtilityReport) -> dict:
    """The whole report as JSON-safe data (`report.json`)."""
    import json

    return json.loads(json.dumps({
        "summary": report.summary(),
        "pair_tvd": {" x ".join(p): t for p, t in report.pair_tvds.items()},
        "columns": report.columns,
        "ml": None if report.ml is None else report.ml.to_dict(orient="records"),
        "ml_reason": report.ml_reason}, default=str))


def report_html(report: UtilityReport, title: str) -> str:
    """One self-contained page: the summary, the ML-efficiency table and both figures (inline
    PNGs), so the owner has a single file to open."""
    import base64
    import json
    from html import escape

    def cell(value) -> str:
        if isinstance(value, float):
            return f"{value:.4f}" if math.isfinite(value) else ""
        if isinstance(value, (list, dict)):
            return escape(json.dumps(value))
        return escape("" if value is None else str(value))

    def table(header: Sequence[str], rows: Sequence[Sequence]) -> str:
        head = "".join(f"<th>{escape(h)}</th>" for h in header)
        body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>"
                       for row in rows)
        return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"

    def image(alt: str, png: bytes) -> str:
        return (f'<img alt="{escape(alt)}" '
                f'src="data:image/png;base64,{base64.b64encode(png).decode()}">')

    summary = report.summary()
    if report.ml is not None:
        columns = ["classifier", "f1_synthetic", "f1_real", "accuracy_synthetic", "accuracy_real",
                   "note"]
        ml = table(columns, report.ml[columns].itertuples(index=False, name=None))
    else:
        ml = f"<p>not computed: {escape(str(report.ml_reason))}</p>"
    return "\n".join([
        "<!DOCTYPE html>",
        f'<html lang="en"><head><meta charset="utf-8"><title>{escape(title)}</title>',
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}img{max-width:100%}"
        "</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        "<p><strong>Owner-only, exact, not differentially private:</strong> computed against "
        "the source rows. Keep this file in the private zone.</p>",
        "<h2>Summary</h2>", table(["figure", "value"], list(summary.items())),
        "<h2>ML efficiency</h2>", ml,
        "<h2>Per-column histograms, source vs synthetic</h2>",
        image("per-column histograms", report.histograms_png),
        "<h2>2-way TVD per pair</h2>", image("2-way TVD per pair", report.tvd_heatmap_png),
        "</body></html>", ""])


def write_owner_only(directory, files: Mapping[str, bytes], root=None) -> dict[str, str]:
    """Write `files` (name -> content) into `directory` readable by the owner only: every folder
    from `root` (default: `directory` itself) down to `directory` is made 0700, each file is
    created 0600 under a temporary name and renamed over the old one (a reader never sees half
    a file, nor an old file's wider permissions). Returns name -> path."""
    import os
    from pathlib import Path

    directory = Path(directory).resolve()
    root = directory if root is None else Path(root).resolve()
    if root != directory and root not in directory.parents:
        raise ValueError(f"{root} does not contain {directory}")
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    for folder in [directory, *directory.parents]:
        os.chmod(folder, 0o700)
        if folder == root:
            break
    out = {}
    for name, content in files.items():
        path = directory / name
        tmp = directory / f".{name}.tmp"
        try:
            with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
                os.fchmod(f.fileno(), 0o600)  # an old temporary file keeps its mode on O_CREAT
                f.write(content)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        os.replace(tmp, path)
        out[name] = str(path)
    return out


def code_labels(plan: EncodingPlan) -> dict[str, list[str]]:
    """A readable label per code for the report's plots (public: from the plan): categories by
    name, numeric and date bins by their value ranges (`bin_labels`)."""
    labels = {}
    for e in plan.encodings:
        names = [str(c) for c in e.categories] if e.categories is not None else (
            ["False", "True"] if e.kind == "boolean" else bin_labels(e))
        names = names[:e.size]
        for code, name in ((e.rare_code, "rare"), (e.other_code, "other"), (e.null_code, "NULL")):
            if code is not None and code < e.size and len(names) <= code:
                names += [f"code {i}" for i in range(len(names), code)] + [name]
        labels[e.column] = names + [f"code {i}" for i in range(len(names), e.size)]
    return labels


RANGE = "\u2013"  # en dash between a bin's first and last value


def bin_ranges(e: Encoding) -> list[tuple[float, float]]:
    """Each bin's (first, last) value as the encoding defines it (core/domain.py): for
    integer-valued bins (integers, DATE days) the first and last integer the bin decodes to;
    otherwise the bin's interval [start, end), uniform or PrivTree `edges`."""
    if e.bins is None or e.low is None:
        return []
    k = np.arange(e.bins)
    if e.integer_bins:
        if e.edges is not None:
            edges = np.asarray(e.edges, dtype=float)
            first = np.ceil(edges[:-1]).astype(np.int64)
            after = np.ceil(edges[1:]).astype(np.int64)
            after[-1] = int(e.high) + 1
        else:
            span = int(e.high - e.low + 1)
            first = int(e.low) - ((-k * span) // e.bins)
            after = int(e.low) - ((-(k + 1) * span) // e.bins)
        return [(float(a), float(max(b - 1, a))) for a, b in zip(first, after)]
    if e.edges is not None:
        edges = [float(x) for x in e.edges]
    else:
        width = (e.high - e.low) / e.bins
        edges = [e.low + i * width for i in range(e.bins)] + [e.high]
    return list(zip(edges[:-1], edges[1:]))


def bin_labels(e: Encoding) -> list[str]:
    """A label per bin of a binned column: its first and last value joined by an en dash (one
    value when the bin holds one), in the column's units: integers as integers, DATE columns as
    dates, timestamps as dates (with the time when a bin edge is not at midnight), floats with
    as many decimals as the narrowest bin needs to tell its ends apart."""
    ranges = bin_ranges(e)
    if not ranges:
        return []
    if e.kind == "datetime":
        start = datetime(1970, 1, 1)
        ends = [start + timedelta(days=x) for r in ranges for x in r]
        timed = not e.integer_bins and any(t.time() != time() for t in ends)
        fmt = "%Y-%m-%d %H:%M" if timed else "%Y-%m-%d"
        text = lambda x: (start + timedelta(days=x)).strftime(fmt)  # noqa: E731
    elif e.integer_bins:
        text = lambda x: str(int(x))  # noqa: E731
    else:
        width = min((b - a for a, b in ranges if b > a), default=1.0)
        decimals = max(0, 1 - math.floor(math.log10(width)))
        text = lambda x: f"{x:.{decimals}f}"  # noqa: E731
    return [text(a) if text(a) == text(b) else f"{text(a)}{RANGE}{text(b)}" for a, b in ranges]
