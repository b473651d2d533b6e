"""Data-parallel training on openreg with torch.distributed (DDP over Gloo).

Launch with torchrun; every process trains the same model on its slice of each
global batch, and DistributedDataParallel averages the gradients with the
``orgloo`` backend (Gloo over openreg device memory). On one machine:

    uv run torchrun --standalone --nproc-per-node 2 examples/ddp_train.py --check

Across machines, the same command on each with the first machine's address
(``GLOO_SOCKET_IFNAME`` names the interface the machines reach each other on):

    GLOO_SOCKET_IFNAME=eth0 uv run torchrun --nnodes 2 --node-rank 0 --nproc-per-node 1 \\
        --master-addr 10.0.0.1 --master-port 29500 examples/ddp_train.py

``--check`` also trains the model in this process on the CPU with the whole
global batch and requires the same weights. A failure (a peer gone, the network
down) ends the run with an error naming this rank within ``--timeout`` seconds.
"""

from __future__ import annotations

import argparse
import os
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import torch_openreg  # noqa: F401  (registers openreg and orgloo; implied by the autoload shim)

BATCH_PER_RANK = 16


def make_model() -> torch.nn.Module:
    torch.manual_seed(0)  # the same initial weights everywhere
    return torch.nn.Sequential(
        torch.nn.Linear(32, 128), torch.nn.ReLU(), torch.nn.Linear(128, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 8),
    )  # fmt: skip


def global_batch(step: int, world_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Step ``step``'s whole batch: identical on every rank (CPU)."""
    generator = torch.Generator().manual_seed(step)
    inputs = torch.randn(BATCH_PER_RANK * world_size, 32, generator=generator)
    return inputs, inputs[:, :8].sin() + 0.1 * inputs[:, 8:16]


def train(model: torch.nn.Module, steps: int, device: torch.device, rank: int, world: int,
          shard: bool, report_every: int) -> float:  # fmt: skip
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss = torch.zeros(())
    for step in range(steps):
        inputs, targets = global_batch(step, world)
        if shard:
            inputs, targets = inputs.chunk(world)[rank], targets.chunk(world)[rank]
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
        loss.backward()
        optimizer.step()
        if shard and report_every and (step + 1) % report_every == 0:
            print(f"rank {rank}: step {step + 1} loss {loss.item():.5f}", flush=True)
    return loss.item()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--timeout", type=float, default=60, help="collective timeout, seconds")
    parser.add_argument("--report-every", type=int, default=5, help="print the loss every N steps")
    parser.add_argument("--check", action="store_true", help="compare with one CPU process")
    args = parser.parse_args()

    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("openreg", local_rank)
    # device_id picks the default backend of the openreg device (orgloo) and binds the group to it.
    dist.init_process_group(device_id=device, timeout=timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = DistributedDataParallel(make_model().to(device))
    try:
        loss = train(model, args.steps, device, rank, world, True, args.report_every)
    except RuntimeError as error:
        print(f"rank {rank}: training failed: {error}", flush=True)
        raise SystemExit(1) from None
    print(f"rank {rank} of {world}: {args.steps} steps on {device}, last loss {loss:.5f}")

    if args.check:
        reference = make_model()
        train(reference, args.steps, torch.device("cpu"), rank, world, False, 0)
        for name, expected in reference.named_parameters():
            actual = model.module.get_parameter(name).cpu()
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6, msg=name)
        print(f"rank {rank}: weights match single-process CPU training on the global batch")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
