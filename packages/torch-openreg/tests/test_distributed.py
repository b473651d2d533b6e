"""torch.distributed registration of the orgloo backend (in this process).

The collectives themselves run in worlds of fresh processes:
test_distributed_worlds.py.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from _async import held_stream, warm

import torch_openreg.distributed as openreg_distributed


def test_backend_is_the_default_for_the_openreg_device():
    assert dist.Backend.default_device_backend_map["openreg"] == "orgloo"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"  # untouched
    assert dist.Backend.backend_capability["orgloo"] == ["openreg", "cpu"]
    assert dist.is_backend_available("orgloo")
    assert dist.Backend("orgloo") == "orgloo" == dist.Backend.ORGLOO


def test_registration_is_idempotent():
    plugin = dist.Backend._plugins["ORGLOO"]
    openreg_distributed.register()
    openreg_distributed.register()
    assert dist.Backend._plugins["ORGLOO"] is plugin


def test_device_backend_strings_resolve_to_orgloo():
    config = dist.distributed_c10d.BackendConfig("cpu:gloo,openreg:orgloo")
    assert config.get_device_backend_map() == {"cpu": "gloo", "openreg": "orgloo"}
    assert dist.distributed_c10d.BackendConfig("orgloo").get_device_backend_map() == {
        "openreg": "orgloo",
        "cpu": "orgloo",
    }


def test_single_rank_group_in_process():
    """World size 1 (a HashStore, no peer): every collective is an identity, in stream order."""
    store = dist.HashStore()
    dist.init_process_group("orgloo", store=store, rank=0, world_size=1)
    try:
        x = torch.arange(6.0, device="openreg")
        warm(lambda: torch.zeros(6, device="openreg").mul_(2))
        with held_stream():
            x.mul_(2)  # queued behind the hold: the all-reduce must see it
            work = dist.all_reduce(x, async_op=True)
            work.wait()
            assert not work.is_completed(), "the all-reduce ran before the work queued before it"
        assert x.cpu().tolist() == [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]
        assert work.is_completed() and work.is_success()
        assert work.get_future().wait()[0].device.type == "openreg"
        out = torch.empty(6, device="openreg")
        dist.all_gather_into_tensor(out, x)
        assert torch.equal(out.cpu(), x.cpu())
        dist.barrier()
    finally:
        dist.destroy_process_group()


def test_once_python_exits_background_threads_keep_what_they_would_let_go(run_python):
    """After the binding's exit handler (atexit, before Python finalizes), threads
    Python does not wait for neither let go of Python objects nor run future
    callbacks: one that asked for the GIL while Python finalizes would be ended
    by Python, through C++ frames that cannot unwind — an abort at exit
    (csrc/base/python_exit.h). The process still exits cleanly."""
    result = run_python(
        """
        import gc, weakref
        import torch, torch.distributed as dist
        import torch_openreg

        dist.init_process_group("orgloo", store=dist.HashStore(), rank=0, world_size=1)

        def all_reduce_dropping_tensor_and_work():
            t = torch.ones(4, device="openreg")
            work = dist.all_reduce(t, async_op=True)
            future = work.get_future()
            work.wait()
            torch.openreg.synchronize()
            assert work.is_completed() and work.is_success()
            return weakref.ref(t), future

        _, future = all_reduce_dropping_tensor_and_work()
        assert future.wait()[0].cpu().tolist() == [1.0] * 4  # before: callbacks run

        torch_openreg._C._close_for_python_exit()  # what the exit handler does
        tensor, future = all_reduce_dropping_tensor_and_work()
        assert not future.done(), "a background thread ran the future's callbacks"
        del future
        gc.collect()
        assert tensor() is not None, "a background thread let go of the tensor"
        print("OK")
        """
    )
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stderr[-3000:]


def test_pg_options_are_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="takes no pg_options"):
        dist.init_process_group(
            "orgloo", store=dist.HashStore(), rank=0, world_size=1, pg_options=object()
        )
    if dist.is_initialized():
        dist.destroy_process_group()
