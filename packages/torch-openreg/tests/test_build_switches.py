"""The binding's build variables take 1 or 0 and refuse anything else.

``TORCH_OPENREG_PRECOMPILED_HEADER`` and ``TORCH_OPENREG_UNITY_BUILD`` change how
setup.py compiles (docs/ci.md); a misspelt value must stop the build with the
variable's name rather than silently build the other way. setup.py reads them when
it starts, so ``setup.py --version`` (which compiles nothing) shows the decision.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

SETUP = Path(__file__).resolve().parents[1] / "setup.py"
SWITCHES = ["TORCH_OPENREG_PRECOMPILED_HEADER", "TORCH_OPENREG_UNITY_BUILD"]


def setup_version(**variables: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **variables, "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}
    command = [sys.executable, str(SETUP), "--version"]
    return subprocess.run(
        command, cwd=SETUP.parent, env=env, capture_output=True, text=True, timeout=300
    )


@pytest.mark.child_interpreters
@pytest.mark.parametrize("variable", SWITCHES)
def test_a_value_other_than_1_or_0_stops_the_build_naming_the_variable(variable: str) -> None:
    result = setup_version(**{variable: "yes"})
    assert result.returncode != 0, result.stdout
    assert f"{variable}='yes' is invalid: set it to 1 or 0." in result.stderr, result.stderr


@pytest.mark.child_interpreters
def test_1_and_0_are_accepted() -> None:
    result = setup_version(TORCH_OPENREG_PRECOMPILED_HEADER="0", TORCH_OPENREG_UNITY_BUILD=" 1 ")
    assert result.returncode == 0, result.stderr
    assert "invalid" not in result.stderr, result.stderr
