"""Code run in spawned peer processes by test_ipc.py.

``serve`` is a peer's main loop: the test sends ``(name, args)`` over a
``multiprocessing`` connection, the peer runs the function of that name here
with its ``state`` (a dict that keeps what it received between calls) and sends
back ``("ok", result)`` or ``("error", message)``. Tensors travel both ways
through torch.multiprocessing's reducers, i.e. the openreg sharing under test.
Every wait has a deadline, so a lost message fails a test instead of hanging it.
"""

from __future__ import annotations

import gc
import os
from multiprocessing.connection import Connection
from typing import Any

import torch

import torch_openreg  # noqa: F401  (registers openreg before anything arrives)

DEADLINE = 120.0
State = dict[str, Any]


def serve(connection: Connection) -> None:
    state: State = {}
    while connection.poll(DEADLINE):
        try:
            name, args = connection.recv()
        except EOFError:
            return
        except Exception as error:  # what arrived could not be rebuilt here
            connection.send(("error", f"{type(error).__name__}: {error}"))
            continue
        if name == "exit":
            return
        try:
            result = globals()[name](state, *args)
        except Exception as error:
            connection.send(("error", f"{type(error).__name__}: {error}"))
        else:
            connection.send(("ok", result))


# Tensors of every layout the tests send, made the same way in either process.
LAYOUTS = {
    "contiguous": lambda: torch.arange(12.0, device="openreg"),
    "strided": lambda: torch.arange(24.0, device="openreg").view(4, 6)[:, ::2],
    "offset": lambda: torch.arange(12.0, device="openreg")[5:9],
    "transposed": lambda: torch.arange(12, device="openreg").view(3, 4).t(),
    "half": lambda: torch.linspace(-1, 1, 7, device="openreg").half(),
    "zero-size": lambda: torch.empty(0, 3, device="openreg"),
}


# ---- Calls ----------------------------------------------------------------------------


def pid(state: State) -> int:
    return os.getpid()


def keep(state: State, name: str, obj: Any) -> None:
    state[name] = obj


def describe(state: State, name: str) -> dict[str, Any]:
    """What arrived: its values (as a CPU copy) and how it is laid out."""
    tensor = state[name]
    return {
        "type": type(tensor).__name__,
        "device": str(tensor.device),
        "values": tensor.detach().cpu(),
        "size": tuple(tensor.size()),
        "stride": tensor.stride(),
        "offset": tensor.storage_offset(),
        "dtype": tensor.dtype,
        "requires_grad": tensor.requires_grad,
        "storage": tensor.untyped_storage().data_ptr(),
    }


def echo(state: State, name: str) -> Any:
    return state[name]


def make(state: State, layout: str) -> torch.Tensor:
    """A new openreg tensor of a LAYOUTS layout, sent to the test."""
    return LAYOUTS[layout]()


def same_storage(state: State, first: str, second: str) -> bool:
    return bool(
        state[first].untyped_storage().data_ptr() == state[second].untyped_storage().data_ptr()
    )


def warm_copy(state: State, shape: tuple[int, ...], dtype: torch.dtype) -> None:
    """Copy once a tensor like the ones to come, so that later copies are asynchronous."""
    source = torch.zeros(shape, dtype=dtype, device="openreg")
    torch.empty_like(source).copy_(source)
    torch.openreg.synchronize()


def add_(state: State, name: str, value: float) -> None:
    state[name].add_(value)
    torch.openreg.synchronize()


def drop(state: State, *names: str) -> None:
    """Let go of what was received (the mapping closes once queued work is done)."""
    for name in names:
        state.pop(name, None)
    gc.collect()
    torch.openreg.synchronize()


def memory_allocated(state: State) -> int:
    return torch.openreg.memory_allocated()


def ipc_collect(state: State) -> int:
    torch.openreg.ipc_collect()
    return torch.openreg.memory_allocated()


def receive_and_sum(state: State, tensor: torch.Tensor) -> float:
    """The 100-rounds case: read what arrived and let it go at once."""
    return float(tensor.sum().item())


def copy_behind_wait(state: State, name: str) -> bool:
    """Queue a copy of the tensor (ordered after the sender's pending writes) and say
    whether the current stream is idle — it must not be while the sender is held.
    (warm_copy first: a first copy of its kind runs synchronously.)"""
    source = state[name]
    state["copy"] = torch.empty_like(source).copy_(source)
    return torch.openreg.current_stream().query()


def wait_event_then_copy(state: State, event: torch.openreg.Event, name: str) -> bool:
    """The current stream waits for another process's event, then copies ``name``."""
    source = state[name]
    torch.openreg.current_stream().wait_event(event)
    state["copy"] = torch.empty_like(source).copy_(source)
    return torch.openreg.current_stream().query()


def sgd_step(state: State, inputs: torch.Tensor, targets: torch.Tensor) -> None:
    """One SGD step of the shared model (state["model"]) on this batch, in place."""
    model = state["model"]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = torch.nn.functional.mse_loss(model(inputs.to("openreg")), targets.to("openreg"))
    loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    torch.openreg.synchronize()


def race_on(state: State, name: str, fixed: bool) -> str:
    """With race detection on here: a write of the received tensor on the current stream,
    then a read on a side stream that (unless ``fixed``) does not wait for it. Returns the
    race report raised, or ''."""
    tensor = state[name]
    side = torch.openreg.Stream()
    for _ in range(2):  # warm: first calls of a signature run synchronously
        tensor.fill_(2.0)
        # Ordered: the environment may have race detection on already (nox -s checked).
        side.wait_stream(torch.openreg.current_stream())
        with torch.openreg.stream(side):
            tensor * 2
        torch.openreg.current_stream().wait_stream(side)
    torch.openreg.synchronize()
    with torch.openreg.debug.enabled("races", races="error"):
        try:
            tensor.fill_(3.0)
            if fixed:
                side.wait_stream(torch.openreg.current_stream())
            with torch.openreg.stream(side):
                tensor * 2
        except RuntimeError as error:
            return str(error)
        finally:
            torch.openreg.synchronize()
    return ""


# ---- Targets of their own processes ---------------------------------------------------


def send_and_exit(connection: Connection, values: list[float]) -> None:
    """Sends an openreg tensor and exits at once, while the receiver still holds it."""
    connection.send(torch.tensor(values, device="openreg"))
    connection.recv()  # the test answers once it has the tensor


def send_behind_hold_and_die(connection: Connection) -> None:
    """Queues a write of a tensor behind a stream hold, sends the tensor (the receiver's
    stream then waits for that write) and, when told to, exits with the write still held."""
    from torch_openreg import _C

    tensor = torch.zeros(16, device="openreg")
    tensor.fill_(1.0)  # warm: a first call of a signature runs synchronously
    torch.openreg.synchronize()
    stream = torch.openreg.current_stream()
    _hold = _C._StreamHold(stream.stream_id, stream.device_index, DEADLINE)
    tensor.fill_(5.0)  # queued behind the hold
    connection.send(tensor)
    if connection.poll(DEADLINE):
        connection.recv()
    os._exit(3)


class DeviceDataset(torch.utils.data.Dataset[torch.Tensor]):
    """Items made on the device in the worker process."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, index: int) -> torch.Tensor:
        return torch.full((3,), float(index), device="openreg")
