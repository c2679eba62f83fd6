"""The benchmark scripts that run the pipeline of the bundled example through Dagster, each on a
tiny input (tests/bench_cases.py; the others in tests/test_bench.py)."""


from tests.bench_cases import smoke_test



test_script_runs = smoke_test("runs")
