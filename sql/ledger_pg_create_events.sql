-- PostgreSQL. The privacy ledger's events: the columns of SQLite's privacy_ledger
-- (ledger_create_events.sql), values stored so that a row hashes identically in both stores
-- (ts as text, rho as double precision); {{}} is an empty JSON object.
CREATE TABLE {schema}.privacy_ledger (
    id BIGINT PRIMARY KEY,
    ts TEXT NOT NULL,
    unit TEXT NOT NULL,
    source TEXT NOT NULL,
    dataset TEXT NOT NULL,
    run_id TEXT NOT NULL,
    stage TEXT,
    mechanism TEXT,
    kind TEXT NOT NULL CHECK (kind IN ('reserve', 'charge', 'release', 'limit')),
    rho DOUBLE PRECISION NOT NULL CHECK (rho >= 0),
    delta_extra DOUBLE PRECISION NOT NULL DEFAULT 0 CHECK (delta_extra >= 0),
    parameters TEXT NOT NULL DEFAULT '{{}}',
    owner TEXT NOT NULL,
    hash TEXT NOT NULL
)
