"""Adding a generation engine is one module plus one line in `core.engines.ENGINES`: an engine
defined in tests/plugin_engine.py (independent columns from the 1-way measurements), registered by
the test alone, validates as `generator:`, fits and samples through the notebook API, round-trips
through the model file, and is tried by `auto` only when it has a place in the preference order."""

import numpy as np
import pytest

from dp_synth_assets.api import SpecError, Synthesizer
from dp_synth_assets.core import engines, generate
from dp_synth_assets.core.config import ModelSettings
from dp_synth_assets.core.measure import Measurement
from dp_synth_assets.example import EXAMPLE_COLUMNS, generate_example
from tests.plugin_engine import Independent


def register(monkeypatch, auto=None):
    """The registry line: name, module, place in auto's preference order (None: only by name)."""
    monkeypatch.setitem(engines.ENGINES, "independent",
                        engines.EngineInfo("tests.plugin_engine", auto))


@pytest.fixture
def registered(monkeypatch):
    register(monkeypatch)


def one_way(domain, seed=0) -> list[Measurement]:
    rng = np.random.default_rng(seed)
    return [Measurement((a,), rng.normal(100, 30, k), 5.0, 0.1) for a, k in domain.items()]


def test_an_unregistered_generator_is_refused_naming_the_choices():
    with pytest.raises(SpecError, match=r"unknown generator 'independent'.*gum.*or auto"):
        Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=1.0, generator="independent")


def test_a_registered_engine_validates_and_synthesizes_through_the_notebook_api(registered):
    # epsilon 8: at 1 the `sex` 1-way's noise (sigma about 62 of 1,500 rows) put the share 0.05
    # off in about 3% of runs (5 of 200 measured); at 8 it is 5.5 sd
    synth = Synthesizer(columns=EXAMPLE_COLUMNS, epsilon=8.0, delta=1e-9, generator="independent",
                        seed=3)
    assert synth.spec.generator == "independent"
    source = generate_example(1500, seed=2)
    table = synth.fit(source).sample(3000)
    assert table.num_rows == 3000 and table.column_names == list(EXAMPLE_COLUMNS)
    assert synth.report.generator == "independent"
    assert isinstance(synth.model, Independent)
    # each column follows its noisy 1-way marginal: the shares of the source, up to the noise
    real = source.to_pandas()["sex"].value_counts(normalize=True)
    fake = table.to_pandas()["sex"].value_counts(normalize=True)
    assert abs(real["Female"] - fake["Female"]) < 0.05


def test_its_model_round_trips_through_the_model_file(monkeypatch):
    register(monkeypatch)
    domain = {"a": 3, "b": 4}
    model = generate.fit("independent", domain, one_way(domain), 300.0, ModelSettings())
    for p in model.probabilities.values():  # clipped at 0 and normalized
        assert (p >= 0).all() and np.isclose(p.sum(), 1.0)
    back = generate.loads(generate.dumps(model))
    assert isinstance(back, Independent) and back.probabilities.keys() == domain.keys()
    assert all(np.array_equal(back.probabilities[a], model.probabilities[a]) for a in domain)
    codes = generate.sample(back, 400, 7)
    assert all(np.array_equal(codes[a], generate.sample(model, 400, 7)[a]) for a in domain)
    chunks = list(generate.sample_chunks(back, 400, 7, chunk_rows=150))
    assert [len(c["a"]) for c in chunks] == [150, 150, 100]
    assert np.array_equal(np.concatenate([c["b"] for c in chunks]), codes["b"])
    # the optional steps default: one unit, no pre-fit guard, no parallel executor
    assert generate.fit_units("independent", domain, one_way(domain), ModelSettings()) == [[0]]
    assert generate.check("independent", domain, one_way(domain), ModelSettings(), "x") is None
    assert not generate.multiprocess("independent", ModelSettings())
    # the file names its engine: once the engine is gone, it is refused by name
    data = generate.dumps(model)
    monkeypatch.delitem(engines.ENGINES, "independent")
    with pytest.raises(ValueError, match="'independent', which is not registered"):
        generate.loads(data)


def test_auto_tries_an_engine_only_at_its_place_in_the_preference_order(monkeypatch):
    domain = {"a": 10, "b": 10, "c": 10}
    found = one_way(domain) + [Measurement(c, np.ones((10, 10)), 1.0, 1.0)
                               for c in [("a", "b"), ("b", "c")]]
    register(monkeypatch, auto=None)
    choice = generate.choose("auto", domain, found, 1000, ModelSettings())
    assert choice.engine == "pgm"
    assert [e.engine for e in choice.estimates] == ["pgm"]
    # nothing fits: the last of the order, never an engine without a place
    tight = ModelSettings(max_seconds=1e-9)
    starved = generate.choose("auto", domain, found, 1000, tight)
    assert starved.engine == "gum"
    assert [e.engine for e in starved.estimates] == ["pgm", "parallel_pgm", "gum"]
    register(monkeypatch, auto=0)  # first in the order
    choice = generate.choose("auto", domain, found, 1000, ModelSettings())
    assert choice.engine == "independent" and choice.reason.startswith("auto: independent fits")
    register(monkeypatch, auto=4)  # after gum: the last resort when nothing fits
    assert generate.choose("auto", domain, found, 1000, ModelSettings()).engine == "pgm"
    assert generate.choose("auto", domain, found, 1000, tight).engine == "independent"
