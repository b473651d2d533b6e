"""The binding's environment switches: OPENREG_FALLBACK and OPENREG_LAUNCH_BLOCKING.

Both are read once, when torch_openreg is imported, so every case runs in a fresh
interpreter.
"""

from __future__ import annotations

from pathlib import Path

import pytest

# Every test runs its device work in fresh interpreters it starts (see the
# child_interpreters marker in pyproject.toml).
pytestmark = pytest.mark.child_interpreters

MIXED_DEVICES = """
import torch, torch_openreg
first, second = torch.ones(3, device="openreg:0"), torch.ones(3, device="openreg:1")
cases = {
    "two openreg devices": lambda: first + second,
    "openreg and cpu": lambda: first + torch.ones(3),
}
for name, call in cases.items():
    try:
        call()
    except RuntimeError as error:
        print(name, "->", "same device" in str(error))
    else:
        print(name, "-> allowed")
# A 0-dim CPU tensor may mix, as on CUDA.
print("scalar ->", (torch.ones(2, device="openreg") + torch.tensor(2.0)).tolist())
"""


@pytest.mark.parametrize("mode", ["inplace", "copy"])
def test_both_fallback_modes_refuse_mixed_devices(run_python, mode):
    result = run_python(MIXED_DEVICES, OPENREG_FALLBACK=mode)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "two openreg devices -> True",
        "openreg and cpu -> True",
        "scalar -> [3.0, 3.0]",
    ]


def test_copy_mode_computes_what_the_cpu_computes(run_python):
    result = run_python(
        """
        import torch, torch_openreg
        assert torch_openreg._C._fallback_mode() == "copy"
        x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
        y = (x.to("openreg").softmax(-1) @ x.to("openreg").T).cpu()
        torch.testing.assert_close(y, x.softmax(-1) @ x.T)
        print("ok")
        """,
        OPENREG_FALLBACK="copy",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize(
    ("variable", "value"),
    [("OPENREG_FALLBACK", "bogus"), ("OPENREG_LAUNCH_BLOCKING", "yes")],
)
def test_an_invalid_switch_fails_the_import_naming_it(run_python, variable, value):
    result = run_python("import torch_openreg", **{variable: value})
    assert result.returncode != 0
    assert f"{variable}='{value}' is invalid" in result.stderr
    assert "or unset it" in result.stderr


# An index out of range is found by the CPU kernel while it runs, on the stream worker.
BAD_INDEX = """
import torch, torch_openreg
x = torch.arange(5.0, device="openreg")
good = torch.tensor([0, 1], device="openreg")
bad = torch.tensor([0, 7], device="openreg")
torch.index_select(x, 0, good)  # the signature's first call runs synchronously
torch.openreg.synchronize()
try:
    torch.index_select(x, 0, bad)
    print("call returned")
    torch.openreg.synchronize()
except (RuntimeError, IndexError) as error:
    print("raised:", "out of range" in str(error))
"""


def test_a_kernel_error_surfaces_at_the_next_synchronization_by_default(run_python):
    result = run_python(BAD_INDEX)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["call returned", "raised: True"]


def test_launch_blocking_raises_the_kernel_error_at_its_operator(run_python):
    result = run_python(BAD_INDEX, OPENREG_LAUNCH_BLOCKING="1")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["raised: True"]


def test_launch_blocking_leaves_nothing_queued_after_a_call(run_python):
    result = run_python(
        f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import torch, torch_openreg
        from _async import held_stream
        x = torch.ones(8, device="openreg")
        x + 1  # first call of the signature
        with held_stream() as held:
            held.release_soon()  # once the host waits for the held work
            y = x + 1
            print(held.released, torch.openreg.current_stream().query(), y.sum().item())
        """,
        OPENREG_LAUNCH_BLOCKING="1",
    )
    assert result.returncode == 0, result.stderr
    # The call waited for the work queued before it, and for its own.
    assert result.stdout.strip() == "True True 16.0"
