"""A new user's first hour with the CLI (issue 19), as the README walks it: each wrong turn a
first session takes ends with one clear message and exit status 2, before anything is printed
or written, and the right turns give what the README says they give."""

from __future__ import annotations

import pytest

from streammap.cli import main
from tests.helpers.paths import SAMPLES

TINY = SAMPLES / "clusters" / "tiny-gpus.yaml"


@pytest.fixture
def compiled(tmp_path, capsys):
    """``plan.yaml`` of the FM-radio sample and ``out.run.json`` of its emulated run, in ``tmp_path``."""
    plan = tmp_path / "plan.yaml"
    assert main(["compile", str(SAMPLES / "fm_radio.py"), "--cluster", str(TINY), "-D", "N=1024",
                 "-o", str(plan)]) == 0
    assert main(["run", str(plan), "--emulate", "-o", str(tmp_path / "out.npz"), "--no-progress"]) == 0
    capsys.readouterr()
    return plan, tmp_path / "out.run.json"


@pytest.mark.parametrize("kind,option,needle", [
    ("plan", "--html", "--html writes a run report; give it a run record"),
    ("record", "--graph", "--graph draws a plan's task graph; give it the plan file"),
])
def test_an_option_for_the_other_kind_of_file_is_refused_before_anything_is_shown_or_drawn(
        compiled, tmp_path, capsys, kind, option, needle):
    plan, record = compiled
    target = plan if kind == "plan" else record
    picture = tmp_path / "gantt.png"
    assert main(["show", str(target), "--gantt", str(picture), option, str(tmp_path / "x.out")]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith(f"{target}: error: {needle}")
    assert not picture.exists() and not (tmp_path / "x.out").exists()
