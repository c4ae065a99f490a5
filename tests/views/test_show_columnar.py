"""``streammap show`` reads a plan whose tasks live in a columnar sidecar as it reads a YAML one."""

from streammap.cli import main
from streammap.plan import write_plan
from tests.helpers.plans import big_plan


def test_show_prints_the_same_summary_and_table_for_a_sidecar_plan_as_for_its_yaml(tmp_path, capsys):
    plan = big_plan(400)
    write_plan(plan, tmp_path / "yaml.plan.yaml")
    write_plan(plan, tmp_path / "cols.plan.yaml", columnar_above=100)
    assert (tmp_path / "cols.plan.tasks.npz").is_file()
    assert main(["show", str(tmp_path / "yaml.plan.yaml"), "--limit", "20"]) == 0
    from_yaml = capsys.readouterr().out
    assert main(["show", str(tmp_path / "cols.plan.yaml"), "--limit", "20"]) == 0
    from_cols = capsys.readouterr().out
    assert "plan: 400 tasks" in from_cols
    assert from_cols == from_yaml
