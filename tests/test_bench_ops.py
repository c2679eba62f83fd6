"""The benchmark scripts of the bundled example under concurrent runs and kills, and on object
storage, each on a tiny input (tests/bench_cases.py)."""


from tests.bench_cases import smoke_test



test_script_runs = smoke_test("ops")
