-- How many parent rows share a key {key} with another or have none (private: only whether it is
-- zero is used, to refuse parents whose key is not a primary key; the number is never shown).
SELECT count(*) - count(DISTINCT {key}) FROM {parents}
