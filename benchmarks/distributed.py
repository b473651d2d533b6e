"""Family 9: torch.distributed on openreg (the orgloo backend) over Gloo on CPU tensors.

Two ranks (fresh processes on this machine, one group ``cpu:gloo,openreg:orgloo``)
run the same sequence: for each size an all_reduce batch on openreg tensors and one
on CPU tensors, interleaved; then a DDP training step of the same MLP on each
device. Rank 0 times; both must issue the same collectives, so batch sizes are
fixed in advance (no timing probe, which would differ between the ranks).

* all_reduce bus bandwidth (``2 (n-1)/n * bytes / time``), 64 KiB to 64 MiB:
  openreg over CPU, target at least 0.9x. An openreg batch ends with
  ``torch.openreg.synchronize()``; every call is a synchronous ``all_reduce``
  (the stream waits for it), so batches measure back-to-back collectives.
* DDP training step (zero_grad, forward, loss, backward with its bucketed
  all-reduces, SGD step; openreg synchronized at the end of each step):
  openreg over CPU, target at most 1.15x.
* The same openreg step under chaos scheduling (OPENREG_DEBUG=chaos, each rank
  its own seed) over the step without it: target at most 3x. The reducer waits
  for its all-reduces through their futures, a wait chaos scheduling must see,
  or each held piece of work waits out its cap (1 s).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.common import Figure, Settings, compare, ratio_figure  # noqa: E402

FAMILY = "9 distributed (2 ranks)"
WORLD = 2
SIZES = [64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20]
BANDWIDTH_RATIO_TARGET = 0.9
DDP_RATIO_TARGET = 1.15
CHAOS_RATIO_TARGET = 3.0
CHAOS_STEPS_PER_BATCH = 4
BYTES_PER_BATCH = 48 << 20  # at the default batch time; fixed so both ranks agree
DDP_STEPS_PER_BATCH = 10
WORLD_TIMEOUT = 900.0


def _label(size: int) -> str:
    return f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"


def _calls(size: int, settings: Settings) -> int:
    scale = settings.min_batch_seconds / 0.04
    return max(2, round(BYTES_PER_BATCH * scale / size))


def _bandwidth_figures(settings: Settings) -> list[Figure]:
    import torch
    import torch.distributed as dist

    figures = []
    bus_factor = 2 * (WORLD - 1) / WORLD
    for size in SIZES:
        device_tensor = torch.zeros(size // 4, device="openreg")
        cpu_tensor = torch.zeros(size // 4)
        pair = compare(
            lambda t=device_tensor: dist.all_reduce(t),
            lambda t=cpu_tensor: dist.all_reduce(t),
            torch.openreg.synchronize, settings, warmup=3, calls=_calls(size, settings),
        )  # fmt: skip
        openreg_bandwidth = bus_factor * size / pair.openreg_median
        cpu_bandwidth = bus_factor * size / pair.peer_median
        figures.append(
            Figure(
                family=FAMILY,
                name=f"all_reduce bus bandwidth, {_label(size)}",
                kind="ratio_min",
                value=1 / pair.paired_ratio,  # bandwidth ratio: CPU time / openreg time
                target=BANDWIDTH_RATIO_TARGET,
                openreg=openreg_bandwidth,
                peer=cpu_bandwidth,
                unit="B/s",
                raw={"bytes": size, "world_size": WORLD, **pair.raw()},
            )
        )
        if dist.get_rank() == 0:
            print(f"  distributed: all_reduce {_label(size)}: openreg "
                  f"{openreg_bandwidth / 2**30:.2f} GiB/s, CPU {cpu_bandwidth / 2**30:.2f} GiB/s",
                  flush=True)  # fmt: skip
    return figures


def _ddp_step(device: str) -> Callable[[], None]:
    """One DDP training step of the MLP on ``device`` (synchronized on openreg)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from benchmarks.training import _mlp

    model, make_optimizer, (inputs, targets), loss_fn = _mlp()
    torch.manual_seed(3)
    ddp = DistributedDataParallel(copy.deepcopy(model).to(device))
    optimizer = make_optimizer(ddp)
    x, y = inputs.to(device), targets.to(device)
    synchronize = torch.openreg.synchronize if device == "openreg" else None

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        optimizer.step()
        if synchronize is not None:
            synchronize()

    return step


def _ddp_figure(settings: Settings) -> Figure:
    import torch
    import torch.distributed as dist

    pair = compare(
        _ddp_step("openreg"), _ddp_step("cpu"), torch.openreg.synchronize, settings, warmup=3,
        calls=DDP_STEPS_PER_BATCH,
    )  # fmt: skip
    name = "DDP training step, MLP 256-512-512-10, batch 64 per rank"
    if dist.get_rank() == 0:
        print(f"  distributed: {name}: openreg {pair.openreg_median * 1e3:.2f} ms, "
              f"CPU {pair.peer_median * 1e3:.2f} ms", flush=True)  # fmt: skip
    return ratio_figure(FAMILY, name, pair, DDP_RATIO_TARGET, {"world_size": WORLD})


def _chaos_figure(settings: Settings) -> Figure:
    import torch
    import torch.distributed as dist

    debug = torch.openreg.debug
    plain = _ddp_step("openreg")

    def under_chaos() -> None:
        with debug.enabled("chaos"):
            plain()

    debug.enable("chaos")
    debug.set_chaos_seed(1 + dist.get_rank())
    debug.disable("chaos")
    pair = compare(under_chaos, plain, torch.openreg.synchronize, settings, warmup=2,
                   calls=CHAOS_STEPS_PER_BATCH)  # fmt: skip
    statistics = debug.chaos_statistics()
    name = "DDP training step under chaos scheduling over the same step without"
    if dist.get_rank() == 0:
        print(f"  distributed: {name}: {pair.openreg_median * 1e3:.2f} ms vs "
              f"{pair.peer_median * 1e3:.2f} ms ({statistics})", flush=True)  # fmt: skip
    return ratio_figure(FAMILY, name, pair, CHAOS_RATIO_TARGET,
                        {"world_size": WORLD, "chaos": statistics})  # fmt: skip


def worker(output: Path, settings: Settings) -> None:
    """One rank: measure (rank 0 writes the figures)."""
    import torch
    import torch.distributed as dist

    import torch_openreg  # noqa: F401

    rank = int(os.environ["RANK"])
    torch.openreg.set_device(rank % torch.openreg.device_count())
    store = dist.TCPStore(
        "127.0.0.1", int(os.environ["MASTER_PORT"]), WORLD, is_master=False,
        timeout=timedelta(seconds=WORLD_TIMEOUT),
    )  # fmt: skip
    dist.init_process_group(
        "cpu:gloo,openreg:orgloo", store=store, rank=rank, world_size=WORLD,
        timeout=timedelta(seconds=WORLD_TIMEOUT),
    )  # fmt: skip
    figures = [*_bandwidth_figures(settings), _ddp_figure(settings), _chaos_figure(settings)]
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        output.write_text(json.dumps([f.as_dict() for f in figures]))


def run(settings: Settings) -> list[Figure]:
    """Start the two ranks (this process serves their rendezvous store) and collect."""
    import torch.distributed as dist

    store = dist.TCPStore(
        "127.0.0.1", 0, WORLD, is_master=True, wait_for_workers=False,
        timeout=timedelta(seconds=WORLD_TIMEOUT),
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as directory:
        output = Path(directory) / "distributed.json"
        command = [
            sys.executable, __file__, "--worker", str(output), str(settings.repeats),
            str(settings.min_batch_seconds),
        ]  # fmt: skip
        ranks = []
        try:
            for rank in range(WORLD):
                env = os.environ | {"RANK": str(rank), "MASTER_PORT": str(store.port)}
                ranks.append(subprocess.Popen(command, env=env, start_new_session=True))
            deadline = time.monotonic() + WORLD_TIMEOUT
            while any(r.poll() is None for r in ranks) and time.monotonic() < deadline:
                if any(r.poll() not in (None, 0) for r in ranks):
                    break
                time.sleep(0.1)
        finally:
            for r in ranks:
                if r.poll() is None:
                    os.killpg(r.pid, signal.SIGKILL)
                r.wait()
        codes = [r.returncode for r in ranks]
        if codes != [0] * WORLD:
            raise RuntimeError(f"the distributed benchmark's ranks exited with {codes}")
        data = json.loads(output.read_text())
    return [Figure(**{k: v for k, v in f.items() if k != "status"}) for f in data]


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] != "--worker":
        sys.exit("internal: run by benchmarks/run.py --families distributed")
    worker(Path(sys.argv[2]), Settings(int(sys.argv[3]), float(sys.argv[4])))
