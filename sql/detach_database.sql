-- Detach a database (and drop an in-memory one with everything in it).
DETACH {catalog}
