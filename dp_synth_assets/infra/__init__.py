"""Infrastructure: the code that opens connections, files and locks, beside the pure core."""
