-- PostgreSQL. Append one event (columns in the order of core/ledger.py's _COLUMNS, then hash).
INSERT INTO {schema}.privacy_ledger
    (id, ts, unit, source, dataset, run_id, stage, mechanism, kind, rho, delta_extra, parameters,
     owner, hash)
VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)
