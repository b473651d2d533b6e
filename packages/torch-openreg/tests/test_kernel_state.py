"""The thread state openreg kernels run in.

A kernel is an operator that PyTorch has already dispatched past autograd, Python modes
and autocast; the operators it calls internally run on CPU aliases of device memory, and
the caller's modes must not apply to them a second time. Only inference mode reaches the
kernel: tensors a synchronous kernel creates are the caller's results.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import torch_openreg  # noqa: F401  (registers the device)


def conv_inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(2, 3, 8, 8, generator=g), torch.randn(4, 3, 3, 3, generator=g)


def test_cpu_autocast_does_not_apply_inside_openreg_kernels():
    x, w = conv_inputs(0)
    xd, wd = x.to("openreg"), w.to("openreg")
    expected = F.conv2d(x, w)
    for _ in range(3):  # the first (synchronous) call and the planned ones
        with torch.autocast("cpu", dtype=torch.bfloat16):
            result = F.conv2d(xd, wd)
        assert result.dtype == torch.float32
        torch.testing.assert_close(result.cpu(), expected)


class RecordOps(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[str, str]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        devices = {a.device.type for a in args if isinstance(a, torch.Tensor)}
        self.seen.append((str(func), ",".join(sorted(devices))))
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_callers_operators_only():
    x, w = conv_inputs(1)
    xd, wd = x.to("openreg"), w.to("openreg")
    for _ in range(3):
        with RecordOps() as mode:
            result = F.conv2d(xd, wd)
        torch.openreg.synchronize()
        # Only openreg operators of the caller: nothing the kernel ran on CPU aliases.
        assert mode.seen, "the mode saw no operator at all"
        assert all(devices == "openreg" for _, devices in mode.seen), mode.seen
    torch.testing.assert_close(result.cpu(), F.conv2d(x, w))


def test_no_grad_and_grad_mode_give_the_same_values():
    x = torch.randn(5, 4, requires_grad=True)
    xd = x.detach().to("openreg").requires_grad_()
    with torch.no_grad():
        inside = (xd * 2).sin()
    outside = (xd * 2).sin()
    assert not inside.requires_grad and outside.requires_grad
    torch.testing.assert_close(inside.cpu(), outside.detach().cpu())
    torch.testing.assert_close(outside.detach().cpu(), (x * 2).sin().detach())


def test_inference_mode_results_are_inference_tensors_on_both_paths():
    x = torch.randn(6, device="openreg")
    with torch.inference_mode():
        first = torch.special.erfcx(x)  # a new signature: runs synchronously
        second = torch.special.erfcx(x)  # planned: outputs made on the host
    assert first.is_inference() and second.is_inference()
    torch.testing.assert_close(first.cpu(), torch.special.erfcx(x.cpu()))


@pytest.mark.child_interpreters
def test_cpu_only_work_leaves_the_cpu_allocator_alone(run_python):
    # With the autoload shim every process loads the binding: CPU-only work must not pay
    # for it. The allocator that serves kernels is installed at the first openreg launch.
    result = run_python(
        """
        import torch, torch_openreg
        from torch_openreg import _C
        print(_C._kernel_allocator_installed())
        model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(),
                                    torch.nn.LazyLinear(2))
        model(torch.randn(2, 3, 8, 8)).sum().backward()
        print(_C._kernel_allocator_installed())
        torch.ones(2, device="openreg").add(1).cpu()
        print(_C._kernel_allocator_installed())
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False", "True"]
