"""What the tests share, imported absolutely (``from tests.helpers.plans import make_plan``).

* :mod:`tests.helpers.paths`: the repository's folders, for parametrizations that need a path when
  tests are collected (tests ask for the ``root``, ``samples`` and ``shared`` fixtures otherwise);
* :mod:`tests.helpers.graphs`: random task graphs and a small mixed cluster (mapper tests);
* :mod:`tests.helpers.plans`: hand-made plans (runtime tests: no front end, no mapper);
* :mod:`tests.helpers.fake_cupy`: a fake CuPy (tests install it with the ``fake_cupy`` fixture);
* :mod:`tests.helpers.telemetry`: a fake NVML and a sampler that replays fixed readings.
* :mod:`tests.helpers.multifile`: multi-file programs (a helper module, a local package) and
  their plain-Python results.
* :mod:`tests.helpers.compiled`: plans compiled once per session (``history=False``), handed out
  as deep copies, for tests that read a compiled plan but are not about compiling it.
* :mod:`tests.helpers.admission`: a one-model cluster, jobs for it, and the queue in which the
  admission order's tail deadline is decided (``tail_scene``).

Fixtures, which set up and undo state around a test, are in tests/conftest.py.
"""
