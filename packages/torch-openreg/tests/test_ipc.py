"""openreg tensors shared between processes through torch.multiprocessing (docs/ipc.md).

Peers are spawned from this process and run ``_ipc_workers.serve``; tensors travel
both ways through torch.multiprocessing's reducers, sharing device memory. No test
depends on timing: ordering across processes is shown with held streams (work that
certainly stays queued until released), lifetimes with the allocator's statistics,
and every wait on a peer has a deadline.
"""

from __future__ import annotations

import copy
import multiprocessing
import os
import signal
from collections.abc import Iterator
from typing import Any

import _ipc_workers
import pytest
import torch
from _async import held_stream, warm

import torch_openreg._multiprocessing as openreg_multiprocessing

DEADLINE = _ipc_workers.DEADLINE
SPAWN = multiprocessing.get_context("spawn")


class PeerError(Exception):
    """A call failed in the peer (its message is the peer's exception)."""


class Peer:
    """A spawned process serving calls of ``_ipc_workers`` functions."""

    def __init__(self, context: Any = SPAWN) -> None:
        self.connection, there = context.Pipe()
        self.process = context.Process(target=_ipc_workers.serve, args=(there,), daemon=True)
        self.process.start()
        there.close()

    def call(self, name: str, *args: object) -> Any:
        self.connection.send((name, args))
        assert self.connection.poll(DEADLINE), f"the peer did not answer {name} in {DEADLINE} s"
        status, result = self.connection.recv()
        if status == "error":
            raise PeerError(result)
        return result

    def close(self) -> None:
        if self.process.is_alive():
            try:
                self.connection.send(("exit", ()))
            except OSError:
                pass
            self.process.join(DEADLINE)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(DEADLINE)


@pytest.fixture(scope="module")
def peer() -> Iterator[Peer]:
    """One spawned peer for the module (its state is per test: each test drops what it kept)."""
    spawned = Peer()
    yield spawned
    spawned.close()


@pytest.fixture
def fresh_peer() -> Iterator[Peer]:
    """A peer of the test's own, for tests that end it."""
    spawned = Peer()
    yield spawned
    spawned.close()


def allocated() -> int:
    """This process's allocated device memory, after freeing what receivers let go of."""
    torch.openreg.ipc_collect()
    return torch.openreg.memory_allocated()


# ---- Views, layouts and types ------------------------------------------------------------


@pytest.mark.parametrize("layout", _ipc_workers.LAYOUTS)
def test_a_tensor_sent_arrives_as_the_same_view_of_the_same_memory(peer, layout) -> None:
    tensor = _ipc_workers.LAYOUTS[layout]()
    peer.call("keep", "t", tensor)
    seen = peer.call("describe", "t")
    assert seen["device"] == "openreg:0"
    assert (seen["size"], seen["stride"], seen["offset"], seen["dtype"]) == (
        tuple(tensor.size()),
        tensor.stride(),
        tensor.storage_offset(),
        tensor.dtype,
    )
    torch.testing.assert_close(seen["values"], tensor.cpu(), rtol=0, atol=0)
    # Sent back, it is this process's own storage again (not a second mapping).
    back = peer.call("echo", "t")
    assert (back.stride(), back.storage_offset()) == (tensor.stride(), tensor.storage_offset())
    assert back.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
    peer.call("drop", "t")


@pytest.mark.parametrize("layout", _ipc_workers.LAYOUTS)
def test_a_tensor_made_in_another_process_arrives_here(peer, layout) -> None:
    expected = _ipc_workers.LAYOUTS[layout]()
    received = peer.call("make", layout)
    assert received.device == expected.device
    assert (received.stride(), received.storage_offset()) == (
        expected.stride(),
        expected.storage_offset(),
    )
    torch.testing.assert_close(received.cpu(), expected.cpu(), rtol=0, atol=0)
    # Received memory is device memory here: operators run on it.
    torch.testing.assert_close((received * 2).cpu(), (expected * 2).cpu(), rtol=0, atol=0)


def test_parameters_stay_parameters_and_requires_grad_survives(peer) -> None:
    parameter = torch.nn.Parameter(torch.ones(3, device="openreg"))
    leaf = torch.zeros(2, device="openreg", requires_grad=True)
    peer.call("keep", "p", parameter)
    peer.call("keep", "leaf", leaf)
    assert (peer.call("describe", "p")["type"], peer.call("describe", "p")["requires_grad"]) == (
        "Parameter",
        True,
    )
    assert peer.call("describe", "leaf")["requires_grad"] is True
    back = peer.call("echo", "p")
    assert isinstance(back, torch.nn.Parameter) and back.requires_grad
    peer.call("drop", "p", "leaf")


def test_views_of_one_storage_share_it_there_too(peer) -> None:
    base = torch.arange(10.0, device="openreg")
    peer.call("keep", "head", base[:5])
    peer.call("keep", "tail", base[5:])  # sent apart: still one storage there
    assert peer.call("same_storage", "head", "tail")
    peer.call("drop", "head", "tail")


def test_in_place_changes_are_seen_on_the_other_side(peer) -> None:
    tensor = torch.zeros(4, device="openreg")
    peer.call("keep", "z", tensor)
    peer.call("add_", "z", 2.0)  # the peer synchronizes before it answers
    assert tensor.cpu().tolist() == [2.0] * 4
    tensor.mul_(5)
    torch.openreg.synchronize()
    assert peer.call("describe", "z")["values"].tolist() == [10.0] * 4
    peer.call("drop", "z")


def test_memory_of_a_private_pool_is_shared_too(peer) -> None:
    pool = torch.openreg.MemPool()
    with torch.openreg.use_mem_pool(pool):
        tensor = torch.zeros(8, device="openreg")
    peer.call("keep", "pooled", tensor)
    peer.call("add_", "pooled", 1.0)
    assert tensor.cpu().tolist() == [1.0] * 8
    peer.call("drop", "pooled")


def test_the_receiver_counts_no_memory_for_what_it_received(peer) -> None:
    before = peer.call("memory_allocated")
    peer.call("keep", "big", torch.ones(1 << 18, device="openreg"))
    assert peer.call("memory_allocated") == before  # counted where it was allocated
    peer.call("drop", "big")


def test_the_race_detector_checks_accesses_to_received_memory(peer) -> None:
    peer.call("keep", "r", torch.zeros(1024, device="openreg"))
    report = peer.call("race_on", "r", False)
    assert "openreg stream race" in report and "wait_stream" in report, report
    assert peer.call("race_on", "r", True) == ""
    peer.call("drop", "r")


# ---- Order across processes -----------------------------------------------------------------


def test_the_receiver_waits_for_the_senders_queued_writes(peer) -> None:
    tensor = torch.zeros(1024, device="openreg")
    warm(lambda: tensor.fill_(1.0))
    peer.call("warm_copy", (1024,), torch.float32)
    with held_stream() as held:
        tensor.fill_(7.0)  # queued behind the hold
        peer.call("keep", "w", tensor)  # sent while the write is queued
        assert peer.call("copy_behind_wait", "w") is False  # the peer's copy waits for it
        held.release()
    assert peer.call("describe", "copy")["values"].tolist() == [7.0] * 1024
    peer.call("drop", "w", "copy")


def test_an_interprocess_event_orders_a_write_here_before_a_read_there(peer) -> None:
    tensor = torch.zeros(256, device="openreg")
    warm(lambda: tensor.fill_(1.0))
    peer.call("keep", "e", tensor)
    peer.call("warm_copy", (256,), torch.float32)
    stream = torch.openreg.Stream()
    with held_stream(stream) as held:
        with torch.openreg.stream(stream):
            tensor.fill_(3.0)
        event = torch.openreg.Event(interprocess=True)
        event.record(stream)
        # The event travels by its handle; the peer's stream waits for this record.
        assert peer.call("wait_event_then_copy", event, "e") is False
        held.release()
    assert peer.call("describe", "copy")["values"].tolist() == [3.0] * 256
    peer.call("drop", "e", "copy")


def test_a_sender_that_dies_before_its_queued_write_fails_the_wait_instead_of_hanging() -> None:
    here, there = SPAWN.Pipe()
    process = SPAWN.Process(target=_ipc_workers.send_behind_hold_and_die, args=(there,))
    process.start()
    there.close()
    stream = torch.openreg.Stream()  # a failure of its work is reported once, here
    with torch.openreg.stream(stream):
        assert here.poll(DEADLINE), "the peer sent nothing"
        tensor = here.recv()  # this stream now waits for the peer's held write
        here.send("die")
        process.join(DEADLINE)
        assert process.exitcode == 3
        with pytest.raises(RuntimeError, match=rf"pid {process.pid}\) exited before record"):
            tensor.cpu()


def test_an_interprocess_event_in_one_process(races_off) -> None:
    stream = torch.openreg.Stream()
    event = torch.openreg.Event(interprocess=True)
    with held_stream(stream) as held:
        event.record(stream)
        handle = event.ipc_handle()
        opened = torch.openreg.Event.from_ipc_handle(0, handle)
        handle.close()
        assert not opened.query()
        with pytest.raises(RuntimeError, match="record it in the process that created it"):
            opened.record()
        held.release()
    opened.synchronize()
    assert opened.query() and event.query()


def test_interprocess_events_are_made_and_opened_with_clear_refusals() -> None:
    with pytest.raises(ValueError, match="cannot time"):
        torch.openreg.Event(enable_timing=True, interprocess=True)
    with pytest.raises(RuntimeError, match=r"Event\(interprocess=True\)"):
        torch.openreg.Event().ipc_handle()
    recorded = torch.openreg.Event()
    recorded.record()
    with pytest.raises(RuntimeError, match=r"Event\(interprocess=True\)"):
        recorded.ipc_handle()
    handle = torch.openreg.Event(interprocess=True).ipc_handle()
    with pytest.raises(ValueError, match="pass device=0"):
        torch.openreg.Event.from_ipc_handle(1, handle)


# ---- Lifetime ------------------------------------------------------------------------------------


def test_memory_sent_away_stays_allocated_until_the_receiver_lets_go(
    peer, steady_memory_stats
) -> None:
    base = allocated()
    tensor = torch.ones(1 << 18, device="openreg")
    size = allocated() - base
    peer.call("keep", "held", tensor)
    del tensor
    assert allocated() == base + size  # freed here, held for the peer
    peer.call("drop", "held")
    assert allocated() == base


def test_a_receiver_killed_while_holding_memory_lets_it_go(fresh_peer, steady_memory_stats) -> None:
    base = allocated()
    tensor = torch.ones(1 << 18, device="openreg")
    size = allocated() - base
    fresh_peer.call("keep", "held", tensor)
    del tensor
    assert allocated() == base + size
    os.kill(fresh_peer.process.pid, signal.SIGKILL)
    fresh_peer.process.join(DEADLINE)
    assert allocated() == base  # the kernel dropped the dead process's hold


def test_a_tensor_outlives_the_process_that_made_it(steady_memory_stats) -> None:
    base = allocated()
    here, there = SPAWN.Pipe()
    process = SPAWN.Process(target=_ipc_workers.send_and_exit, args=(there, [1.0, 2.0, 3.0]))
    process.start()
    there.close()
    assert here.poll(DEADLINE), "the peer sent nothing"
    tensor = here.recv()
    here.send("received")
    process.join(DEADLINE)
    assert process.exitcode == 0
    assert tensor.cpu().tolist() == [1.0, 2.0, 3.0]
    tensor.add_(1)
    assert tensor.cpu().tolist() == [2.0, 3.0, 4.0]
    assert allocated() == base
    del tensor  # closes the mapping of the exited process's memory


def test_a_hundred_rounds_leave_memory_stats_where_they_were(peer, steady_memory_stats) -> None:
    base, peer_base = allocated(), peer.call("memory_allocated")
    for round_ in range(100):
        tensor = torch.full((1000,), float(round_), device="openreg")
        assert peer.call("receive_and_sum", tensor) == 1000.0 * round_
        del tensor
    peer.call("drop")  # the peer's mappings are closed once its work is done
    assert allocated() == base
    assert peer.call("ipc_collect") == peer_base


# ---- Training ----------------------------------------------------------------------------------


def test_hogwild_steps_on_shared_parameters_match_the_same_steps_in_one_process(peer) -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1).to("openreg")
    reference = copy.deepcopy(model)  # its own memory
    batches = [(torch.randn(8, 4), torch.randn(8, 1)) for _ in range(6)]
    peer.call("keep", "model", model)
    for index, (inputs, targets) in enumerate(batches):
        # Turns alternate: each process's step updates the one shared set of parameters.
        if index % 2 == 0:
            _ipc_workers.sgd_step({"model": model}, inputs, targets)
        else:
            peer.call("sgd_step", inputs, targets)
        _ipc_workers.sgd_step({"model": reference}, inputs, targets)
    for shared, expected in zip(model.parameters(), reference.parameters(), strict=True):
        torch.testing.assert_close(shared.detach().cpu(), expected.detach().cpu(), rtol=0, atol=0)
    peer.call("drop", "model")


def test_dataloader_spawn_workers_return_device_tensors() -> None:
    loader = torch.utils.data.DataLoader(
        _ipc_workers.DeviceDataset(), batch_size=4, num_workers=2, multiprocessing_context="spawn"
    )
    batches = [batch.cpu() for batch in loader]
    expected = torch.arange(8.0).repeat_interleave(3).view(2, 4, 3)
    torch.testing.assert_close(torch.stack(batches), expected, rtol=0, atol=0)


def test_dataloader_spawn_workers_with_pin_memory() -> None:
    dataset = torch.utils.data.TensorDataset(torch.arange(8.0))
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=4, num_workers=2, multiprocessing_context="spawn", pin_memory=True
    )
    batches = [batch for (batch,) in loader]
    assert all(batch.is_pinned() for batch in batches)
    torch.testing.assert_close(torch.cat(batches).to("openreg").cpu(), torch.arange(8.0))


def test_a_forkserver_peer_shares_too() -> None:
    forkserver = Peer(multiprocessing.get_context("forkserver"))
    try:
        tensor = torch.arange(6.0, device="openreg")
        forkserver.call("keep", "t", tensor)
        forkserver.call("add_", "t", 1.0)
        assert tensor.cpu().tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        forkserver.call("drop", "t")
    finally:
        forkserver.close()


# ---- In one process (a queue read where it was written) ------------------------------------


def test_a_queue_round_trip_in_one_process_gives_back_the_same_storage() -> None:
    queue = SPAWN.Queue()
    tensor = torch.arange(5.0, device="openreg")[1:]
    queue.put(tensor)
    received = queue.get(timeout=DEADLINE)
    assert received.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr()
    assert received.storage_offset() == 1


# ---- Refusals: at the sender, in the caller's thread; never a hang ---------------------------


def test_a_device_the_receiver_will_not_have_is_refused_at_the_sender(monkeypatch) -> None:
    tensor = torch.ones(2, device="openreg:1")
    monkeypatch.setenv("OPENREG_DEVICE_COUNT", "1")  # what processes started now would see
    message = r"openreg:1 to another process: .*OPENREG_DEVICE_COUNT=1.*same OPENREG_DEVICE_COUNT"
    here, there = SPAWN.Pipe()
    with pytest.raises(RuntimeError, match=message):
        here.send(tensor)
    queue = SPAWN.Queue()
    with pytest.raises(RuntimeError, match=message):
        queue.put(tensor)  # raised here, not in the queue's feeder thread
    with pytest.raises(RuntimeError, match=message):
        queue.put({"batch": [tensor]})
    process = SPAWN.Process(target=_ipc_workers.keep, args=({}, "t", tensor))
    with pytest.raises(RuntimeError, match=message):
        process.start()
    here.close()
    there.close()


def test_a_receiver_with_fewer_devices_raises_instead_of_waiting(monkeypatch) -> None:
    monkeypatch.setenv("OPENREG_DEVICE_COUNT", "1")
    one_device = Peer()  # started with one device
    monkeypatch.delenv("OPENREG_DEVICE_COUNT")  # so the sender does not refuse first
    try:
        with pytest.raises(PeerError, match="this process has 1 OpenReg devices"):
            one_device.call("keep", "t", torch.ones(2, device="openreg:1"))
        assert one_device.call("pid") == one_device.process.pid  # and it still serves
    finally:
        one_device.close()


def test_a_non_leaf_requiring_grad_is_refused_by_put() -> None:
    queue = SPAWN.Queue()
    product = torch.ones(2, device="openreg", requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf"):
        queue.put(product)


def test_a_failure_in_a_queue_feeder_thread_reaches_the_receiver(monkeypatch) -> None:
    def failing(storage: object) -> object:
        raise RuntimeError("injected failure")

    monkeypatch.setattr(openreg_multiprocessing, "_reduce_openreg_storage", failing)
    queue = SPAWN.Queue()
    queue.put(torch.ones(2, device="openreg"))  # passes the caller-side check
    with pytest.raises(RuntimeError, match="could not send this object: injected failure"):
        queue.get(timeout=DEADLINE)


def test_outside_a_feeder_thread_a_failure_raises_where_it_happens() -> None:
    def failing(obj: object) -> object:
        raise RuntimeError("raised in place")

    reduce = openreg_multiprocessing._delivering_failures(failing)
    with pytest.raises(RuntimeError, match="raised in place"):
        reduce(object())
