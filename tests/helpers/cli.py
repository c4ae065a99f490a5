"""Running the command line in-process for tests of refusals: bad input must end with exit status
2 and a clean message (``file:line:col: error: ...`` and a hint), never a traceback."""

from streammap.cli import main
from tests.helpers.paths import SHARED


def refused(argv, capsys, *needles) -> str:
    """Run the CLI on ``argv``; it must exit 2 with a clean message holding every needle. Returns
    the message (stderr)."""
    status = main([str(a) for a in argv])
    err = capsys.readouterr().err
    assert status == 2, err
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, err
    return err


def replay_small_stream(tmp_path, *options) -> int:
    """The whole ``streammap simulate`` command line as a user runs it: generate a stream of 20 jobs
    (tenants a and b, seed 1), then replay it on the shared ``hetero-2x4`` cluster under the
    streammap policy with ``options``. Returns how many jobs ``simulate-jobs.csv`` lists (callers:
    ``needs_shared``)."""
    jobs, cluster = tmp_path / "jobs.yaml", SHARED / "clusters" / "hetero-2x4.yaml"
    assert main(["simulate", "--generate", "poisson", "--rate", "0.01", "--jobs-count", "20", "--tenants", "a,b",
                 "--seed", "1", "--jobs", str(jobs)]) == 0
    assert main(["simulate", "--jobs", str(jobs), "--cluster", str(cluster), "--policy", "streammap",
                 *options, "--out", str(tmp_path / "sim")]) == 0
    return (tmp_path / "sim" / "simulate-jobs.csv").read_text().count("\n") - 1      # less the header
