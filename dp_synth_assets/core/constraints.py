"""Declared constraints between columns (`constraints: ["dropoff >= pickup", ...]`), honoured
when rows are decoded.

A constraint is public (declared; nothing is measured or spent). Its grammar is parsed, never
evaluated: `<column> <op> <column>` or `<column> <op> <literal>`, `op` one of `<`, `<=`, `>`,
`>=`, `==`, `!=`, over integer, float and datetime columns, and `==` / `!=` over categorical
columns (with a category, or with a column of the same categories); a NULL operand satisfies it.
`honour` places an ordered pair of timestamps inside their bins by the pair's gap density
(`draw_gaps`; measured and charged in preprocessing), then redraws a violating row inside its
bins up to `TRIES` times, then projects what no draw fixed; the row count and the seed's rows
are kept.
docs/generators.md, "Declared constraints"; why: docs/decisions/0023-declared-constraints.md."""

import re
from dataclasses import dataclass
from datetime import date, datetime

import numpy as np
import pyarrow as pa

OPS = ("<=", ">=", "==", "!=", "<", ">")
KINDS = ("integer", "float", "datetime")  # the kinds every op compares
CATEGORICAL_OPS = ("==", "!=")  # what a categorical column is compared with
TRIES = 16  # rounds of within-bin redraws before a row is projected
MICROS_PER_DAY = 86_400_000_000

_NAME = r'[A-Za-z_][A-Za-z0-9_]*|"[^"]+"'
_NUMBER = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"
_TEXT = r"'[^']*'"
_GRAMMAR = re.compile(rf"^\s*(?P<left>{_NAME})\s*(?P<op><=|>=|==|!=|<|>)\s*"
                      rf"(?P<right>{_NAME}|{_NUMBER}|{_TEXT})\s*$")
_MIRROR = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_SQL_OP = {"==": "=", "!=": "<>"}


class ConstraintError(ValueError):
    """A declared constraint that does not parse or does not fit the declared columns."""


@dataclass(frozen=True)
class Constraint:
    """One declared constraint: `left op right` (`right` a column) or `left op value` (`value`
    a number: days since 1970-01-01 for a datetime literal, `literal` its text as written)."""

    text: str
    left: str
    op: str
    right: str | None = None
    value: float | None = None
    literal: str | None = None

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.left,) if self.right is None else (self.left, self.right)


def _name(token: str) -> str:
    return token[1:-1] if token.startswith('"') else token


def _refuse(text: str, problem: str, fix: str) -> ConstraintError:
    return ConstraintError(f"constraint {text!r}: {problem}; {fix}")


def parse(text: str) -> Constraint:
    """One constraint's text as a `Constraint` (names not yet checked against the columns).

    Raises:
        ConstraintError: the text is not `<column> <op> <column or literal>`.
    """
    m = _GRAMMAR.match(text) if isinstance(text, str) else None
    if m is None:
        raise _refuse(str(text), "does not read as `<column> <op> <column or literal>`",
                      "write it as e.g. \"dropoff >= pickup\" or \"fare >= 0\", with op one of "
                      + ", ".join(sorted(OPS)) + " (a date literal in single quotes)")
    left, op, right = _name(m["left"]), m["op"], m["right"]
    if right.startswith("'"):
        return Constraint(text, left, op, literal=right[1:-1])
    if re.fullmatch(_NUMBER, right):
        return Constraint(text, left, op, value=float(right), literal=right)
    return Constraint(text, left, op, right=_name(right))


def _family(kind: str) -> str:
    return {"datetime": "datetime", "categorical": "categorical"}.get(kind, "number")


def _labels(column) -> tuple[str, ...] | None:
    """A categorical column's declared values as DuckDB writes them (its `other_label` too),
    or None when they are not written in the spec (discovered, or read `from` a table)."""
    from .sql import sql_text

    if column.category_list is None:
        return None
    return tuple(sql_text(v) for v in column.category_list) + (
        (column.other_label,) if column.other else ())


def _same_categories(a, b) -> bool:
    """Two categorical columns declare the same categories (a list, or one public column)."""
    if a.category_list is not None and b.category_list is not None:
        return set(_labels(a)) == set(_labels(b))
    return a.categories_from is not None and a.categories_from == b.categories_from


def _categorical(text: str, c: "Constraint", columns: dict) -> "Constraint":
    """`c`, whose left column is categorical, checked: `==` / `!=` with a listed category or
    with a categorical column of the same declared categories."""
    labels = _labels(columns[c.left])
    if c.op not in CATEGORICAL_OPS:
        example = labels[0] if labels else "unknown"
        raise _refuse(text, f"orders the categorical column {c.left!r}",
                      f"a categorical column takes only == or != (e.g. \"{c.left} != "
                      f"'{example}'\", or == / != with a column of the same categories)")
    if c.right is not None:
        left, right = columns[c.left], columns[c.right]
        if not _same_categories(left, right):
            raise _refuse(text, f"compares categorical columns {c.left!r} and {c.right!r} whose "
                          "declared categories differ (or are discovered)",
                          "declare the same `categories:` for both, or remove the constraint")
        return c
    if labels is not None and c.literal not in labels:
        raise _refuse(text, f"{c.literal!r} is not a declared category of {c.left!r}",
                      f"use one of its `categories:` (or its `other_label`), quoted: "
                      f"\"{c.left} != '{labels[0]}'\"")
    return Constraint(text, c.left, c.op, literal=c.literal)


def _days(text: str) -> float:
    value = datetime.fromisoformat(text)
    return (value - datetime(1970, 1, 1)).total_seconds() / 86400.0


def validate(texts, columns: dict) -> tuple[Constraint, ...]:
    """The declared constraints `texts`, parsed and checked against the declared `columns`
    (name -> `ColumnSpec`): each names declared columns of kind integer, float, datetime or
    categorical, compares a column with one of a comparable kind (numbers with numbers,
    datetimes with datetimes, categoricals of the same declared categories) or with a literal of
    its kind (a categorical one: a declared category), and not with itself; a categorical
    column only with `==` or `!=`.

    Raises:
        ConstraintError: the first constraint that does not, naming it and the fix.
    """
    found = []
    for text in texts:
        c = parse(text)
        for name in c.columns:
            if name not in columns:
                raise _refuse(text, f"{name!r} is not a declared column",
                              f"declare it under `columns:` or use one of {sorted(columns)}")
            if columns[name].kind not in KINDS + ("categorical",):
                raise _refuse(text, f"column {name!r} is {columns[name].kind}",
                              "constraints compare integer, float, datetime or categorical "
                              "columns; remove the constraint")
        kind = _family(columns[c.left].kind)
        if c.right is not None:
            if c.right == c.left:
                raise _refuse(text, "compares a column with itself", "remove the constraint")
            other = _family(columns[c.right].kind)
            if other != kind:
                raise _refuse(text, f"compares a {kind} column with a {other} column",
                              "compare columns of comparable kinds (numbers with numbers, "
                              "datetimes with datetimes, categories with categories)")
        if kind == "categorical":
            c = _categorical(text, c, columns)
        elif c.right is None and kind == "datetime":
            try:
                c = Constraint(text, c.left, c.op, value=_days(c.literal or ""),
                               literal=c.literal)
            except ValueError:
                raise _refuse(text, f"the datetime column {c.left!r} needs a quoted ISO date",
                              f"write e.g. \"{c.left} >= '2024-01-01'\"") from None
        elif c.right is None and c.value is None:
            raise _refuse(text, f"the {kind} column {c.left!r} needs a number, not a quoted text",
                          f"write e.g. \"{c.left} >= 0\"")
        found.append(c)
    return tuple(found)


# ---- SQL (the check) --------------------------------------------------------------------------


def condition_sql(c: Constraint, kinds: dict[str, str]) -> str:
    """SQL that holds where `c` holds (NULL where an operand is NULL), comparing datetimes as
    TIMESTAMP, numbers as DOUBLE and categories as VARCHAR; `kinds` maps the columns to their
    declared kinds."""
    from .sql import ident, literal

    def operand(name: str) -> str:
        kind = {"datetime": "TIMESTAMP", "categorical": "VARCHAR"}.get(kinds[name], "DOUBLE")
        return f"TRY_CAST({ident(name)} AS {kind})"

    if c.right is not None:
        right = operand(c.right)
    elif kinds[c.left] == "categorical":
        right = literal(c.literal)
    elif kinds[c.left] == "datetime":
        right = f"CAST({literal(c.literal)} AS TIMESTAMP)"
    else:
        right = f"CAST({literal(repr(c.value))} AS DOUBLE)"
    return f"({operand(c.left)} {_SQL_OP.get(c.op, c.op)} {right})"


# ---- decoding ---------------------------------------------------------------------------------


def _holds(op: str, a: np.ndarray, b) -> np.ndarray:
    return {"<": np.less, "<=": np.less_equal, ">": np.greater, ">=": np.greater_equal,
            "==": np.equal, "!=": np.not_equal}[op](a, b)


@dataclass
class _Column:
    """A decoded column as numbers: `values` (int64 micros for a datetime, int64 for an
    integer, float64 for a float), `nulls`, and its Arrow type to go back to."""

    values: np.ndarray
    nulls: np.ndarray
    type: pa.DataType
    choices: np.ndarray | None = None  # a categorical column's declared values (`_Labels`)

    @classmethod
    def of(cls, array) -> "_Column":
        array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
        nulls = np.asarray(array.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        if pa.types.is_date32(array.type):
            values = array.cast(pa.int32()).fill_null(0).to_numpy().astype(np.int64) * MICROS_PER_DAY
        elif pa.types.is_timestamp(array.type):
            values = array.cast(pa.int64()).fill_null(0).to_numpy().astype(np.int64)
        elif pa.types.is_integer(array.type):
            values = array.fill_null(0).to_numpy().astype(np.int64)
        else:
            values = array.fill_null(0.0).to_numpy().astype(np.float64)
        return cls(values.copy(), nulls, array.type)

    @property
    def step(self):
        """The smallest move of a value: a day, a microsecond, 1, or None (a float: nextafter)."""
        if pa.types.is_date32(self.type):
            return MICROS_PER_DAY
        if pa.types.is_timestamp(self.type) or pa.types.is_integer(self.type):
            return 1
        return None

    def fit(self, target: np.ndarray, op: str) -> np.ndarray:
        """The value of this column's type nearest `target` that makes `value op target` hold."""
        step = self.step
        if step is None:
            target = target.astype(np.float64)
            if op == ">":
                return np.nextafter(target, np.inf)
            if op == "<":
                return np.nextafter(target, -np.inf)
            return target
        target = target.astype(np.float64) / step
        fitted = {">=": np.ceil(target), ">": np.floor(target) + 1, "<=": np.floor(target),
                  "<": np.ceil(target) - 1, "==": np.round(target),
                  "!=": np.round(target) + 1}[op]
        return fitted.astype(np.int64) * step

    def array(self) -> pa.Array:
        if pa.types.is_date32(self.type):
            return pa.array((self.values // MICROS_PER_DAY).astype(np.int32),
                            mask=self.nulls).cast(pa.date32())
        if pa.types.is_timestamp(self.type):
            return pa.array(self.values, mask=self.nulls).cast(self.type)
        return pa.array(self.values, mask=self.nulls, type=self.type)


def _bounds(e) -> tuple[float, float]:
    """An encoding's value bounds in `_Column` units (micros for a datetime)."""
    scale = MICROS_PER_DAY if e.kind == "datetime" else 1
    return e.low * scale, e.high * scale


class _Labels:
    """Decoded categorical columns as numbers: `values` index `words` (the values as DuckDB
    writes them, shared by every categorical column of a chunk, so two columns compare by
    index), `nulls` where a value is NULL; `array` gives back a dictionary array."""

    def __init__(self):
        self.words: list[str] = []
        self.index: dict[str, int] = {}

    def id(self, word: str) -> int:
        if word not in self.index:
            self.index[word] = len(self.words)
            self.words.append(word)
        return self.index[word]

    def column(self, array, e) -> "_Column":
        from .sql import sql_text

        array = array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array
        if not pa.types.is_dictionary(array.type):
            array = array.dictionary_encode()
        words = [None if v is None else sql_text(v) for v in array.dictionary.to_pylist()]
        lookup = np.array([-1 if w is None else self.id(w) for w in words] + [-1], np.int64)
        at = np.asarray(array.indices.fill_null(len(words)).to_numpy(), dtype=np.int64)
        values = lookup[at]
        column = _Column(values, values < 0, array.dictionary.type)
        labels = list(e.categories or ()) + [m for m, _ in e.rare or ()]
        labels += [e.other_label] if e.has_other and e.other_label is not None else []
        column.choices = np.array(sorted({self.id(sql_text(v)) for v in labels}), np.int64)
        return column

    def array(self, column: "_Column") -> pa.Array:
        words = pa.array(self.words, pa.string())
        try:
            words = words.cast(column.type)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass  # a word its type cannot hold stays text; the SQL cast types it
        return pa.DictionaryArray.from_arrays(
            pa.array(np.where(column.nulls, 0, column.values).astype(np.int32),
                     mask=column.nulls), words)


def violated(c: Constraint, columns: dict[str, "_Column"], value=None) -> np.ndarray:
    """Rows where `c` fails (an operand NULL: it holds); `value` is a literal's value in the
    column's units (`honour`'s `_literal`)."""
    left = columns[c.left]
    if c.right is None:
        return ~left.nulls & ~_holds(c.op, left.values, value)
    right = columns[c.right]
    return ~left.nulls & ~right.nulls & ~_holds(c.op, left.values, right.values)


def honour(plan, constraints: tuple[Constraint, ...], codes: dict[str, np.ndarray],
           batch: pa.Table, rng: np.random.Generator, decode_column, bin_cuts,
           passes: int = 3) -> pa.Table:
    """`batch` (the decoded rows of `codes`) with every row satisfying `constraints`: redrawn
    inside its bins (a categorical value: drawn from the batch's rows that satisfy the
    constraint) where a draw satisfies it within `TRIES` rounds, else projected (module
    docstring). Chained constraints (a <= b <= c) are honoured in up to `passes` passes over
    them. `decode_column` is `domain.decode_column` (it redraws inside bins), `bin_cuts`
    `domain.bin_cuts` (domain imports config, which imports this module). Draws only from
    `rng`: the same stream gives the same rows."""
    if not constraints or batch.num_rows == 0:
        return batch
    names = sorted({n for c in constraints for n in c.columns})
    labels = _Labels()
    columns = {n: (labels.column(batch.column(n), plan[n]) if plan[n].kind == "categorical"
                   else _Column.of(batch.column(n))) for n in names}

    def literal(c: Constraint):
        if c.right is not None:
            return None
        if plan[c.left].kind == "categorical":
            return labels.id(c.literal)
        return c.value * (MICROS_PER_DAY if plan[c.left].kind == "datetime" else 1)

    draw_gaps(plan, codes, columns, rng, bin_cuts)
    for _ in range(passes):
        dirty = False
        for c in constraints:
            value = literal(c)
            bad = violated(c, columns, value)
            if not bad.any():
                continue
            dirty = True
            if plan[c.left].kind == "categorical":
                _redraw_labels(c, columns, bad, value, rng)
                continue
            for _ in range(TRIES):  # 1. redraw inside the same bins
                at = np.flatnonzero(bad)
                if at.size == 0:
                    break
                drawn = {n: _Column.of(decode_column(plan[n], np.asarray(codes[n])[at], rng))
                         for n in c.columns}
                ok = ~violated(c, drawn, value)
                for n in c.columns:
                    columns[n].values[at[ok]] = drawn[n].values[ok]
                bad[at[ok]] = False
            at = np.flatnonzero(bad)
            if at.size:  # 2. project what no draw could fix
                _project(c, columns, at, plan, value)
        if not dirty:
            break
    for n in names:
        array = (labels.array(columns[n]) if plan[n].kind == "categorical"
                 else columns[n].array())
        batch = batch.set_column(batch.schema.get_field_index(n), n, array)
    return batch


def draw_gaps(plan, codes: dict[str, np.ndarray], columns: dict[str, "_Column"],
              rng: np.random.Generator, bin_cuts) -> None:
    """Each ordered timestamp pair with a gap density (`Encoding.gap`: the pair's noisy
    histogram of later - earlier, preprocessing's `gap` task) placed inside its two bins as the
    model of the pair says: p(earlier, later | both bins) proportional to density(earlier)
    gap(later - earlier), earlier in its bin, later in its own.

    1. The earlier value, where it starts no other pair and ends none (`_roots`): redrawn
       inside its bin from its own density weighted by the chance that the gap puts the later
       value in the later's bin (`place_earlier`). Drawn alone, an earlier value near its bin's
       end and a later bin whose edges differ (each column learns its own) would leave no gap
       the density knows, and the later value would stay where its bin alone put it.
    2. The later value: redrawn inside its bin from the gap density shifted to the row's
       earlier value, p(later | its bin, earlier) proportional to gap(later - earlier) on
       [max(bin low, earlier), bin high).

    The codes are kept (only where inside its bins a value falls changes), so every marginal
    the model learned stays; a row whose bins the density cannot join (or with a NULL operand)
    keeps its values. Post-processing of public releases; draws only from `rng`. `bin_cuts`:
    `domain.bin_cuts`."""
    roots = _roots(plan, columns)
    for name, column in columns.items():
        e = plan[name]
        if not e.gap or e.gap[0] not in columns or not pa.types.is_timestamp(column.type):
            continue
        before = columns[e.gap[0]]
        if not pa.types.is_timestamp(before.type):
            continue
        at = np.flatnonzero(~column.nulls & ~before.nulls)
        if at.size == 0:
            continue
        later_cut = bin_cuts(e)
        cut = later_cut * MICROS_PER_DAY
        code = np.asarray(codes[name])[at].astype(np.int64)
        if roots.get(e.gap[0]) == name:
            first, first_cut = plan[e.gap[0]], bin_cuts(plan[e.gap[0]])
            first_code = np.asarray(codes[e.gap[0]])[at].astype(np.int64)
            placed = place_earlier(first, first_cut, first_code, later_cut, e.high,
                                   code, e.gap[1], rng)
            ok = ~np.isnan(placed)
            low = np.ceil(first_cut[first_code[ok]] * MICROS_PER_DAY)
            high = np.maximum(np.ceil(first_cut[first_code[ok] + 1] * MICROS_PER_DAY) - 1, low)
            before.values[at[ok]] = np.clip(np.round(placed[ok] * MICROS_PER_DAY), low,
                                            high).astype(np.int64)
        earlier = before.values[at].astype(np.float64)
        low = np.maximum(cut[code], earlier)
        high = np.minimum(cut[code + 1], e.high * MICROS_PER_DAY)
        gap = _draw_inside(e.gap[1], (low - earlier) / MICROS_PER_DAY,
                           (high - earlier) / MICROS_PER_DAY, rng)
        ok = ~np.isnan(gap) & (high > low)
        value = np.ceil(earlier[ok] + gap[ok] * MICROS_PER_DAY)
        first = np.ceil(low[ok])  # whole microseconds inside [low, high)
        value = np.clip(value, first, np.maximum(np.ceil(high[ok]) - 1, first))
        column.values[at[ok]] = value.astype(np.int64)


def _roots(plan, columns: dict[str, "_Column"]) -> dict[str, str]:
    """Earlier column -> its later column, for each earlier column of a gap pair that is the
    earlier of that pair alone and the later of none: the ones `draw_gaps` may redraw without
    undoing another pair's placement (in `a <= b <= c`, `a` only)."""
    pairs = [(plan[n].gap[0], n) for n in columns
             if plan[n].gap and plan[n].gap[0] in columns]
    later = {n for _, n in pairs}
    starts = [first for first, _ in pairs]
    return {first: n for first, n in pairs if first not in later and starts.count(first) == 1}


def place_earlier(first, first_cut: np.ndarray, first_code: np.ndarray, later_cut: np.ndarray,
                  later_high: float, later_code: np.ndarray, gap, rng: np.random.Generator
                  ) -> np.ndarray:
    """One earlier value per row (days; NaN where nothing joins the row's two bins), drawn
    inside its bin [first_cut[k], first_cut[k + 1]) from p(x) f(x), p the earlier column's
    density (`Encoding.density`; uniform in a bin it has no mass in, as decoding draws there)
    and f(x) = G(b1 - x) - G(b0 - x) the chance that the gap puts the later value in its bin
    [b0, b1) = [later_cut[j], min(later_cut[j + 1], later_high)), G the CDF of the gap density
    `gap` (pieces (low, high, weight) in days).

    Exact: p is constant between its pieces' edges and f is linear between b0 and b1 less the
    gap pieces' edges, so on the intervals all those points cut the bin into, p f is linear: an
    interval is drawn by its mass (its length times p times the mean of f at its ends, a point
    piece of p by its mass times f there), x inside it by the inverse CDF of a linear density
    (`_linear_draw`). Rows are grouped by their pair of codes: one table per pair that occurs."""
    table = np.asarray(gap, dtype=np.float64).reshape(-1, 3)
    table = table[(table[:, 2] > 0) & (table[:, 1] > table[:, 0])]
    out = np.full(first_code.size, np.nan)
    if table.size == 0 or first_code.size == 0:
        return out
    if first.density:
        density = np.asarray(first.density, dtype=np.float64).reshape(-1, 3)
    else:
        density = np.column_stack([first_cut[:-1], first_cut[1:], np.ones(first_cut.size - 1)])
    density = density[density[:, 2] > 0]
    size = later_cut.size
    pair, rows = np.unique(first_code * size + later_code, return_inverse=True)
    for g, key in enumerate(pair):
        k, j = divmod(int(key), size)
        b0, b1 = later_cut[j], min(later_cut[j + 1], later_high)
        if b1 <= b0:
            continue
        kinks = np.concatenate([b0 - table[:, :2].ravel(), b1 - table[:, :2].ravel()])
        start, stop, level = _intervals(density, first_cut[k], first_cut[k + 1], kinks)
        if start.size == 0:  # no density in this bin: decoded uniformly, so weighed uniformly
            flat = np.array([[first_cut[k], first_cut[k + 1], 1.0]])
            start, stop, level = _intervals(flat, first_cut[k], first_cut[k + 1], kinks)
        f_start = np.clip(_cdf(table, b1 - start) - _cdf(table, b0 - start), 0.0, None)
        f_stop = np.clip(_cdf(table, b1 - stop) - _cdf(table, b0 - stop), 0.0, None)
        point = stop == start
        weight = np.where(point, level * f_start, level * (stop - start) * (f_start + f_stop) / 2)
        total = weight.sum()
        if not total > 0:
            continue
        at = np.flatnonzero(rows == g)
        part = np.searchsorted(np.cumsum(weight), rng.random(at.size) * total, side="right")
        part = np.minimum(part, weight.size - 1)
        share = _linear_draw(f_start[part], f_stop[part], rng.random(at.size))
        out[at] = start[part] + share * (stop[part] - start[part])
    return out


def _intervals(density: np.ndarray, low: float, high: float, cuts: np.ndarray):
    """The density's ((low, high, weight) rows, weight > 0) restriction to [low, high), cut at
    its pieces' edges and at `cuts`: the starts, stops and levels (weight per day) of the
    intervals, then each point piece inside as (x, x, its weight)."""
    length = density[:, 1] - density[:, 0]
    point = length == 0
    spans = density[~point & (density[:, 1] > low) & (density[:, 0] < high)]
    at = np.concatenate([[low, high], spans[:, :2].ravel(), cuts])
    at = np.unique(at[(at >= low) & (at <= high)])
    start, stop = at[:-1], at[1:]
    middle = (start + stop) / 2
    covers = (spans[:, 0] <= middle[:, None]) & (middle[:, None] < spans[:, 1])
    level = covers @ (spans[:, 2] / (spans[:, 1] - spans[:, 0]))
    keep = level > 0
    points = density[point & (density[:, 0] >= low) & (density[:, 0] < high)]
    return (np.concatenate([start[keep], points[:, 0]]),
            np.concatenate([stop[keep], points[:, 0]]),
            np.concatenate([level[keep], points[:, 2]]))


def _linear_draw(f_start: np.ndarray, f_stop: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Where in [0, 1) a draw of the density proportional to f_start + (f_stop - f_start) y
    falls, for uniform `u`: the inverse CDF, u (a + b) / (a + sqrt(a^2 + u (b^2 - a^2))) (the
    root of a y + (b - a) y^2 / 2 = u (a + b) / 2, written so that a = b gives u)."""
    root = f_start + np.sqrt(f_start ** 2 + u * (f_stop ** 2 - f_start ** 2))
    return np.where(root > 0, u * (f_start + f_stop) / np.where(root > 0, root, 1.0), u)


def _cdf(table: np.ndarray, t: np.ndarray) -> np.ndarray:
    """G(t): the share of the piecewise-uniform density `table` ((low, high, weight) rows, each
    high > low) below t, vectorized over t."""
    low, high, weight = table[:, 0], table[:, 1], table[:, 2]
    inside = np.clip((t[:, None] - low) / (high - low), 0.0, 1.0)
    return inside @ weight / weight.sum()


GAP_BLOCK = 8192  # rows of one block of `_draw_inside` (its tables are rows x pieces)


def _draw_inside(pieces, lows: np.ndarray, highs: np.ndarray,
                 rng: np.random.Generator) -> np.ndarray:
    """One value per row from the piecewise-uniform density `pieces` ((low, high, weight), ...;
    weights clipped at 0) restricted to the row's own [lows, highs); NaN where it puts no mass
    there. Vectorized in blocks of GAP_BLOCK rows: each piece's mass inside each row's interval,
    one inverse-CDF pick of a piece per row, one uniform inside it."""
    table = np.asarray(pieces, dtype=np.float64).reshape(-1, 3)
    start, stop = table[:, 0], table[:, 1]
    density = np.clip(table[:, 2], 0.0, None) / np.maximum(stop - start, 1e-300)
    out = np.full(lows.size, np.nan)
    for s in range(0, lows.size, GAP_BLOCK):
        a, b = lows[s:s + GAP_BLOCK, None], highs[s:s + GAP_BLOCK, None]
        lo = np.maximum(start, a)
        width = np.clip(np.minimum(stop, b) - lo, 0.0, None)
        cumulative = np.cumsum(density * width, axis=1)
        total = cumulative[:, -1]
        u = rng.random(total.size) * total
        piece = np.minimum((cumulative <= u[:, None]).sum(axis=1), table.shape[0] - 1)
        rows = np.arange(total.size)
        drawn = lo[rows, piece] + rng.random(total.size) * width[rows, piece]
        out[s:s + GAP_BLOCK] = np.where(total > 0, drawn, np.nan)
    return out


def _redraw_labels(c: Constraint, columns: dict[str, _Column], bad: np.ndarray, value,
                   rng: np.random.Generator) -> None:
    """Rows `bad` of a categorical constraint's left column made to satisfy `c`: `==` takes the
    literal (or the right column's value); `!=` draws the value of a random row of the batch
    (one that satisfies a literal constraint) up to `TRIES` times, then takes the column's first
    other category."""
    left = columns[c.left]
    target = (np.full(left.values.size, value, np.int64) if c.right is None
              else columns[c.right].values)
    if c.op == "==":
        left.values[bad] = target[bad]
        return
    donors = left.values[~left.nulls & _holds(c.op, left.values, target)
                         if c.right is None else ~left.nulls]
    for _ in range(TRIES if donors.size else 0):
        at = np.flatnonzero(bad)
        if at.size == 0:
            break
        drawn = donors[rng.integers(0, donors.size, at.size)]
        ok = drawn != target[at]
        left.values[at[ok]] = drawn[ok]
        bad[at[ok]] = False
    at = np.flatnonzero(bad)
    if at.size:
        choices = left.choices[:2] if left.choices.size >= 2 else np.array([-1, -1])
        first = choices[0] != target[at]
        left.values[at] = np.where(first, choices[0], choices[1])
        left.nulls[at] |= left.values[at] < 0  # a single category: the row takes NULL


def _project(c: Constraint, columns: dict[str, _Column], at: np.ndarray, plan,
             value) -> None:
    """Rows `at` of `columns` moved to satisfy `c`: the left column to the nearest allowed
    value, or, where that leaves the left column's bounds, the right column to the left's."""
    left = columns[c.left]
    target = (np.full(at.size, value) if c.right is None
              else columns[c.right].values[at])
    moved = left.fit(target, c.op)
    low, high = _bounds(plan[c.left])
    inside = (moved >= low) & (moved <= high)
    if c.right is None:
        inside[:] = True  # a literal: nothing else can move
    left.values[at[inside]] = moved[inside]
    if (~inside).any():
        right, rows = columns[c.right], at[~inside]
        right.values[rows] = right.fit(left.values[rows], _MIRROR[c.op])
