"""Quick start: train a small model on the simulated ``openreg`` device.

Run from the repository root: ``uv run examples/quickstart.py``. Only ``torch`` is
imported: the openreg-autoload shim (installed in the workspace environment)
registers the device during ``import torch``. The same training then runs on
the CPU, and the two loss curves must match.
"""

from __future__ import annotations

import sys

import torch

STEPS = 8
SEED = 0


def train(device: str) -> list[float]:
    """Fit y = sin(x0) + x1 * x2 with a 2-layer MLP and SGD; returns the loss per step."""
    torch.manual_seed(SEED)  # same data and same initial weights on every device
    inputs = torch.randn(256, 3)
    targets = (torch.sin(inputs[:, 0]) + inputs[:, 1] * inputs[:, 2]).unsqueeze(1)
    model = torch.nn.Sequential(torch.nn.Linear(3, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model.to(device)
    inputs, targets = inputs.to(device), targets.to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    losses = []
    for step in range(STEPS):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())  # .item() copies the scalar back to the host
        print(f"  [{device}] step {step}: loss {losses[-1]:.6f}")
    if device == "openreg":
        free, total = torch.openreg.mem_get_info()
        print(
            f"  device memory while the model is alive: {torch.openreg.memory_allocated()} bytes "
            f"allocated by tensors, {free / 2**30:.2f} GiB free of {total / 2**30:.2f} GiB"
        )
    return losses


def main() -> int:
    if not hasattr(torch, "openreg"):
        print(
            "the openreg device is not registered: run this in the workspace environment "
            "(`uv run examples/quickstart.py`, which installs openreg-autoload) and check that "
            "OPENREG_AUTOLOAD / TORCH_DEVICE_BACKEND_AUTOLOAD are not set to 0",
            file=sys.stderr,
        )
        return 1
    print(f"torch {torch.__version__}: {torch.openreg.device_count()} openreg device(s)")

    print("training on openreg:")
    on_device = train("openreg")
    print("training on cpu:")
    on_cpu = train("cpu")

    print("step  openreg     cpu         |difference|")
    for step, (a, b) in enumerate(zip(on_device, on_cpu, strict=True)):
        print(f"{step:4}  {a:.6f}  {b:.6f}  {abs(a - b):.1e}")
    matches = torch.allclose(torch.tensor(on_device), torch.tensor(on_cpu), rtol=1e-5, atol=1e-6)
    print(f"after training: {torch.openreg.memory_allocated()} bytes allocated on openreg")
    print("openreg matches cpu" if matches else "MISMATCH between openreg and cpu")
    return 0 if matches else 1


if __name__ == "__main__":
    sys.exit(main())
