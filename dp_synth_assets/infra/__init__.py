"""Infrastructure under the pure core: stores, locks, files, processes and secrets."""
