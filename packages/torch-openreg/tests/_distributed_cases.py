"""Rank-side code of the distributed tests: ``python _distributed_cases.py CASE [ARGS]``.

Run by ``_distributed.run_world`` once per rank (RANK, WORLD_SIZE, MASTER_ADDR
and MASTER_PORT in the environment; the store is served by the test process).
A case prints ``OK`` when every check passed; any failure raises, so the rank
exits non-zero with a traceback. Checks are differential wherever they can
be: the same collective on CPU tensors (Gloo as it is) and on openreg tensors
(the orgloo backend) must give identical results. CASE_TRACE=1 prints the name
of each differential check as it starts (to locate a hang).
"""

from __future__ import annotations

import gc
import os
import sys
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch._dynamo  # before any group exists: see check_no_gloo_worker_left
import torch.distributed as dist
from _async import held_stream

import torch_openreg  # noqa: F401

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
DEVICE = torch.device("openreg", RANK % torch.openreg.device_count())
Reduce = dist.ReduceOp


def connect_store(timeout: float = 60) -> dist.Store:
    return dist.TCPStore(
        os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), WORLD, is_master=False,
        timeout=timedelta(seconds=timeout),
    )  # fmt: skip


def init(backend: str | None = "cpu:gloo,openreg:orgloo", timeout: float = 60, **kwargs) -> None:
    torch.openreg.set_device(DEVICE)
    dist.init_process_group(
        backend, store=connect_store(), rank=RANK, world_size=WORLD,
        timeout=timedelta(seconds=timeout), **kwargs,
    )  # fmt: skip


def gloo_worker_threads() -> int:
    """How many of this process's threads are Gloo workers (torch names them)."""
    count = 0
    for task in Path("/proc/self/task").iterdir():
        try:
            count += (task / "comm").read_text().strip() == "pt_gloo_runloop"
        except OSError:
            pass  # the thread ended meanwhile
    return count


def check_no_gloo_worker_left() -> None:
    """After a case: its groups are freed, so no Gloo worker thread outlives it.

    A Gloo worker still running while Python exits can abort the rank (stock Gloo
    drops a finished collective's CPU tensors at any time; a thread that asks for
    the GIL then is ended by Python, through C++ frames that cannot unwind). So
    every case's groups must be freed by destroy_process_group() and the case's
    own objects (DDP models, device meshes) going away. torch._dynamo is imported
    above, before any group exists: it imports torch.distributed.fsdp, which
    (torch 2.15) keeps references to the default group if one exists at that
    moment — references destroy_process_group cannot drop; without the early
    import the first openreg operator after init_process_group would import it.
    """
    gc.collect()  # the case's objects, cycles included
    left = gloo_worker_threads()
    assert left == 0, f"{left} Gloo worker threads outlived the case's process groups"


def same(cpu: torch.Tensor, device: torch.Tensor, what: str) -> None:
    assert device.device.type == "openreg", f"{what}: result on {device.device}"
    device = device.cpu()
    assert cpu.dtype == device.dtype and cpu.shape == device.shape, (what, cpu, device)
    assert torch.equal(cpu, device), f"{what}: CPU {cpu} != openreg {device}"


def rank_data(shape: tuple[int, ...], dtype: torch.dtype, rank: int = RANK) -> torch.Tensor:
    """Distinct, exactly representable data per rank (small values: PRODUCT stays exact)."""
    n = 1
    for size in shape:
        n *= size
    values = (torch.arange(n, dtype=torch.int64) * (rank + 3) + rank) % 7 + 1
    return values.reshape(shape).to(dtype)


def differential(what: str, run: Callable[[torch.device], list[torch.Tensor]]) -> None:
    if os.environ.get("CASE_TRACE"):
        print("check:", what, flush=True)
    cpu = run(torch.device("cpu"))
    if os.environ.get("CASE_TRACE"):
        print("  cpu done", flush=True)
    device = run(DEVICE)
    assert len(cpu) == len(device), what
    for index, (c, d) in enumerate(zip(cpu, device, strict=True)):
        same(c, d, f"{what} [{index}]")


# ---- cases ------------------------------------------------------------------------------


def case_collectives() -> None:
    """Every collective DDP, FSDP2 and DTensor use, CPU (Gloo) vs openreg (orgloo)."""
    init()
    float_ops = [Reduce.SUM, Reduce.PRODUCT, Reduce.MIN, Reduce.MAX, Reduce.AVG]
    int_ops = [Reduce.SUM, Reduce.PRODUCT, Reduce.MIN, Reduce.MAX, Reduce.BAND, Reduce.BOR,
               Reduce.BXOR]  # fmt: skip
    cases = [(torch.float32, float_ops), (torch.float64, float_ops), (torch.int64, int_ops),
             (torch.int32, int_ops), (torch.uint8, int_ops)]  # fmt: skip
    for dtype, ops in cases:
        for op in ops:

            def all_reduce(device: torch.device, dtype=dtype, op=op) -> list[torch.Tensor]:
                t = rank_data((5, 33), dtype).to(device)
                dist.all_reduce(t, op=op)
                return [t]

            differential(f"all_reduce {op} {dtype}", all_reduce)
    expected = sum(rank_data((5, 33), torch.float64, r) for r in range(WORLD))
    t = rank_data((5, 33), torch.float64).to(DEVICE)
    dist.all_reduce(t)
    assert torch.equal(t.cpu(), expected), "all_reduce SUM against the arithmetic"

    # A large tensor (several MiB) and an empty one.
    def big(device: torch.device) -> list[torch.Tensor]:
        t = rank_data((3 * 1024 * 1024 + 5,), torch.float32).to(device)
        dist.all_reduce(t)
        e = torch.empty(0, device=device)
        dist.all_reduce(e)
        return [t, e]

    differential("all_reduce large and empty", big)

    for root in range(WORLD):

        def broadcast(device: torch.device, root=root) -> list[torch.Tensor]:
            t = rank_data((17,), torch.float32).to(device)
            dist.broadcast(t, src=root)
            return [t]

        differential(f"broadcast from {root}", broadcast)

        def reduce(device: torch.device, root=root) -> list[torch.Tensor]:
            t = rank_data((9,), torch.int64).to(device)
            dist.reduce(t, dst=root, op=Reduce.MAX)
            return [t] if RANK == root else []

        differential(f"reduce to {root}", reduce)

        def gather_scatter(device: torch.device, root=root) -> list[torch.Tensor]:
            t = rank_data((6,), torch.float32).to(device)
            gathered = None
            if RANK == root:
                gathered = [torch.zeros(6, device=device) for _ in range(WORLD)]
            dist.gather(t, gathered, dst=root)
            out = torch.zeros(4, device=device)
            chunks = [rank_data((4,), torch.float32, r).to(device) for r in range(WORLD)]
            dist.scatter(out, chunks if RANK == root else None, src=root)
            return (gathered or []) + [out]

        differential(f"gather/scatter at {root}", gather_scatter)

    def gathers(device: torch.device) -> list[torch.Tensor]:
        t = rank_data((3, 4), torch.float32).to(device)
        listed = [torch.zeros(3, 4, device=device) for _ in range(WORLD)]
        dist.all_gather(listed, t)
        flat = torch.zeros(WORLD * 3, 4, device=device)
        dist.all_gather_into_tensor(flat, t)
        return [*listed, flat]

    differential("all_gather / all_gather_into_tensor", gathers)

    def reduce_scatters(device: torch.device) -> list[torch.Tensor]:
        full = rank_data((WORLD * 5, 2), torch.float32).to(device)
        out = torch.zeros(5, 2, device=device)
        dist.reduce_scatter_tensor(out, full)
        avg = torch.zeros(5, 2, device=device)
        dist.reduce_scatter_tensor(avg, full, op=Reduce.AVG)
        listed_out = torch.zeros(7, device=device)
        chunks = [rank_data((7,), torch.float32, r + RANK).to(device) for r in range(WORLD)]
        dist.reduce_scatter(listed_out, chunks)
        return [out, avg, listed_out]

    differential("reduce_scatter_tensor / reduce_scatter", reduce_scatters)

    def all_to_all(device: torch.device) -> list[torch.Tensor]:
        t = rank_data((WORLD * 3,), torch.float32).to(device)
        even = torch.zeros(WORLD * 3, device=device)
        dist.all_to_all_single(even, t)
        # Uneven: rank r sends r+1+i elements to rank i.
        input_splits = [RANK + 1 + i for i in range(WORLD)]
        output_splits = [r + 1 + RANK for r in range(WORLD)]
        source = rank_data((sum(input_splits),), torch.int64).to(device)
        uneven = torch.zeros(sum(output_splits), dtype=torch.int64, device=device)
        dist.all_to_all_single(uneven, source, output_splits, input_splits)
        inputs = [rank_data((2,), torch.float32, RANK * WORLD + i).to(device) for i in range(WORLD)]
        outputs = [torch.zeros(2, device=device) for _ in range(WORLD)]
        dist.all_to_all(outputs, inputs)
        return [even, uneven, *outputs]

    differential("all_to_all_single / all_to_all", all_to_all)

    def point_to_point(device: torch.device) -> list[torch.Tensor]:
        right, left = (RANK + 1) % WORLD, (RANK - 1) % WORLD
        # Blocking send/recv: even ranks send first.
        sent = rank_data((8,), torch.float32).to(device)
        received = torch.zeros(8, device=device)
        if RANK % 2 == 0:
            dist.send(sent, right)
            dist.recv(received, left)
        else:
            dist.recv(received, left)
            dist.send(sent, right)
        # isend/irecv both posted first, then waited.
        ring = torch.zeros(8, device=device)
        requests = [dist.isend(sent * 2, right), dist.irecv(ring, left)]
        for request in requests:
            request.wait()
        # batch_isend_irecv, both directions.
        from_left = torch.zeros(3, device=device)
        from_right = torch.zeros(3, device=device)
        ops = [
            dist.P2POp(dist.isend, sent[:3].contiguous(), right),
            dist.P2POp(dist.isend, sent[3:6] + 1, left),
            dist.P2POp(dist.irecv, from_left, left),
            dist.P2POp(dist.irecv, from_right, right),
        ]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        return [received, ring, from_left, from_right]

    differential("send/recv, isend/irecv, batch_isend_irecv", point_to_point)

    def any_source(device: torch.device) -> list[torch.Tensor]:
        t = torch.zeros(4, device=device)
        if RANK == 0:
            sources = []
            for _ in range(WORLD - 1):
                sources.append(dist.recv(t))
                assert t[0].item() == sources[-1] + 100, (t, sources)
            assert sorted(sources) == list(range(1, WORLD)), sources
        else:
            dist.send(torch.full((4,), RANK + 100.0, device=device), 0)
        return []

    differential("recv from any source", any_source)

    def coalesced(device: torch.device) -> list[torch.Tensor]:
        tensors = [rank_data((n,), torch.float32).to(device) for n in (3, 10, 1)]
        dist.all_reduce_coalesced(tensors)
        with dist._coalescing_manager():
            reduced = [rank_data((5,), torch.float32).to(device) for _ in range(3)]
            for t in reduced:
                dist.all_reduce(t)
        inputs = [rank_data((4,), torch.float32).to(device) for _ in range(2)]
        gathered = [torch.zeros(4 * WORLD, device=device) for _ in range(2)]
        with dist._coalescing_manager():
            for out, inp in zip(gathered, inputs, strict=True):
                dist.all_gather_into_tensor(out, inp)
        full = [rank_data((2 * WORLD,), torch.float32).to(device) for _ in range(2)]
        scattered = [torch.zeros(2, device=device) for _ in range(2)]
        with dist._coalescing_manager():
            for out, inp in zip(scattered, full, strict=True):
                dist.reduce_scatter_tensor(out, inp)
        return [*tensors, *reduced, *gathered, *scattered]

    differential("coalesced collectives", coalesced)

    def objects(device: torch.device) -> list[torch.Tensor]:
        gathered: list[object] = [None] * WORLD
        dist.all_gather_object(gathered, {"rank": RANK, "payload": list(range(RANK + 2))})
        assert gathered == [{"rank": r, "payload": list(range(r + 2))} for r in range(WORLD)]
        objects = [f"from rank {RANK}", RANK] if RANK == 0 else [None, None]
        dist.broadcast_object_list(objects, src=0)
        assert objects == ["from rank 0", 0], objects
        return []

    differential("object collectives", objects)
    dist.barrier()
    dist.destroy_process_group()
    print("OK")


def case_init_forms() -> None:
    """The ways of getting the backend for openreg tensors, one group after the other."""
    torch.openreg.set_device(DEVICE)
    store = connect_store()
    forms: dict[str, tuple[str | None, dict[str, object]]] = {
        "default": (None, {}),  # the default backend of the current accelerator
        "device_id": (None, {"device_id": DEVICE}),
        "device:backend": ("cpu:gloo,openreg:orgloo", {}),
        "backend name": ("orgloo", {}),
    }
    for form, (backend, kwargs) in forms.items():
        dist.init_process_group(
            backend, store=dist.PrefixStore(form, store), rank=RANK, world_size=WORLD, **kwargs
        )
        backend_object = dist.group.WORLD._get_backend(DEVICE)
        assert backend_object.name() == "orgloo", (form, backend_object.name())
        t = torch.full((3,), float(RANK + 1), device=DEVICE)
        dist.all_reduce(t)
        assert t.cpu().tolist() == [WORLD * (WORLD + 1) / 2] * 3, (form, t)
        if form != "default":  # as with CUDA, the default group serves only the accelerator
            c = torch.full((2,), float(RANK), device="cpu")
            dist.all_reduce(c)  # CPU tensors: Gloo (its own, or orgloo handing them over)
            assert c.tolist() == [sum(range(WORLD))] * 2, (form, c)
        dist.barrier()
        dist.destroy_process_group()
    print("OK")


def check_ordering() -> None:
    """CUDA's ordering rules, each checked so that breaking it changes a result."""
    store = connect_store()
    # 1. A collective waits for the work queued before it on its stream: the
    # values come from a fill queued behind a slow kernel.
    x = torch.zeros(1000, device=DEVICE)
    torch.openreg._sleep(300)
    x.fill_(RANK + 1.0)
    dist.all_reduce(x)
    # 2. Later work on the stream waits for it: the doubling sees the sum.
    y = x * 2
    assert y.cpu().eq(WORLD * (WORLD + 1)).all(), y

    # 3. async_op=True: the host is not blocked by wait(). Rank 0 waits before
    # the other ranks even issue the collective (they wait for its signal), so a
    # blocking wait() would deadlock instead of passing.
    z = torch.full((64,), RANK + 1.0, device=DEVICE)
    z + 0  # the first call of a signature runs synchronously (see docs/async-execution.md)
    if RANK == 0:
        work = dist.all_reduce(z, async_op=True)
        assert not work.is_completed(), "completed before the other ranks joined"
        work.wait()  # the current stream waits; the host goes on
        after = z + 0  # queued behind the collective
        store.set("issued", "1")
        assert after.cpu().eq(WORLD * (WORLD + 1) / 2).all(), after
        assert work.is_completed() and work.is_success()
        (result,) = work.result()
        assert result.cpu().eq(WORLD * (WORLD + 1) / 2).all(), result
    else:
        store.wait(["issued"])
        work = dist.all_reduce(z, async_op=True)
        future = work.get_future()
        value = future.wait()  # the future completes with the collective
        assert value[0].cpu().eq(WORLD * (WORLD + 1) / 2).all(), value
        assert work.is_completed()

    # 4. wait() orders the *current* stream: a side stream that waits sees the result.
    side = torch.openreg.Stream()
    w = torch.full((8,), RANK + 1.0, device=DEVICE)
    work = dist.all_reduce(w, async_op=True)
    with torch.openreg.stream(side):
        work.wait()
        seen = w * 1
    side.synchronize()
    assert seen.cpu().eq(WORLD * (WORLD + 1) / 2).all(), seen

    # 5. A collective issued on a side stream waits for that stream only, not
    # for the whole device: it completes while the default stream is still busy.
    dist.barrier()
    with held_stream(torch.openreg.default_stream()):
        s = torch.openreg.Stream()
        with torch.openreg.stream(s):
            v = torch.full((4,), RANK + 1.0, device=DEVICE)
            work = dist.all_reduce(v, async_op=True)
            work.get_future().wait()
        assert not torch.openreg.default_stream().query(), "the hold ended early"
        assert work.is_completed()
    with torch.openreg.stream(s):
        assert v.cpu().eq(WORLD * (WORLD + 1) / 2).all(), v
    store.set(f"done{RANK}", "1")
    store.wait([f"done{r}" for r in range(WORLD)])


def check_order_across_streams() -> None:
    """Collectives issued on different streams reach Gloo in issue order."""
    streams = [torch.openreg.Stream() for _ in range(3)]
    results = []
    for i in range(30):
        stream = streams[(i + RANK) % 3]  # each rank mixes streams differently
        with torch.openreg.stream(stream):
            if (i + RANK) % 3 == 0:
                torch.openreg._sleep(20)  # make this stream late
            t = torch.full((16,), float(i * 10 + RANK), device=DEVICE)
            dist.all_reduce(t)
            results.append(t)
    torch.openreg.synchronize()
    for i, t in enumerate(results):
        expected = sum(i * 10 + r for r in range(WORLD))
        assert t.cpu().eq(expected).all(), (i, t)


def check_bad_arguments() -> None:
    """Mistakes raise at the call, with a message naming the problem."""
    t = torch.ones(4, device=DEVICE)
    checks: list[tuple[Callable[[], object], str]] = [
        (lambda: dist.all_reduce(torch.ones(4, 4, device=DEVICE).t()[0]), "dense"),
        (lambda: dist.all_gather_into_tensor(torch.zeros(3, device=DEVICE), t), "world size"),
        (lambda: dist.reduce_scatter_tensor(torch.zeros(4, device=DEVICE), t), "world size"),
        (
            lambda: dist.all_gather_into_tensor(
                torch.zeros(4 * WORLD, dtype=torch.int64, device=DEVICE), t
            ),
            "dtype",
        ),
        (lambda: dist.all_gather([torch.zeros(4) for _ in range(WORLD)], t), "same device"),
    ]
    for call, words in checks:
        try:
            call()
        except (RuntimeError, ValueError) as error:
            assert words in str(error), f"expected {words!r} in: {error}"
        else:
            raise AssertionError(f"no error for a call that should mention {words!r}")
    # The group still works after refused calls.
    dist.all_reduce(t)
    assert t.cpu().eq(WORLD).all()


def case_dead_peer() -> None:
    """The last rank dies mid-run; every survivor fails with an error naming its rank."""
    init(timeout=float(os.environ.get("CASE_TIMEOUT", "15")))
    t = torch.ones(1 << 16, device=DEVICE)
    dist.all_reduce(t)
    assert t.cpu().eq(WORLD).all()
    if RANK == WORLD - 1:
        os._exit(17)  # no goodbye: sockets close as the kernel reaps the process
    started = time.monotonic()
    try:
        for _ in range(50):
            dist.all_reduce(t)
        t.cpu()
    except RuntimeError as error:
        print(f"FAILED after {time.monotonic() - started:.2f}s: {error}", flush=True)
        assert f"rank {RANK} of {WORLD}" in str(error), str(error)
    else:
        raise AssertionError("collectives with a dead peer succeeded")
    # Later collectives fail at once, without waiting for another timeout.
    try:
        dist.all_reduce(t)
        t.cpu()
    except RuntimeError as error:
        assert "earlier" in str(error), str(error)
        print(f"AGAIN: {error}", flush=True)
    else:
        raise AssertionError("a broken group accepted a collective")
    dist.destroy_process_group()  # tearing a broken group down must not hang either
    print("OK", flush=True)


def case_timeout() -> None:
    """A peer that never joins: the collective fails after the group's timeout."""
    init(timeout=3)
    t = torch.ones(8, device=DEVICE)
    dist.all_reduce(t)
    store = connect_store()
    if RANK != 0:
        store.wait(["rank0-failed"], timedelta(seconds=120))
        print("OK", flush=True)
        os._exit(0)
    started = time.monotonic()
    work = dist.all_reduce(t, async_op=True)
    try:
        work.wait()
        t.cpu()
    except RuntimeError as error:
        elapsed = time.monotonic() - started
        print(f"FAILED after {elapsed:.2f}s: {error}", flush=True)
        assert f"rank 0 of {WORLD}" in str(error), str(error)
    else:
        raise AssertionError("a collective without its peers succeeded")
    assert work.is_completed() and not work.is_success()
    store.set("rank0-failed", "1")
    print("OK", flush=True)
    os._exit(0)


def check_threads() -> None:
    """Collectives issued from two host threads, each with its own stream and group."""
    other = dist.new_group(list(range(WORLD)), backend="orgloo")
    failures: list[BaseException] = []

    def loop(group: dist.ProcessGroup | None, base: float) -> None:
        try:
            torch.openreg.set_device(DEVICE)
            with torch.openreg.stream(torch.openreg.Stream()):
                for i in range(40):
                    t = torch.full((32,), base + i + RANK, device=DEVICE)
                    dist.all_reduce(t, group=group)
                    assert t.cpu().eq(WORLD * (base + i) + sum(range(WORLD))).all()
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=loop, args=(None, 0.0)),
               threading.Thread(target=loop, args=(other, 1000.0))]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures


def case_semantics() -> None:
    """Stream order, issue order across streams and threads, argument checks."""
    init()
    check_bad_arguments()
    check_order_across_streams()
    check_threads()
    check_ordering()
    dist.destroy_process_group()
    print("OK", flush=True)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64), torch.nn.Tanh(),
        torch.nn.Linear(64, 4),
    )  # fmt: skip


def _batches(steps: int, per_rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The global batches (identical on every rank), CPU."""
    generator = torch.Generator().manual_seed(1234)
    total = per_rank * WORLD
    return [
        (torch.randn(total, 16, generator=generator), torch.randn(total, 4, generator=generator))
        for _ in range(steps)
    ]


def _train(model: torch.nn.Module, batches, device: torch.device, shard: bool) -> list[float]:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for inputs, targets in batches:
        if shard:  # this rank's slice of the global batch
            inputs, targets = inputs.chunk(WORLD)[RANK], targets.chunk(WORLD)[RANK]
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(model(inputs.to(device)), targets.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def case_ddp() -> None:
    """DistributedDataParallel on openreg == one process on the CPU with the global batch."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    init(device_id=DEVICE)
    batches = _batches(steps=6, per_rank=8)
    reference = _mlp()
    _train(reference, batches, torch.device("cpu"), shard=False)

    for hook in ("built-in", "python"):
        # Small buckets: several all-reduces per step, overlapping the backward pass.
        model = DistributedDataParallel(_mlp().to(DEVICE), bucket_cap_mb=0.01)
        if hook == "python":  # a Python comm hook: futures and callbacks on Gloo's threads
            model.register_comm_hook(None, default_hooks.allreduce_hook)
        _train(model, batches, DEVICE, shard=True)
        if hook == "built-in":  # DDP timed its iterations with openreg events
            logged = model._get_ddp_logging_data()
            for key in ("avg_forward_compute_time", "avg_backward_compute_time",
                        "avg_backward_comm_time"):  # fmt: skip
                assert logged.get(key, 0) > 0, (key, logged)
        for (name, expected), actual in zip(reference.named_parameters(),
                                            model.module.parameters(), strict=True):  # fmt: skip
            torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-6,
                                       msg=f"{hook} hook: {name}")  # fmt: skip
    dist.destroy_process_group()
    print("OK")


def case_ddp_under_chaos() -> None:
    """DDP under chaos scheduling: the same weights, and no held work waits out its cap.

    DDP's reducer waits for its all-reduces on the host, through the Work's future;
    asking for the future counts as a wait for the work that issues the collective,
    so chaos never holds it until its cap (which made each step take seconds).
    """
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel

    init(device_id=DEVICE)
    batches = _batches(steps=3, per_rank=8)
    reference = _mlp()
    _train(reference, batches, torch.device("cpu"), shard=False)
    torch.openreg.debug.enable("chaos")
    torch.openreg.debug.set_chaos_seed(1 + RANK)
    for hook in ("built-in", "python"):
        model = DistributedDataParallel(_mlp().to(DEVICE), bucket_cap_mb=0.01)
        if hook == "python":
            model.register_comm_hook(None, default_hooks.allreduce_hook)
        _train(model, batches, DEVICE, shard=True)
        for (name, expected), actual in zip(reference.named_parameters(),
                                            model.module.parameters(), strict=True):  # fmt: skip
            torch.testing.assert_close(actual.cpu(), expected, rtol=1e-5, atol=1e-6,
                                       msg=f"{hook} hook: {name}")  # fmt: skip
    statistics = torch.openreg.debug.chaos_statistics()
    torch.openreg.debug.disable("chaos")
    assert statistics["holds"] > 0, statistics
    assert statistics["expired_holds"] == 0 and statistics["expired_turns"] == 0, statistics
    dist.destroy_process_group()
    print("OK")


class _Block(torch.nn.Module):
    def __init__(self, width: int, heads: int) -> None:
        super().__init__()
        self.norm1 = torch.nn.LayerNorm(width)
        self.attention = torch.nn.MultiheadAttention(width, heads, batch_first=True)
        self.norm2 = torch.nn.LayerNorm(width)
        self.mlp = torch.nn.Sequential(
            torch.nn.Linear(width, 4 * width), torch.nn.GELU(), torch.nn.Linear(4 * width, width)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm1(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class _Transformer(torch.nn.Module):
    def __init__(self, vocabulary: int = 50, width: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocabulary, width)
        self.blocks = torch.nn.ModuleList(_Block(width, heads) for _ in range(layers))
        self.head = torch.nn.Linear(width, vocabulary)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embedding(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def case_fsdp() -> None:
    """FSDP2 (fully_shard) trains a small Transformer like one CPU process with the global batch."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    init(device_id=DEVICE)
    generator = torch.Generator().manual_seed(7)
    steps = [torch.randint(0, 50, (2 * WORLD, 12), generator=generator) for _ in range(4)]

    def train(model: torch.nn.Module, device: torch.device, shard: bool) -> torch.Tensor:
        # SGD, not Adam: the key projection's bias has a zero gradient in exact
        # arithmetic, and Adam would turn rounding noise there into full steps.
        optimizer = torch.optim.SGD(model.parameters(), lr=0.2, momentum=0.9)
        losses = []
        for tokens in steps:
            if shard:
                tokens = tokens.chunk(WORLD)[RANK]
            tokens = tokens.to(device)
            logits = model(tokens[:, :-1])
            targets = tokens[:, 1:].reshape(-1)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 50), targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.detach())
        return torch.stack(losses)

    torch.manual_seed(0)
    reference = _Transformer()
    torch.manual_seed(0)
    model = _Transformer().to(DEVICE)
    expected_losses = train(reference, torch.device("cpu"), shard=False)
    assert expected_losses[-1] < expected_losses[0], expected_losses

    mesh = init_device_mesh("openreg", (WORLD,))
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = train(model, DEVICE, shard=True)
    dist.all_reduce(losses, op=Reduce.AVG)  # the global batch's loss, step by step
    torch.testing.assert_close(losses.cpu(), expected_losses, rtol=1e-5, atol=1e-5)
    for (name, expected), actual in zip(reference.named_parameters(), model.parameters(),
                                        strict=True):  # fmt: skip
        full = actual.full_tensor()
        assert full.device.type == "openreg", (name, full.device)
        torch.testing.assert_close(full.cpu(), expected, rtol=1e-4, atol=1e-5, msg=name)
    dist.destroy_process_group()
    print("OK")


def case_dtensor() -> None:
    """DTensor on an openreg DeviceMesh: sharded matmuls equal the CPU result."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    init(device_id=DEVICE)
    mesh = init_device_mesh("openreg", (WORLD,))
    generator = torch.Generator().manual_seed(3)
    a = torch.randn(8 * WORLD, 6 * WORLD, generator=generator)
    b = torch.randn(6 * WORLD, 4 * WORLD, generator=generator)
    expected = a @ b

    rows = distribute_tensor(a.to(DEVICE), mesh, [Shard(0)]) @ distribute_tensor(
        b.to(DEVICE), mesh, [Replicate()]
    )  # row-sharded result: all_gather to assemble
    assert rows.placements == (Shard(0),), rows.placements
    assert rows.to_local().device.type == "openreg"
    torch.testing.assert_close(rows.full_tensor().cpu(), expected, rtol=1e-5, atol=1e-5)

    inner = distribute_tensor(a.to(DEVICE), mesh, [Shard(1)]) @ distribute_tensor(
        b.to(DEVICE), mesh, [Shard(0)]
    )  # partial sums: all_reduce to assemble
    torch.testing.assert_close(inner.full_tensor().cpu(), expected, rtol=1e-5, atol=1e-5)
    resharded = inner.redistribute(mesh, [Shard(1)])  # reduce_scatter
    torch.testing.assert_close(
        resharded.to_local().cpu(), expected.chunk(WORLD, dim=1)[RANK], rtol=1e-5, atol=1e-5
    )
    columns = rows.redistribute(mesh, [Shard(1)])  # all_to_all
    torch.testing.assert_close(
        columns.to_local().cpu(), expected.chunk(WORLD, dim=1)[RANK], rtol=1e-5, atol=1e-5
    )
    dist.destroy_process_group()
    print("OK")


# Cases with a DeviceMesh: torch's DTensor caches keep the mesh, and so its
# groups, after destroy_process_group. Their collectives all run through orgloo
# on openreg tensors, whose Gloo sees only aliases without Python objects, so a
# Gloo worker that outlives them has nothing of Python's to let go of.
MESH_CASES = {"fsdp", "dtensor"}
CASES = {name.removeprefix("case_"): f for name, f in globals().items() if name.startswith("case_")}

if __name__ == "__main__":
    CASES[sys.argv[1]](*sys.argv[2:])
    if sys.argv[1] not in MESH_CASES:
        check_no_gloo_worker_left()
