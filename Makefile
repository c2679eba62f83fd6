# `make run`: set up .venv if needed, load the bundled example, materialize its whole pipeline.
# `make test`: same set-up, then the test suite, both tiers (unit and end to end).
# `make test-fast`: the unit tier only (tests not marked `e2e`, tests/conftest.py).
# `make docs`: the documentation site (mkdocs.yml, docs/) into site/, in strict mode.
# `make wheel`: the installable package (dist/dagster_dp_synth-*.whl) for a host project's pip.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
DATASET ?= example
export DAGSTER_HOME := $(CURDIR)/.dagster_home
export JAX_ENABLE_COMPILATION_CACHE := false
# every command here (a run, the test suite's hundred-odd Python processes: Dagster runs, the
# CLI, the install matrix's fresh venvs) writes the bytecode of what it imports, so the next
# process reads it: with PYTHONDONTWRITEBYTECODE set, as some machines set it, each would
# compile Dagster, Great Expectations and pandas from source again (a fresh clone's suite ran
# over 16 minutes)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: install run run-relational test test-fast dev docs wheel clean

# the distribution was named dp-synth before dagster-dp-synth: its editable finder would keep a
# top-level `resources` importable, so it is removed first. uv installs the 2 GB of the test
# extra (resolution, downloads and unpacking in parallel) in about 30 s where pip takes 3-4
# minutes; nothing is byte-compiled ahead: Python compiles what a command imports, once (see
# `unexport PYTHONDONTWRITEBYTECODE` above). pip, upgraded, stays in the venv for the tests that
# drive it (`pip --python`, tests/wheel_env.py)
$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip 'uv>=0.5,<1'
	@$(BIN)/python -m pip uninstall --quiet --yes dp-synth 2>/dev/null || true
	$(BIN)/python -m uv pip install --quiet --python $(BIN)/python -e '.[test]'
	@touch $(STAMP)

install: $(STAMP)

# a fresh DAGSTER_HOME gets its storages (runs, event log index, schedules) created here, once,
# before any run starts: runs started at once on an empty one race in Dagster's migrations
$(DAGSTER_HOME)/dagster.yaml: | $(STAMP)
	@mkdir -p $(DAGSTER_HOME)
	@printf 'telemetry:\n  enabled: false\n' > $@
	@$(BIN)/python -c "import dagster as dg; i = dg.DagsterInstance.get(); i.get_runs(limit=1); i.get_latest_materialization_event(dg.AssetKey('init')); i.all_instigator_state()" >/dev/null || (rm -f $@; exit 1)

run: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/python -m dp_synth_assets.example data/warehouse.duckdb
	$(BIN)/dagster asset materialize -f definitions.py --select '*$(DATASET)/synthetic+'
	$(BIN)/python -m dp_synth_assets.report $(DATASET)

# the bundled relational example (customers and their orders, docs/relational.md): its own
# project folder under data/relational, materialized by the repository's definitions.py
RELATIONAL := data/relational
run-relational: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/python -m dp_synth_assets.relational_example $(RELATIONAL)
	DP_SYNTH_DATASETS=$(RELATIONAL)/datasets.yaml DP_SYNTH_WAREHOUSE=$(RELATIONAL)/warehouse.duckdb \
	DP_SYNTH_LEDGER=.dp_synth/relational.sqlite DP_SYNTH_PUBLIC=$(RELATIONAL)/public \
	$(BIN)/dagster asset materialize -f definitions.py --select '*orders/synthetic+'

# the test files run on TEST_WORKERS processes (pytest-xdist): in `make test` each file whole in
# one of them (its module fixtures, a server or a built wheel, are shared by its tests); the unit
# tier's files, with cheap fixtures, are split where a worker runs idle (worksteal).
# TEST_WORKERS=0 runs them in this process
TEST_WORKERS ?= 2

test: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=60

test-fast: install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25 -m "not e2e"

dev: install $(DAGSTER_HOME)/dagster.yaml
	$(BIN)/dagster dev -f definitions.py

# the configuration reference is rendered from the models first; a broken link fails the build
docs: install
	$(BIN)/python docs/gen_config_reference.py
	NO_MKDOCS_2_WARNING=1 $(BIN)/python -m mkdocs build --strict

# the system python builds it (setuptools, fetched by pip's build isolation): nothing else installed
wheel:
	python3 -m pip wheel --no-deps --quiet -w dist .

# The privacy ledger (.dp_synth/: ledger.sqlite and its mirrored head) is never cleaned: the
# budget it records was spent on outputs that stay released.
clean:
	rm -rf data public site $(DAGSTER_HOME)
