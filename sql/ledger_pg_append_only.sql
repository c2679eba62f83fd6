-- PostgreSQL. Make {table} refuse UPDATE and DELETE of its rows ({name}_rows) and TRUNCATE
-- ({name}_truncate).
CREATE TRIGGER {name}_rows BEFORE UPDATE OR DELETE ON {schema}.{table}
    FOR EACH ROW EXECUTE FUNCTION {schema}.append_only();
CREATE TRIGGER {name}_truncate BEFORE TRUNCATE ON {schema}.{table}
    FOR EACH STATEMENT EXECUTE FUNCTION {schema}.append_only()
