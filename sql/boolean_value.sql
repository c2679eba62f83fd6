-- A boolean column's value. Text (VARCHAR, ENUM), case-insensitive and trimmed: 'true', 't',
-- 'yes', 'y', '1' read true; 'false', 'f', 'no', 'n', '0' read false; anything else NULL.
-- Other types (BOOLEAN, numbers) through TRY_CAST. Never fails.
CASE WHEN typeof({column}) = 'VARCHAR' OR typeof({column}) LIKE 'ENUM%' THEN
       CASE WHEN lower(trim(CAST({column} AS VARCHAR))) IN ('true', 't', 'yes', 'y', '1') THEN true
            WHEN lower(trim(CAST({column} AS VARCHAR))) IN ('false', 'f', 'no', 'n', '0') THEN false
       END
     ELSE TRY_CAST({column} AS BOOLEAN) END
