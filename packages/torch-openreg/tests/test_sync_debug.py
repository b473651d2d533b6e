"""torch.openreg.set_sync_debug_mode / get_sync_debug_mode against torch.cuda's rules.

CUDA warns ("warn") or raises ("error") on calls that make the host wait for
the device because the program asked for device data on the host: ``.item()``
and ``bool()``, blocking copies between host and device, operators whose
result size or value depends on tensor data (``nonzero``, boolean-mask
indexing, ``masked_select``, ``unique``, ``equal``) and ``Stream.synchronize()``.
It stays silent for asynchronous work, non-blocking copies, integer indexing,
``torch.cuda.synchronize()`` and ``Event.synchronize()``. The warning is a
Python warning attributed to the calling line.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator

import pytest
import torch

MESSAGE = "called a synchronizing openreg operation"


@pytest.fixture(autouse=True)
def _default_mode_afterwards() -> Iterator[None]:
    yield
    torch.openreg.set_sync_debug_mode(0)


def _device_tensor() -> torch.Tensor:
    return torch.arange(6, dtype=torch.float32).reshape(2, 3).to("openreg")


def _sync_warnings(call: Callable[[], object]) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if MESSAGE in str(w.message)]


def test_default_mode_is_zero():
    assert torch.openreg.get_sync_debug_mode() == 0


@pytest.mark.parametrize(
    ("value", "expected"), [("default", 0), ("warn", 1), ("error", 2), (0, 0), (1, 1), (2, 2)]
)
def test_modes_by_name_and_number(value: int | str, expected: int):
    torch.openreg.set_sync_debug_mode(value)
    assert torch.openreg.get_sync_debug_mode() == expected


@pytest.mark.parametrize("value", ["loud", 3, -1, 1.0, None])
def test_invalid_mode_raises_and_keeps_the_mode(value: object):
    torch.openreg.set_sync_debug_mode("warn")
    with pytest.raises(RuntimeError, match="debug_mode"):
        torch.openreg.set_sync_debug_mode(value)  # type: ignore[arg-type]
    assert torch.openreg.get_sync_debug_mode() == 1


SYNCHRONIZING: dict[str, Callable[[torch.Tensor], object]] = {
    "item": lambda x: x[0, 1].item(),
    "bool": lambda x: bool(x[0, 1]),
    "cpu": lambda x: x.cpu(),
    "to_cpu_blocking": lambda x: x.to("cpu", non_blocking=False),
    "copy_to_host": lambda x: torch.empty(2, 3).copy_(x),
    "copy_from_host": lambda x: x.copy_(torch.ones(2, 3)),
    "to_device_blocking": lambda x: torch.ones(4).to("openreg"),
    "tensor_factory_from_data": lambda x: torch.tensor([1.0, 2.0], device="openreg"),
    "nonzero": lambda x: torch.nonzero(x),
    "where_one_argument": lambda x: torch.where(x > 2),
    "masked_select": lambda x: torch.masked_select(x, x > 2),
    "boolean_mask_index": lambda x: x[x > 2],
    "boolean_mask_index_put": lambda x: x.index_put_((x > 2,), torch.zeros((), device=x.device)),
    "unique": lambda x: torch.unique(x),
    "equal": lambda x: torch.equal(x, x),
    "allclose": lambda x: torch.allclose(x, x),
    "stream_synchronize": lambda x: torch.openreg.current_stream().synchronize(),
}

NOT_SYNCHRONIZING: dict[str, Callable[[torch.Tensor], object]] = {
    "arithmetic": lambda x: (x * 2 + 1).sum(),
    "matmul": lambda x: x @ x.T,
    "integer_index": lambda x: x[torch.tensor([1, 0]).to("openreg", non_blocking=True)],
    "device_to_device": lambda x: x.clone().copy_(x),
    "to_cpu_non_blocking": lambda x: x.to("cpu", non_blocking=True),
    "from_pinned_non_blocking": lambda x: (
        torch.ones(4).pin_memory().to("openreg", non_blocking=True)
    ),
    "device_synchronize": lambda x: torch.openreg.synchronize(),
    "event_synchronize": lambda x: torch.openreg.current_stream().record_event().synchronize(),
    # Python turns `x[mask] = scalar` into masked_fill_, which needs no sizes.
    "boolean_mask_assign_scalar": lambda x: x.__setitem__(x > 2, 0.0),
    "views": lambda x: x.T.reshape(6)[1:4].unsqueeze(0),
}


@pytest.mark.parametrize("name", list(SYNCHRONIZING))
def test_warn_mode_warns_on_synchronizing_calls(name: str):
    x = _device_tensor()
    torch.openreg.synchronize()
    torch.openreg.set_sync_debug_mode("warn")
    # Twice: the first call of an operator signature runs differently (it plans).
    for _ in range(2):
        assert len(_sync_warnings(lambda: SYNCHRONIZING[name](x))) >= 1


@pytest.mark.parametrize("name", list(NOT_SYNCHRONIZING))
def test_warn_mode_is_silent_on_asynchronous_calls(name: str):
    x = _device_tensor()
    torch.openreg.synchronize()
    torch.openreg.set_sync_debug_mode("warn")
    for _ in range(2):
        assert _sync_warnings(lambda: NOT_SYNCHRONIZING[name](x)) == []


@pytest.mark.parametrize("name", list(SYNCHRONIZING))
def test_error_mode_raises_on_synchronizing_calls(name: str):
    x = _device_tensor()
    torch.openreg.synchronize()
    torch.openreg.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match=MESSAGE):
        SYNCHRONIZING[name](x)


@pytest.mark.parametrize("name", list(NOT_SYNCHRONIZING))
def test_error_mode_allows_asynchronous_calls(name: str):
    x = _device_tensor()
    torch.openreg.synchronize()
    torch.openreg.set_sync_debug_mode("error")
    NOT_SYNCHRONIZING[name](x)
    torch.openreg.set_sync_debug_mode("default")
    torch.openreg.synchronize()


def test_default_mode_is_silent():
    x = _device_tensor()
    for call in SYNCHRONIZING.values():
        assert _sync_warnings(lambda call=call: call(x)) == []


def test_warning_points_at_the_calling_line():
    x = _device_tensor()
    torch.openreg.set_sync_debug_mode("warn")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _current_line() + 1
        x.sum().item()
    ours = [w for w in caught if MESSAGE in str(w.message)]
    assert len(ours) == 1
    assert ours[0].filename == __file__
    assert ours[0].lineno == line
    assert "item" in str(ours[0].message)


def test_error_mode_raises_before_the_copy_happens():
    x = _device_tensor()
    destination = torch.full((2, 3), -1.0)
    torch.openreg.set_sync_debug_mode("error")
    with pytest.raises(RuntimeError, match=MESSAGE):
        destination.copy_(x)
    torch.openreg.set_sync_debug_mode("default")
    assert torch.equal(destination, torch.full((2, 3), -1.0))


def test_results_are_unchanged_in_warn_mode():
    x = _device_tensor()
    expected = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    torch.openreg.set_sync_debug_mode("warn")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(x[x > 2].cpu(), expected[expected > 2])
        assert torch.equal(torch.nonzero(x).cpu(), torch.nonzero(expected))
        assert x[1, 2].item() == 5.0


def test_mode_is_process_wide():
    import threading

    torch.openreg.set_sync_debug_mode("error")
    seen: list[int] = []
    thread = threading.Thread(target=lambda: seen.append(torch.openreg.get_sync_debug_mode()))
    thread.start()
    thread.join()
    assert seen == [2]


def _current_line() -> int:
    import inspect

    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


@pytest.mark.child_interpreters
def test_copy_fallback_mode_warns_only_for_the_call(run_python):
    # OPENREG_FALLBACK=copy runs every operator through host copies; those are
    # its implementation and must not warn, the data-dependent call must.
    result = run_python(
        """
        import warnings, torch, torch_openreg
        x = torch.arange(6.0).to("openreg")
        torch.openreg.synchronize()
        torch.openreg.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            y = x * 2 + 1
            z = torch.nonzero(y > 4)
        torch.openreg.set_sync_debug_mode("default")
        print([str(w.message).split("operation: ")[1].split(" ")[0]
               for w in caught if "synchronizing openreg" in str(w.message)])
        print(z.cpu().flatten().tolist())
        """,
        OPENREG_FALLBACK="copy",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-2] == "['aten::nonzero']"
    assert lines[-1] == [2, 3, 4, 5].__repr__()
