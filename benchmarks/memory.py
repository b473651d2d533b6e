"""Families 4 and 5: the cached allocation round trip, and host/device copy bandwidth.

4. ``torch.empty`` + ``del`` on openreg (the caching allocator hands the same block back)
   against the same on the CPU (c10's CPU allocator, i.e. malloc/free).
5. One 64 MiB copy host→device and device→host (from/to pageable and pinned memory,
   waiting for it to finish) against a host memcpy of the same size (``copy_`` between
   two pageable CPU tensors), as bandwidth ratios.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from benchmarks.common import Figure, Settings, compare, ratio_figure

ALLOCATION_RATIO_TARGET = 2.0
BANDWIDTH_RATIO_TARGET = 0.8
ALLOCATION_SIZES = (4 << 10, 1 << 20)  # bytes
COPY_BYTES = 64 << 20


def _round_trip(nbytes: int, device: str) -> Callable[[], None]:
    def round_trip() -> None:
        tensor = torch.empty(nbytes, dtype=torch.uint8, device=device)
        del tensor

    return round_trip


def run_allocation(settings: Settings) -> list[Figure]:
    figures: list[Figure] = []
    for nbytes in ALLOCATION_SIZES:
        pair = compare(
            _round_trip(nbytes, "openreg"), _round_trip(nbytes, "cpu"), None, settings, warmup=50
        )
        label = f"torch.empty({nbytes >> 10} KiB) + del"
        figures.append(
            ratio_figure(
                "4 allocation round trip", label, pair, ALLOCATION_RATIO_TARGET, {"bytes": nbytes}
            )
        )
        print(f"  allocation: {label}: openreg {pair.openreg_median * 1e6:.2f} µs, "
              f"cpu {pair.peer_median * 1e6:.2f} µs", flush=True)  # fmt: skip
    return figures


def run_copies(settings: Settings) -> list[Figure]:
    n = COPY_BYTES
    g = torch.Generator().manual_seed(0)
    source = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g)
    pageable = source.clone()
    pinned = source.pin_memory()
    host_destination = torch.empty(n, dtype=torch.uint8)
    pinned_destination = torch.empty(n, dtype=torch.uint8).pin_memory()
    device_buffer = source.to("openreg")
    device_destination = torch.empty(n, dtype=torch.uint8, device="openreg")
    sync = torch.openreg.synchronize

    def memcpy() -> None:
        host_destination.copy_(pageable)

    copies: dict[str, Callable[[], object]] = {
        "host->device, pageable": lambda: device_destination.copy_(pageable),
        "host->device, pinned": lambda: device_destination.copy_(pinned, non_blocking=True),
        "device->host, pageable": lambda: host_destination.copy_(device_buffer),
        "device->host, pinned": lambda: pinned_destination.copy_(device_buffer, non_blocking=True),
    }
    figures: list[Figure] = []
    for label, copy in copies.items():

        def timed(copy: Callable[[], object] = copy) -> None:
            copy()
            sync()  # one copy, complete: bandwidth of a single transfer

        # One 64 MiB copy is a few ms: three times the repeats cost little and steady it.
        more = Settings(settings.repeats * 3, settings.min_batch_seconds)
        pair = compare(timed, memcpy, sync, more, warmup=2, calls=1)
        openreg_bandwidth = n / pair.openreg_median
        memcpy_bandwidth = n / pair.peer_median
        figures.append(
            Figure(
                family="5 copy bandwidth (64 MiB)",
                name=label,
                kind="ratio_min",
                value=1 / pair.paired_ratio,  # bandwidth ratio: memcpy time / openreg time
                target=BANDWIDTH_RATIO_TARGET,
                openreg=openreg_bandwidth,
                peer=memcpy_bandwidth,
                unit="B/s",
                raw={"bytes": n, **pair.raw()},
            )
        )
        print(f"  copies: {label}: openreg {openreg_bandwidth / 2**30:.2f} GiB/s, "
              f"memcpy {memcpy_bandwidth / 2**30:.2f} GiB/s", flush=True)  # fmt: skip
    # The copies really moved the data.
    torch.testing.assert_close(device_destination.cpu(), source, rtol=0, atol=0)
    torch.testing.assert_close(pinned_destination, source, rtol=0, atol=0)
    return figures
