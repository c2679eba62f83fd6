"""Infrastructure beside the pure core: the code that opens connections, files and locks."""
