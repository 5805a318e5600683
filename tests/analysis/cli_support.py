"""``proctor`` run in this process, its exit code and output captured."""

from __future__ import annotations

import pytest


def in_process(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """The same entry point without a new interpreter (for the quick cases)."""
    from proctor.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(args))
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err
