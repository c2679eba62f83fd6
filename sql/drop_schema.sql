-- Drop a working schema and everything in it (the API's encoded view and marginals).
DROP SCHEMA IF EXISTS {schema} CASCADE
