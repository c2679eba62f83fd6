-- PostgreSQL. The trigger function that refuses every change but an INSERT.
CREATE FUNCTION {schema}.append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION '%.% is append-only', TG_TABLE_SCHEMA, TG_TABLE_NAME;
END
$$
