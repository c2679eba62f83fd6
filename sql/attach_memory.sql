-- A private in-memory database on a caller's connection for the API's working objects.
ATTACH ':memory:' AS {catalog}
