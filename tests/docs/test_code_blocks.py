"""Every Python code block of the documentation runs as pasted.

Collects each fenced ```python block of README.md, docs/*.md and
packages/*/README.md and runs it as a script in a fresh interpreter (its own
temporary working directory, no OpenReg variables set), in an environment with
all three packages installed (``nox -s "integration(autoload)"`` runs this file),
so blocks that use torch get the binding through autoload. A block must leave
that working directory empty: files it writes go into a temporary directory the
block makes itself, so a reader who pastes it litters nothing.

Each block must also paste into Python's interactive prompt: fed line by line as
the prompt reads it (``code.InteractiveInterpreter``), it must compile without a
SyntaxError into the same top-level statements as the script. That check only
compiles; it runs nothing and needs no torch.

A block that is deliberately not runnable is preceded, on the line just above
its opening fence, by a visible marker giving the reason::

    <!-- not-run: needs a GPU -->

Such blocks are reported as skipped with that reason. Shell blocks are
commands, not run here; the install commands of README.md are run exactly as
written by the integration sessions (see noxfile.py).
"""

from __future__ import annotations

import ast
import code
import os
import re
import subprocess
import sys
import types
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


class PromptCompiler(code.InteractiveInterpreter):
    """Compiles what the interactive prompt would run, without running it.

    ``runcode`` and ``showsyntaxerror`` record instead of executing and printing.
    """

    def __init__(self) -> None:
        super().__init__()
        self.error: str | None = None

    def runcode(self, code: types.CodeType) -> None:
        """Compiled: the prompt would run it now."""

    def showsyntaxerror(self, filename: str | None = None, **kwargs: object) -> None:
        error = sys.exc_info()[1]
        self.error = getattr(error, "msg", None) or str(error)


def prompt_statements(source: str) -> list[int]:
    """The first line of each top-level statement the interactive prompt runs when
    ``source`` is pasted into it, line by line, then Enter once more; raises
    SyntaxError where the prompt would report one."""
    compiler = PromptCompiler()
    starts: list[int] = []
    buffer: list[str] = []
    first = 1
    for number, line in enumerate([*source.splitlines(), ""], 1):
        buffer.append(line)
        chunk = "\n".join(buffer)
        if compiler.runsource(chunk, "<stdin>", "single"):
            continue  # the prompt asks for more lines ("...")
        if compiler.error is not None:
            raise SyntaxError(f"line {number} of the block: {compiler.error}")
        starts += [first + statement.lineno - 1 for statement in ast.parse(chunk).body]
        buffer, first = [], number + 1
    return starts


@pytest.mark.parametrize(("document", "line", "code"), BLOCKS)
def test_python_block_pastes_into_the_prompt(document: Path, line: int, code: str) -> None:
    where = f"the python block at {document.relative_to(ROOT)}:{line}"
    try:
        prompt = prompt_statements(code)
    except SyntaxError as error:
        pytest.fail(
            f"{where} fails when pasted into the interactive prompt ({error}): an indented "
            "block followed directly by an unindented line needs a blank line between them, "
            "and a blank line inside an indented block ends it there"
        )
    script = [statement.lineno for statement in ast.parse(code).body]
    assert prompt == script, (
        f"{where}: the interactive prompt groups its lines into statements starting at "
        f"lines {prompt}, the script at {script}"
    )


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
    left = sorted(path.name for path in tmp_path.iterdir())
    assert not left, (
        f"the python block at {document.relative_to(ROOT)}:{line} wrote {left} into the "
        "current directory: write into a temporary directory the block makes "
        "(tempfile.mkdtemp() or tempfile.TemporaryDirectory())"
    )
