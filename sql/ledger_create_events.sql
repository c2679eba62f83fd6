-- SQLite. The privacy ledger's events, one row per reserve, charge, release or limit
-- (resources/ledger.py); {{}} is an empty JSON object (braces are doubled in these templates).
CREATE TABLE IF NOT EXISTS privacy_ledger (
    id INTEGER PRIMARY KEY,
    ts TEXT NOT NULL,
    unit TEXT NOT NULL,
    source TEXT NOT NULL,
    dataset TEXT NOT NULL,
    run_id TEXT NOT NULL,
    stage TEXT,
    mechanism TEXT,
    kind TEXT NOT NULL CHECK (kind IN ('reserve', 'charge', 'release', 'limit')),
    rho REAL NOT NULL CHECK (rho >= 0),
    delta_extra REAL NOT NULL DEFAULT 0 CHECK (delta_extra >= 0),
    parameters TEXT NOT NULL DEFAULT '{{}}',
    owner TEXT NOT NULL,
    hash TEXT NOT NULL
)
