"""The runnable examples of the docstrings (the notebook APIs, the measurement split and the
privacy conversions): each is executed, so an example that no longer works (a renamed argument,
a changed return value) fails the suite."""

import doctest

import pytest

from dp_synth_assets import api, relational_api
from dp_synth_assets.core import measure, privacy

MODULES = [api, relational_api, measure, privacy]


@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.__name__)
def test_the_docstring_examples_run(module):
    finder = doctest.DocTestFinder(exclude_empty=True)
    examples = [t for t in finder.find(module) if t.examples]
    assert examples, f"{module.__name__} has no runnable example"
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in examples:
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} of {results.attempted} examples failed"
