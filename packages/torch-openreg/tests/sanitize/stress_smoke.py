"""Stress smoke test of the binding, run under AddressSanitizer by ``nox -s sanitize``.

Not a pytest module (the binding suite does not collect it): a script that drives
the paths where memory is shared between the host and stream work — the caching
allocator (churn, ``empty_cache``, ``record_stream``, out-of-memory retry),
asynchronous pinned copies, copies across devices, several streams and host threads,
storage resizing, a small training loop — and checks every result against the CPU.
It exits non-zero on a wrong result; the sanitizers abort it on a memory error.

    python packages/torch-openreg/tests/sanitize/stress_smoke.py [--rounds N]
"""

from __future__ import annotations

import argparse
import threading

import torch

import torch_openreg  # noqa: F401

torch.manual_seed(0)


def check(condition: bool, what: str) -> None:
    if not condition:
        raise SystemExit(f"stress smoke: {what}")


def same(device_tensor: torch.Tensor, cpu_tensor: torch.Tensor, what: str) -> None:
    check(torch.allclose(device_tensor.cpu(), cpu_tensor, atol=1e-4, rtol=1e-4), what)


def allocator_churn(device: int) -> None:
    sizes = [1, 511, 512, 4096, 1 << 20, (1 << 20) + 1, 3 << 20, 12 << 20]
    live = []
    for index in range(200):
        size = sizes[index % len(sizes)]
        live.append(torch.full((size,), index % 7, dtype=torch.uint8, device=f"openreg:{device}"))
        if index % 3 == 0:
            live.pop(0)
        if index % 50 == 49:
            torch.openreg.empty_cache()
    total = sum(int(t.sum().item()) for t in live)
    expected = sum((t.numel() * int(t[0].item())) for t in live)
    check(total == expected, "allocator churn lost data")


def streams_and_record_stream() -> None:
    side = torch.openreg.Stream()
    a_cpu = torch.randn(256, 256)
    a = a_cpu.to("openreg")
    with torch.openreg.stream(side):
        side.wait_stream(torch.openreg.current_stream())
        b = a @ a
        a.record_stream(side)
    del a  # freed by the host while the side stream may still read it
    torch.openreg.current_stream().wait_stream(side)
    same(b, a_cpu @ a_cpu, "matmul on a side stream")


def pinned_and_cross_device() -> None:
    host = torch.randn(1 << 16).pin_memory()
    on_zero = host.to("openreg:0", non_blocking=True)
    on_one = on_zero.to("openreg:1")
    back = torch.empty_like(host).pin_memory()
    back.copy_(on_one * 2, non_blocking=True)
    del on_zero, on_one  # dropped before the copies have run
    torch.openreg.synchronize(0)
    torch.openreg.synchronize(1)
    check(torch.equal(back, host * 2), "pinned copies across devices")


def storage_resize() -> None:
    t = torch.arange(64, dtype=torch.float32, device="openreg")
    t.untyped_storage().resize_(64 * 4 * 3)
    check(t.cpu().tolist() == list(range(64)), "storage resize kept the bytes")


def training() -> None:
    def make() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))

    model_cpu, model = make(), make()
    model.load_state_dict(model_cpu.state_dict())
    model = model.to("openreg")
    optimizers = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (model_cpu, model)]
    data, target = torch.randn(128, 32), torch.randn(128, 4)
    for _ in range(10):
        pairs = ((model_cpu, optimizers[0], "cpu"), (model, optimizers[1], "openreg"))
        for net, optimizer, device in pairs:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(net(data.to(device)), target.to(device))
            loss.backward()
            optimizer.step()
    for cpu_parameter, parameter in zip(model_cpu.parameters(), model.parameters(), strict=True):
        same(parameter, cpu_parameter.detach(), "training matches the CPU")


def host_threads() -> None:
    failures = []

    def work(device: int) -> None:
        try:
            torch.openreg.set_device(device)
            for _ in range(20):
                x_cpu = torch.randn(128, 128)
                x = x_cpu.to("openreg")
                same((x.relu() + 1).sum(dim=0), (x_cpu.relu() + 1).sum(dim=0), "threaded ops")
        except BaseException as error:  # reported by the main thread
            failures.append(error)

    threads = [threading.Thread(target=work, args=(i % 2,)) for i in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    check(not failures, f"host threads failed: {failures}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    baseline = [torch.openreg.memory_allocated(d) for d in range(2)]
    for round_number in range(rounds):
        for device in range(2):
            allocator_churn(device)
        streams_and_record_stream()
        pinned_and_cross_device()
        storage_resize()
        training()
        host_threads()
        print(f"round {round_number + 1}/{rounds} ok", flush=True)
    for device in range(2):
        torch.openreg.synchronize(device)
    torch.openreg.empty_cache()
    check(
        [torch.openreg.memory_allocated(d) for d in range(2)] == baseline,
        "device memory is allocated after every tensor was dropped",
    )
    print("stress smoke test passed")


if __name__ == "__main__":
    main()
