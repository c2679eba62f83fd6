"""The core: the algorithms, as functions of numpy arrays, frozen records and the connections
and stores they are handed. It imports no Dagster, no I/O module and no infrastructure, writes
no files and reads only those tests/test_architecture.py names (`CORE_FILE_READERS`)."""
