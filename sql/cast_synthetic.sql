-- Decoded rows cast to the declared column types (what write_synthetic.sql stores), returned.
SELECT {casts} FROM {relation}
