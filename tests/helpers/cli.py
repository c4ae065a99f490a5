"""Running the command line in-process for tests of refusals: bad input must end with exit status
2 and a clean message (``file:line:col: error: ...`` and a hint), never a traceback."""

from streammap.cli import main


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
