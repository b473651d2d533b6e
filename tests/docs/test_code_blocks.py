"""Every Python code block of the documentation runs as pasted.

Collects each fenced ```python block of README.md, docs/*.md and
packages/*/README.md and runs it in a fresh interpreter (its own temporary
working directory, no OpenReg variables set), in an environment with all three
packages installed (``nox -s "integration(autoload)"`` runs this file), so
blocks that use torch get the binding through autoload.

A block that is deliberately not runnable is preceded, on the line just above
its opening fence, by a visible marker giving the reason::

    <!-- not-run: needs a GPU -->

Such blocks are reported as skipped with that reason. Shell blocks are
commands, not run here; the install commands of README.md are run exactly as
written by the integration sessions (see noxfile.py).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DOCUMENTS += sorted((ROOT / "packages").glob("*/README.md"))
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(.*?)\s*-->$")


def python_blocks() -> list:
    params = []
    for document in DOCUMENTS:
        text = document.read_text()
        for block in FENCE.finditer(text):
            line = text.count("\n", 0, block.start()) + 1
            above = text[: block.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
            name = f"{document.relative_to(ROOT)}:{line}"
            marker = NOT_RUN.match(above)
            marks = [pytest.mark.skip(reason=f"not-run: {marker.group(1)}")] if marker else []
            params.append(pytest.param(document, line, block.group(1), id=name, marks=marks))
    return params


BLOCKS = python_blocks()


def test_the_documentation_has_python_blocks() -> None:
    # Guards the extraction itself: a broken pattern would silently test nothing.
    assert len(BLOCKS) >= 3, [param.id for param in BLOCKS]


def test_every_not_run_marker_gives_a_reason() -> None:
    for document in DOCUMENTS:
        for number, line in enumerate(document.read_text().splitlines(), 1):
            if line.strip().startswith("<!--") and "not-run" in line:
                marker = NOT_RUN.match(line.strip())
                assert marker and marker.group(1), f"{document}:{number}: {line!r} needs a reason"


@pytest.mark.parametrize(("document", "line", "code"), BLOCKS)
def test_python_block_runs_as_pasted(document: Path, line: int, code: str, tmp_path: Path) -> None:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENREG_")}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, (
        f"the python block at {document.relative_to(ROOT)}:{line} failed as pasted "
        f"(exit code {result.returncode}):\n{code}\n--- stderr ---\n{result.stderr}"
    )
