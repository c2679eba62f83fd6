-- SQLite. Every event of a ledger from before the hash chain, in id order (`migrate` copies them).
SELECT ts, dataset, run_id, stage, mechanism, kind, rho, delta_extra, parameters, owner
FROM privacy_ledger ORDER BY id
