"""docs/cli.md is the commands' --help; regenerate with AUTOPAR_UPDATE_GOLDEN=1."""

from __future__ import annotations

import os
from pathlib import Path

from autopar.cli.docs import reference

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_cli_reference_is_current():
    text = reference()
    if os.environ.get("AUTOPAR_UPDATE_GOLDEN"):
        DOC.write_text(text)
    assert DOC.read_text() == text, "docs/cli.md is stale: AUTOPAR_UPDATE_GOLDEN=1 pytest tests/cli/test_docs.py"
