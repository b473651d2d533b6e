"""Family 14: sending a tensor to another process (torch.multiprocessing), zero copy.

One spawned receiver. A round: this process sends a tensor over a
``multiprocessing`` pipe (torch's reducers: the storage travels as a file
descriptor), the receiver reads one element and answers with it (then lets the
tensor go, outside the round). openreg tensors (device memory shared through the runtime's IPC
handles, docs/ipc.md) are timed against CPU tensors with torch.multiprocessing's
default sharing strategy (``file_descriptor``; the tensor is moved to shared
memory once, before timing, as a reused CPU tensor would be), in interleaved
batches. Neither side copies the bytes, so the time should not depend on the
size: the second figure is the 256 MiB round over the 1 MiB round, both openreg.
"""

from __future__ import annotations

import gc
import multiprocessing
import time
from multiprocessing.connection import Connection

import torch

from benchmarks.common import MIN_BATCH_SECONDS, Figure, Pair, Settings, ratio_figure

FAMILY = "14 processes"
SEND_RATIO_TARGET = 1.2  # openreg / CPU, 64 MiB
SIZE_RATIO_TARGET = 1.2  # openreg 256 MiB / 1 MiB
MIB = 1 << 20
DEADLINE = 120.0
ROUNDS_PER_BATCH = 40  # a round takes 0.3-1 ms here: batches of 10-40 ms


def _receiver(connection: Connection) -> None:
    import torch_openreg  # noqa: F401  (registers openreg before the first tensor arrives)

    while connection.poll(DEADLINE):
        tensor = connection.recv()
        if tensor is None:
            return
        connection.send(tensor[0].item())
        del tensor  # after answering: letting go is not part of the round


def _round(connection: Connection, tensor: torch.Tensor) -> None:
    connection.send(tensor)
    if not connection.poll(DEADLINE):
        raise TimeoutError("the receiver did not answer")
    connection.recv()


def _batch(connection: Connection, tensor: torch.Tensor, calls: int) -> float:
    _round(connection, tensor)  # untimed: the first round after a switch of tensors
    start = time.perf_counter()
    for _ in range(calls):
        _round(connection, tensor)
    return (time.perf_counter() - start) / calls


def _interleaved(
    connection: Connection,
    first: torch.Tensor,
    second: torch.Tensor,
    settings: Settings,
) -> Pair:
    for _ in range(5):  # warm-up: imports, the resource sharer, first mappings
        _round(connection, first)
        _round(connection, second)
    calls = max(1, round(settings.min_batch_seconds / MIN_BATCH_SECONDS * ROUNDS_PER_BATCH))
    firsts: list[float] = []
    seconds: list[float] = []
    for repeat in range(settings.repeats):
        gc.collect()
        gc.disable()
        try:
            if repeat % 2 == 0:
                firsts.append(_batch(connection, first, calls))
                seconds.append(_batch(connection, second, calls))
            else:
                seconds.append(_batch(connection, second, calls))
                firsts.append(_batch(connection, first, calls))
        finally:
            gc.enable()
    return Pair(firsts, seconds, calls)


def _device_tensor(bytes_: int) -> torch.Tensor:
    tensor = torch.ones(bytes_ // 4, device="openreg")
    torch.openreg.synchronize()
    return tensor


def run(settings: Settings) -> list[Figure]:
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    process = context.Process(target=_receiver, args=(there,), daemon=True)
    process.start()
    there.close()
    try:
        device_64 = _device_tensor(64 * MIB)
        cpu_64 = torch.ones(64 * MIB // 4).share_memory_()
        send = _interleaved(here, device_64, cpu_64, settings)
        del device_64
        device_256, device_1 = _device_tensor(256 * MIB), _device_tensor(MIB)
        sizes = _interleaved(here, device_256, device_1, settings)
        here.send(None)
    finally:
        process.join(DEADLINE)
        if process.is_alive():
            process.kill()
    send_figure = ratio_figure(
        FAMILY,
        "send a 64 MiB tensor to a process, read 1 element there: openreg / CPU",
        send,
        SEND_RATIO_TARGET,
        {"bytes": 64 * MIB, "peer": "CPU tensor, file_descriptor sharing"},
    )
    send_figure.note = "one round: Connection.send, the receiver's item(), its answer"
    size_figure = ratio_figure(
        FAMILY,
        "same round, openreg 256 MiB / 1 MiB",
        sizes,
        SIZE_RATIO_TARGET,
        {"bytes": [256 * MIB, MIB]},
    )
    size_figure.note = "openreg on both sides: the peer is the 1 MiB round"
    print(
        f"  processes: 64 MiB round openreg {send.openreg_median * 1e3:.3f} ms, CPU "
        f"{send.peer_median * 1e3:.3f} ms (median paired ratio {send.paired_ratio:.3f}); "
        f"openreg 256 MiB {sizes.openreg_median * 1e3:.3f} ms, 1 MiB "
        f"{sizes.peer_median * 1e3:.3f} ms (median paired ratio {sizes.paired_ratio:.3f})"
    )
    return [send_figure, size_figure]
