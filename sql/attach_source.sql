-- Attach an external database read-only under a catalog name (an attach source).
ATTACH {target} AS {catalog} (TYPE {type}, READ_ONLY)
