"""The examples in the docstrings of the public entry points run and give what they show.

These are the functions a user starts from and copies examples of; each must have examples, so an
example deleted by mistake fails here as well as a wrong one. Only these docstrings are run: the
examples elsewhere in the package are illustrations, not checked.
"""

import doctest
import importlib
import tempfile

import pytest

ENTRY_POINTS = [
    "streammap.compile",
    "streammap.run",
    "streammap.mappers.heft.heft",
    "streammap.cluster.model.load_cluster",
    "streammap.cluster.model.cluster_from_dict",
    "streammap.plan.read_plan",
    "streammap.plan.write_plan",
]


@pytest.mark.parametrize("entry_point", ENTRY_POINTS)
def test_the_docstring_examples_run_and_give_what_they_show(entry_point, tmp_path, monkeypatch, capsys):
    module_name, _, name = entry_point.rpartition(".")
    module = importlib.import_module(module_name)
    found = doctest.DocTestFinder().find(getattr(module, name), entry_point, module=module,
                                         globs=vars(module).copy())
    examples = [t for t in found if t.examples]
    assert examples, f"{entry_point} has no examples in its docstring"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))      # the examples' folders go under tmp_path
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    failed = sum(runner.run(t).failed for t in examples)
    assert failed == 0, capsys.readouterr().out                  # doctest's report of what differed
