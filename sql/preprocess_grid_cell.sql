-- Density key: the value's cell among {cells} cells of width {width} from {low} (a multiple of
-- the width); the value is clamped to the grid in floating point BEFORE the cast, so no value
-- (huge, +-inf) overflows. The 1e-6 of a cell puts a value that sits on a cell edge (61.3 on a
-- 0.05 grid) in the cell it starts, whatever the rounding of the division.
CASE WHEN {v} IS NOT NULL
     THEN least(CAST(floor((least(greatest({v}, {low}), {top}) - {low}) / {width} + 1e-6) AS BIGINT),
                {last}) END
