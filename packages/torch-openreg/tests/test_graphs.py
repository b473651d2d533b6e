"""Graph capture and replay with CUDA's semantics (torch.openreg.graphs, torch.accelerator.Graph).

Captured work does not run during the capture; a replay runs it again on the current stream,
reading and writing the same tensors; memory allocated during the capture comes from the
graph's private pool until reset(); what a capture cannot record raises, naming the capture.
Results are compared with the same code run eagerly on the CPU.
"""

from __future__ import annotations

import copy
import pickle
import threading
from collections.abc import Callable, Iterator

import pytest
import torch
from _async import warm
from torch import nn

openreg = torch.openreg


@pytest.fixture(autouse=True)
def _no_capture_left() -> Iterator[None]:
    yield
    assert not openreg.is_current_stream_capturing()


def capture(fn: Callable[[], object], graph: openreg.OpenRegGraph | None = None, **kwargs: object):
    """Warm ``fn`` up on a side stream, then capture it; returns (graph, static result)."""
    side = openreg.Stream()
    side.wait_stream(openreg.current_stream())
    with openreg.stream(side):
        fn()
    openreg.current_stream().wait_stream(side)
    graph = graph if graph is not None else openreg.OpenRegGraph()
    with openreg.graph(graph, **kwargs):
        result = fn()
    return graph, result


def chain(x: torch.Tensor) -> torch.Tensor:
    y = x * 2 + 1
    y = torch.sin(y) * x - y.exp().clamp(max=10)
    return torch.relu(y).sqrt() + y.abs().mean()


# ---- Capture and replay -------------------------------------------------------------------


def test_captured_work_runs_only_when_replayed():
    x = torch.ones(100, device="openreg")
    warm(lambda: x.add_(1))
    x.fill_(1)
    graph, _ = capture(lambda: x.add_(1))
    # The warm-up ran once; the capture recorded without running.
    assert torch.equal(x.cpu(), torch.full((100,), 2.0))
    graph.replay()
    graph.replay()
    assert torch.equal(x.cpu(), torch.full((100,), 4.0))


def test_an_elementwise_chain_replays_with_new_static_inputs_like_the_cpu():
    static_x = torch.randn(1000, device="openreg")
    graph, static_y = capture(lambda: chain(static_x))
    for seed in range(3):
        data = torch.randn(1000, generator=torch.Generator().manual_seed(seed))
        static_x.copy_(data)
        graph.replay()
        torch.testing.assert_close(static_y.cpu(), chain(data))


def _view_work(x: torch.Tensor, out: torch.Tensor) -> None:
    """In-place and out= work on views: kernels whose arguments share a storage."""
    x[::2].mul_(1.5)
    torch.add(x[1::2], x[::2], out=out[:50])
    out[50:].copy_(x[:50].flip(0))
    out.sub_(out.mean())


def test_in_place_and_out_work_on_views_replays_like_the_cpu_each_time():
    # A replay reuses the CPU aliases its kernels ran on the time before: each replay must
    # still see the arguments as captured (same storage, offset and strides).
    x = torch.randn(100, generator=torch.Generator().manual_seed(0))
    cpu_x, cpu_out = x.clone(), torch.zeros(100)
    static_x, static_out = x.to("openreg"), torch.zeros(100, device="openreg")
    _view_work(cpu_x, cpu_out)  # the warm-up that capture() runs
    graph, _ = capture(lambda: _view_work(static_x, static_out))
    for _ in range(3):
        graph.replay()
        _view_work(cpu_x, cpu_out)
        torch.testing.assert_close(static_x.cpu(), cpu_x)
        torch.testing.assert_close(static_out.cpu(), cpu_out)


def test_a_kernel_that_changes_its_arguments_view_gets_fresh_aliases_at_each_replay():
    # A replay reuses a kernel's CPU aliases only if the kernel left them as they were
    # made. This operator's CPU kernel (misbehaving on purpose) halves its argument's view
    # before summing it: reusing the changed alias would sum 4, then 2, then 1 elements.
    library = torch.library.Library("openreg_graph_test", "DEF")
    library.define("halve_and_sum(Tensor x) -> Tensor")

    def halve_and_sum(x: torch.Tensor) -> torch.Tensor:
        x.as_strided_((x.numel() // 2,), (1,))
        return x.sum()

    library.impl("halve_and_sum", halve_and_sum, "CPU")
    torch.library.register_fake("openreg_graph_test::halve_and_sum", lambda x: x.new_empty(()),
                                lib=library)  # fmt: skip
    x = torch.arange(8.0, device="openreg")
    graph, total = capture(lambda: torch.ops.openreg_graph_test.halve_and_sum(x))
    sums = []
    for _ in range(3):
        graph.replay()
        sums.append(total.item())
    assert sums == [6.0, 6.0, 6.0]  # 0 + 1 + 2 + 3 each time
    assert x.shape == (8,)


def _chain_keeping_every_result(x: torch.Tensor) -> list[torch.Tensor]:
    """Each operator writes memory of its own: nothing is freed during the capture, so
    no later node of the graph reuses an earlier one's block."""
    results = [x * 2]
    for op in (torch.sin, torch.exp, torch.tanh, lambda t: t + 1, torch.cos):
        results.append(op(results[-1]))
    return results


def test_one_graph_replayed_on_two_streams_at_once_gives_the_same_result(races_off: None):
    # Two stream workers may run the same captured kernel at the same time: each run needs
    # aliases of its own. The replays race on purpose: on the same memory they write the
    # same values, since no node reuses another's block (replays of a graph whose nodes
    # reuse freed blocks must not overlap, on CUDA too).
    static_x = torch.randn(1000, device="openreg")
    graph, static_results = capture(lambda: _chain_keeping_every_result(static_x))
    expected = _chain_keeping_every_result(static_x.cpu())
    streams = [openreg.Stream(), openreg.Stream()]
    for stream in streams:
        stream.wait_stream(openreg.current_stream())
    for _ in range(20):
        for stream in streams:
            with openreg.stream(stream):
                graph.replay()
    for stream in streams:
        openreg.current_stream().wait_stream(stream)
    for result, cpu_result in zip(static_results, expected, strict=True):
        torch.testing.assert_close(result.cpu(), cpu_result)


def test_matmuls_replay_like_the_cpu():
    a = torch.randn(64, 32, device="openreg")
    b = torch.randn(32, 48, device="openreg")
    graph, static_out = capture(lambda: torch.relu(a @ b) @ (b.t() @ a.t()))
    for seed in range(2):
        generator = torch.Generator().manual_seed(seed)
        cpu_a, cpu_b = (
            torch.randn(64, 32, generator=generator),
            torch.randn(32, 48, generator=generator),
        )
        a.copy_(cpu_a)
        b.copy_(cpu_b)
        graph.replay()
        torch.testing.assert_close(
            static_out.cpu(), torch.relu(cpu_a @ cpu_b) @ (cpu_b.t() @ cpu_a.t())
        )


def mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4)
    )


def test_a_small_mlp_forward_replays_like_the_cpu():
    cpu_model = mlp()
    model = copy.deepcopy(cpu_model).to("openreg")
    static_x = torch.randn(8, 16, device="openreg")
    with torch.no_grad():
        graph, static_y = capture(lambda: model(static_x))
        for seed in range(3):
            data = torch.randn(8, 16, generator=torch.Generator().manual_seed(seed))
            static_x.copy_(data)
            graph.replay()
            torch.testing.assert_close(static_y.cpu(), cpu_model(data))


def train_step(
    model: nn.Module, optimizer: torch.optim.Optimizer, x: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    optimizer.zero_grad(set_to_none=True)
    loss = nn.functional.mse_loss(model(x), target)
    loss.backward()
    optimizer.step()
    return loss


@pytest.mark.parametrize(
    "make_optimizer",
    [
        lambda p, on_device: torch.optim.SGD(p, lr=0.05, momentum=0.9),
        # Adam keeps its step count on the device only with capturable=True (as on CUDA).
        lambda p, on_device: torch.optim.Adam(p, lr=0.01, capturable=on_device),
    ],
    ids=["sgd-momentum", "adam-capturable"],
)
def test_a_full_training_step_replays_like_eager_cpu_training(make_optimizer):
    cpu_model = mlp()
    model = copy.deepcopy(cpu_model).to("openreg")
    cpu_optimizer = make_optimizer(cpu_model.parameters(), False)
    optimizer = make_optimizer(model.parameters(), True)
    batches = [
        (torch.randn(8, 16, generator=g), torch.randn(8, 4, generator=g))
        for g in (torch.Generator().manual_seed(seed) for seed in range(6))
    ]
    static_x = torch.zeros(8, 16, device="openreg")
    static_target = torch.zeros(8, 4, device="openreg")
    # Warm-up steps (eager, on a side stream), as on CUDA; the CPU model takes the same steps.
    side = openreg.Stream()
    side.wait_stream(openreg.current_stream())
    with openreg.stream(side):
        for x, target in batches[:2]:
            static_x.copy_(x)
            static_target.copy_(target)
            train_step(model, optimizer, static_x, static_target)
    openreg.current_stream().wait_stream(side)
    for x, target in batches[:2]:
        train_step(cpu_model, cpu_optimizer, x, target)
    graph = openreg.OpenRegGraph()
    optimizer.zero_grad(set_to_none=True)
    with openreg.graph(graph):
        static_loss = train_step(model, optimizer, static_x, static_target)
    for x, target in batches[2:]:
        static_x.copy_(x)
        static_target.copy_(target)
        graph.replay()
        cpu_loss = train_step(cpu_model, cpu_optimizer, x, target)
        torch.testing.assert_close(static_loss.cpu(), cpu_loss.detach())
    for parameter, cpu_parameter in zip(model.parameters(), cpu_model.parameters(), strict=True):
        torch.testing.assert_close(parameter.detach().cpu(), cpu_parameter.detach())


def test_random_operators_draw_new_numbers_at_each_replay_and_repeat_under_a_seed():
    static_x = torch.ones(4096, device="openreg")
    dropout = nn.Dropout(p=0.5)
    graph, static_y = capture(lambda: dropout(static_x) + torch.rand(4096, device="openreg"))
    openreg.manual_seed(123)
    graph.replay()
    first = static_y.cpu()
    graph.replay()
    second = static_y.cpu()
    assert not torch.equal(first, second)
    openreg.manual_seed(123)
    graph.replay()
    again = static_y.cpu()
    assert torch.equal(first, again)
    # Half the elements dropped, as eager dropout would (a loose bound on a 4096-draw count).
    assert 1500 < int((first < 1).sum()) < 2600


def test_dropout_in_a_captured_training_step_differs_per_replay_and_matches_under_a_seed():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 64), nn.Dropout(0.3), nn.Linear(64, 1)).to("openreg")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    static_x = torch.randn(32, 16, device="openreg")
    static_target = torch.randn(32, 1, device="openreg")

    def step() -> torch.Tensor:
        return train_step(model, optimizer, static_x, static_target)

    initial = copy.deepcopy(model.state_dict())
    graph, static_loss = capture(step)

    def losses() -> list[float]:
        model.load_state_dict(initial)
        openreg.manual_seed(7)
        values = []
        for _ in range(3):
            graph.replay()
            values.append(static_loss.item())
        return values

    first, second = losses(), losses()
    assert first == second
    assert len(set(first)) == 3


# ---- Memory: private pools, sharing, reset ------------------------------------------------


def _pool_reserved(pool: tuple[int, int]) -> int:
    pools = openreg.memory_stats_as_nested_dict()["reserved_bytes_by_private_pools"]
    return pools[pool]["all"]["current"] if pool in pools else 0


def test_capture_allocates_from_the_graphs_private_pool(steady_memory_stats):
    x = torch.randn(1 << 16, device="openreg")
    graph, y = capture(lambda: (x * 2).sin())
    assert _pool_reserved(graph.pool()) > 0
    assert graph.pool()[0] > 0 and graph.pool()[1] == 0  # (n, 0), as CUDA's graph pools
    # The result lives in the pool; memory allocated after the capture does not.
    reserved = _pool_reserved(graph.pool())
    outside = torch.randn(1 << 16, device="openreg")
    assert _pool_reserved(graph.pool()) == reserved
    del outside, y


def test_two_graphs_share_a_pool_and_reuse_each_others_freed_memory(steady_memory_stats):
    x = torch.randn(1 << 16, device="openreg")
    first = openreg.OpenRegGraph()
    # Temporaries (x * 3, then its sin) are freed inside the capture; only the sum stays.
    first, first_out = capture(lambda: (x * 3).sin().sum(), first)
    reserved = _pool_reserved(first.pool())
    second, second_out = capture(lambda: (x * 5).cos().sum(), pool=first.pool())
    assert second.pool() == first.pool()
    assert _pool_reserved(first.pool()) == reserved  # the second fit in the first's freed memory
    x.copy_(torch.linspace(-1, 1, 1 << 16))
    first.replay()
    second.replay()
    cpu_x = torch.linspace(-1, 1, 1 << 16)
    torch.testing.assert_close(first_out.cpu(), (cpu_x * 3).sin().sum())
    torch.testing.assert_close(second_out.cpu(), (cpu_x * 5).cos().sum())


def test_a_graph_pool_handle_and_a_mempool_can_be_shared():
    x = torch.randn(256, device="openreg")
    handle = openreg.graph_pool_handle()
    assert handle != openreg.graph_pool_handle()
    graph, _ = capture(lambda: x + 1, pool=handle)
    assert graph.pool() == handle
    mempool = openreg.MemPool()
    graph_in_mempool, _ = capture(lambda: x + 2, pool=mempool)
    assert graph_in_mempool.pool() == mempool.id


def test_reset_releases_the_pool_memory_stats_back_to_before_capture(steady_memory_stats):
    x = torch.randn(1 << 18, device="openreg")
    warm(lambda: ((x * 2).exp() + 1).sum())
    openreg.empty_cache()
    before = openreg.memory_stats()
    graph, out = capture(lambda: ((x * 2).exp() + 1).sum())
    graph.replay()
    assert openreg.memory_reserved() > before["reserved_bytes.all.current"]
    del out
    graph.reset()
    openreg.synchronize()
    after = openreg.memory_stats()
    for key in ("reserved_bytes.all.current", "allocated_bytes.all.current", "segment.all.current"):
        assert after[key] == before[key], key
    assert (
        graph.pool not in openreg.memory_stats_as_nested_dict()["reserved_bytes_by_private_pools"]
    )


def test_a_reset_graph_can_capture_again():
    x = torch.ones(10, device="openreg")
    graph, _ = capture(lambda: x.add_(1))
    graph.reset()
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        graph.replay()
    x.fill_(0)
    capture(lambda: x.add_(5), graph)
    x.fill_(0)
    graph.replay()
    assert torch.equal(x.cpu(), torch.full((10,), 5.0))


# ---- Streams: fork and join inside a capture ------------------------------------------------


def test_cross_stream_work_is_captured_with_its_dependencies():
    x = torch.randn(5000, device="openreg")
    side = openreg.Stream()

    def fork_join() -> torch.Tensor:
        main = openreg.current_stream()
        a = x * 2
        side.wait_stream(main)  # fork: the side stream joins the capture
        with openreg.stream(side):
            b = (a + 1).sin()
        c = a.cos()
        main.wait_stream(side)  # join
        return b * c

    graph = openreg.OpenRegGraph(keep_graph=True)
    graph, out = capture(fork_join, graph)
    data = graph.get_graph_data()
    streams = {node["stream_id"] for node in data["nodes"]}
    assert side.stream_id in streams and len(streams) == 2
    join = data["nodes"][-1]  # b * c waits for the side stream's last node
    side_nodes = [n["index"] for n in data["nodes"] if n["stream_id"] == side.stream_id]
    assert side_nodes[-1] in join["dependencies"]
    for seed in range(2):
        cpu_x = torch.randn(5000, generator=torch.Generator().manual_seed(seed))
        x.copy_(cpu_x)
        graph.replay()
        torch.testing.assert_close(out.cpu(), ((cpu_x * 2 + 1).sin()) * (cpu_x * 2).cos())


def test_a_fork_that_is_not_joined_raises_at_capture_end():
    x = torch.randn(100, device="openreg")
    side = openreg.Stream()
    warm(lambda: x + 1)
    graph = openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match="not joined back"):
        with openreg.graph(graph):
            side.wait_stream(openreg.current_stream())
            with openreg.stream(side):
                x + 1


def test_waiting_for_work_outside_the_capture_raises():
    x = torch.randn(100, device="openreg")
    warm(lambda: x + 1)
    event = openreg.Event()
    event.record(openreg.default_stream())
    with pytest.raises(RuntimeError, match="outside the capture"):
        with openreg.graph(openreg.OpenRegGraph()):
            openreg.current_stream().wait_event(event)


# ---- What a capture forbids ----------------------------------------------------------------


def _illegal_calls() -> dict[str, Callable[[torch.Tensor], object]]:
    return {
        "item": lambda x: x.sum().item(),
        "cpu": lambda x: x.cpu(),
        "blocking host copy": lambda x: x.copy_(torch.ones(100)),
        "device synchronize": lambda x: openreg.synchronize(),
        "accelerator synchronize": lambda x: torch.accelerator.synchronize(),
        "stream synchronize": lambda x: openreg.current_stream().synchronize(),
        "stream query": lambda x: openreg.current_stream().query(),
        "event query": lambda x: openreg.current_stream().record_event().query(),
        "event synchronize": lambda x: openreg.current_stream().record_event().synchronize(),
        "data-dependent size": lambda x: torch.nonzero(x),
        "rng state": lambda x: openreg.manual_seed(0),
        "empty_cache": lambda x: openreg.empty_cache(),
    }


@pytest.mark.parametrize("name", list(_illegal_calls()))
def test_each_illegal_call_during_capture_raises_naming_the_capture(name):
    call = _illegal_calls()[name]
    x = torch.ones(100, device="openreg")
    warm(lambda: x.sum(), lambda: torch.nonzero(x), lambda: x + 1)
    graph = openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match="captur"):
        with openreg.graph(graph):
            x + 1
            call(x)
    # The capture ended with the error: the device works as before.
    assert not openreg.is_current_stream_capturing()
    assert torch.equal((x + 1).cpu(), torch.full((100,), 2.0))


def test_the_first_call_of_a_signature_asks_for_a_warm_up():
    x = torch.randn(7, 3, device="openreg")  # a shape no other test uses
    with pytest.raises(RuntimeError, match="Warm up before capturing"):
        with openreg.graph(openreg.OpenRegGraph()):
            torch.atan2(x, x + 3)


def test_an_invalidated_capture_cannot_end_and_names_the_first_error():
    x = torch.ones(10, device="openreg")
    warm(lambda: x + 1, lambda: x.sum())
    graph = openreg.OpenRegGraph()
    stream = openreg.Stream()
    with openreg.stream(stream):
        graph.capture_begin()
        try:
            x + 1
            with pytest.raises(RuntimeError, match="is capturing a graph"):
                x.sum().item()
            with pytest.raises(RuntimeError, match=r"invalidated.*item"):
                graph.capture_end()
        finally:
            graph.reset()  # ends the capture if the test failed before capture_end
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        graph.replay()


def test_capturing_on_the_default_stream_is_refused():
    graph = openreg.OpenRegGraph()
    with pytest.raises(RuntimeError, match="non-default stream"):
        graph.capture_begin()


def test_capture_must_end_on_the_stream_it_began_on():
    x = torch.ones(10, device="openreg")
    warm(lambda: x + 1)
    graph = openreg.OpenRegGraph()
    stream = openreg.Stream()
    with openreg.stream(stream):
        graph.capture_begin()
        x + 1
    with pytest.raises(RuntimeError, match="same stream it began on"):
        graph.capture_end()
    with openreg.stream(stream):
        graph.capture_end()
    graph.replay()


def test_a_stream_cannot_capture_twice_and_a_graph_cannot_capture_over_its_graph():
    stream = openreg.Stream()
    first, second = openreg.OpenRegGraph(), openreg.OpenRegGraph()
    with openreg.stream(stream):
        first.capture_begin()
        with pytest.raises(RuntimeError, match="already capturing"):
            second.capture_begin()
        with pytest.warns(UserWarning, match="graph is empty"):
            first.capture_end()
        with pytest.raises(RuntimeError, match="already owns a captured graph"):
            first.capture_begin()


def test_an_empty_capture_warns():
    with pytest.warns(UserWarning, match="graph is empty"):
        with openreg.graph(openreg.OpenRegGraph()):
            pass


def test_invalid_arguments_are_refused_with_the_fix():
    with pytest.raises(ValueError, match="capture_error_mode must be"):
        openreg.graph(openreg.OpenRegGraph(), capture_error_mode="strict")
    with pytest.raises(TypeError, match="pool must be"):
        openreg.graph(openreg.OpenRegGraph(), pool="mine")  # type: ignore[arg-type]
    with pytest.raises(RuntimeError, match="without a preceding successful capture"):
        openreg.OpenRegGraph().pool()


# ---- Capture error modes ---------------------------------------------------------------------


def _in_thread(call: Callable[[], object]) -> BaseException | None:
    """Runs ``call`` on another thread; the exception it raised, if any."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as error:  # handed to the test
            errors.append(error)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return errors[0] if errors else None


def _error_of(call: Callable[[], object]) -> RuntimeError | None:
    try:
        call()
    except RuntimeError as error:
        return error
    return None


@pytest.mark.parametrize(
    "mode, other_thread_may, this_thread_may",
    [("global", False, False), ("thread_local", True, False), ("relaxed", True, True)],
)
def test_capture_error_modes_decide_who_may_wait_for_other_streams(
    mode, other_thread_may, this_thread_may
):
    x = torch.ones(10, device="openreg")
    warm(lambda: x + 1)
    other = openreg.Stream()  # not capturing: waiting for it is "potentially unsafe"
    graph = openreg.OpenRegGraph()
    with openreg.stream(openreg.Stream()):
        graph.capture_begin(capture_error_mode=mode)
        try:
            x + 1
            error_there = _in_thread(other.synchronize)
            error_here = _error_of(other.synchronize)
        finally:
            graph.reset()  # ends the capture, valid or not
    assert (error_there is None) == other_thread_may, error_there
    assert (error_here is None) == this_thread_may, error_here
    for error in (error_there, error_here):
        if error is not None:
            assert f'capture_error_mode="{mode}"' in str(error)


def test_waiting_for_the_capturing_stream_is_refused_in_every_mode():
    x = torch.ones(10, device="openreg")
    warm(lambda: x + 1)
    with pytest.raises(RuntimeError, match="operation not permitted when stream is capturing"):
        with openreg.graph(openreg.OpenRegGraph(), capture_error_mode="relaxed"):
            x + 1
            openreg.current_stream().synchronize()


# ---- torch.accelerator.Graph ------------------------------------------------------------------


def test_torch_accelerator_graph_captures_and_replays_on_openreg():
    x = torch.zeros(2000, device="openreg")
    warm(lambda: x.add_(1))
    x.zero_()
    stream = torch.Stream()
    graph = torch.accelerator.Graph()
    with stream, graph:
        x += 1
    assert torch.equal(x.cpu(), torch.zeros(2000))
    graph.replay()
    graph.replay()
    assert torch.equal(x.cpu(), torch.full((2000,), 2.0))


def test_torch_accelerator_graph_keep_graph_explicit_instantiate_and_shared_pool(tmp_path):
    x = torch.ones(100, device="openreg")
    warm(lambda: x * 3, lambda: x * 4)
    stream = torch.Stream()
    first = torch.accelerator.Graph(keep_graph=True)
    with stream, first:
        y = x * 3
    first.instantiate()
    first.replay()
    second = torch.accelerator.Graph(pool=first.pool())
    with stream, second:
        z = x * 4
    second.replay()
    assert second.pool() == first.pool()
    assert torch.equal(y.cpu(), torch.full((100,), 3.0))
    assert torch.equal(z.cpu(), torch.full((100,), 4.0))
    first.debug_dump(str(tmp_path / "first.dot"))
    dot = (tmp_path / "first.dot").read_text()
    assert dot.startswith("digraph") and "aten::mul.Tensor" in dot


def test_torch_accelerator_graph_reports_an_illegal_call_at_capture_end():
    x = torch.ones(100, device="openreg")
    warm(lambda: x.sum())
    stream = torch.Stream()
    graph = torch.accelerator.Graph()
    # torch's context manager calls capture_end even when the block raised.
    with pytest.raises(RuntimeError, match="item"):
        with stream, graph:
            x.sum().item()


# ---- Debugging: dumps, data, hooks, the race detector ------------------------------------------


def test_debug_dump_needs_a_kept_graph_and_writes_dot(tmp_path):
    x = torch.ones(10, device="openreg")
    graph, _ = capture(lambda: (x + 1) * 2)
    with pytest.warns(UserWarning, match="debug not enabled"):
        graph.debug_dump(str(tmp_path / "none.dot"))
    assert not (tmp_path / "none.dot").exists()
    graph.enable_debug_mode()
    graph.debug_dump(str(tmp_path / "g.dot"))
    text = (tmp_path / "g.dot").read_text()
    assert "aten::add.Tensor" in text and "aten::mul.Tensor" in text and "n0 -> n1" in text


def test_export_hooks_write_the_graph(tmp_path):
    x = torch.ones(10, device="openreg")
    graph = openreg.OpenRegGraph()
    graph.register_capture_end_hook(openreg.graphs.export_dot(str(tmp_path / "g.dot")))
    graph.register_post_instantiate_hook(
        openreg.graphs.export_graph_data(str(tmp_path / "g.pickle"))
    )
    seen: list[int] = []
    handle = openreg.graphs.register_graph_replay_start_hook(lambda g: seen.append(g.graph_id))
    destroyed: list[set[int]] = []
    destroy = openreg.graphs.register_graph_destroy_hook(destroyed.append)
    try:
        capture(lambda: x - 1, graph)
        graph.replay()
        graph.reset()
    finally:
        handle.remove()
        destroy.remove()
    assert "aten::sub.Tensor" in (tmp_path / "g.dot").read_text()
    data = pickle.loads((tmp_path / "g.pickle").read_bytes())
    assert [node["name"] for node in data["nodes"]] == ["aten::sub.Tensor"]
    assert seen == [graph.graph_id] and destroyed == [{graph.graph_id}]


def test_lifecycle_hooks_fire_in_order_and_a_global_hooks_error_is_contained():
    x = torch.ones(10, device="openreg")
    warm(lambda: x - 1)
    events: list[tuple[str, str, bool]] = []
    names = ("capture_start", "capture_end", "instantiate", "replay_start", "replay_end")

    def failing(graph: openreg.OpenRegGraph) -> None:
        raise ValueError("a consumer's bug")

    handles = [openreg.graphs.register_graph_replay_start_hook(failing)]
    for name in names:
        register = getattr(openreg.graphs, f"register_graph_{name}_hook")
        handles.append(
            register(
                lambda g, n=name: events.append(
                    ("global", n, openreg.is_current_stream_capturing())
                )
            )
        )
    graph = openreg.OpenRegGraph(keep_graph=True)  # instantiated by the first replay
    for name in names:
        method = "post_instantiate" if name == "instantiate" else name
        getattr(graph, f"register_{method}_hook")(
            lambda g, n=name: events.append(("own", n, openreg.is_current_stream_capturing()))
        )
    try:
        with openreg.graph(graph):
            x - 1
        graph.replay()
        graph.replay()
    finally:
        for handle in handles:
            handle.remove()
    once = [(who, name) for name in names[:3] for who in ("global", "own")]
    replay = [(who, name) for name in names[3:] for who in ("global", "own")]
    assert [(who, name) for who, name, _ in events] == once + replay + replay
    # The capture-start hooks run while the stream captures already.
    assert [capturing for _, name, capturing in events if name == "capture_start"] == [True, True]
    graph.register_replay_start_hook(failing)  # a graph's own hooks are its owner's: raises
    with pytest.raises(ValueError, match="a consumer's bug"):
        graph.replay()


def test_is_current_stream_capturing():
    x = torch.ones(1, device="openreg")
    warm(lambda: x.add_(1))
    assert not openreg.is_current_stream_capturing()
    with openreg.graph(openreg.OpenRegGraph()):
        assert openreg.is_current_stream_capturing()
        x.add_(1)
    assert not openreg.is_current_stream_capturing()


def test_the_race_detector_checks_the_operators_of_a_replay():
    debug = openreg.debug
    static_x = torch.ones(1000, device="openreg")
    graph, static_y = capture(lambda: static_x * 2)
    side = openreg.Stream()
    with debug.enabled("races", races="error"):
        side.wait_stream(openreg.current_stream())
        with openreg.stream(side):
            static_x.fill_(3.0)  # written on the side stream...
        with pytest.raises(RuntimeError, match=r"(?s)stream race.*aten::mul\.Tensor"):
            graph.replay()  # ...and read by the replay without waiting for it
        openreg.current_stream().wait_stream(side)
        graph.replay()  # the fix
        assert torch.equal(static_y.cpu(), torch.full((1000,), 6.0))
        assert debug.race_report_count() == 1
        debug.clear_race_reports()  # reported on purpose: not for the summary at exit


# ---- make_graphed_callables ----------------------------------------------------------------------


def _train_graphed(
    module: nn.Module, cpu_module: nn.Module, graphed: Callable[..., torch.Tensor]
) -> None:
    optimizer = torch.optim.SGD(module.parameters(), lr=0.1)
    cpu_optimizer = torch.optim.SGD(cpu_module.parameters(), lr=0.1)
    for seed in range(3):
        generator = torch.Generator().manual_seed(seed)
        x, target = torch.randn(8, 16, generator=generator), torch.randn(8, 4, generator=generator)
        for model, opt, data, goal in (
            (graphed, optimizer, x.to("openreg"), target.to("openreg")),
            (cpu_module, cpu_optimizer, x, target),
        ):
            opt.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(data), goal).backward()
            opt.step()
    for parameter, cpu_parameter in zip(module.parameters(), cpu_module.parameters(), strict=True):
        torch.testing.assert_close(parameter.detach().cpu(), cpu_parameter.detach())


def test_make_graphed_callables_graphs_a_module_forward_and_backward():
    cpu_module = mlp()
    module = copy.deepcopy(cpu_module).to("openreg")
    sample = torch.randn(8, 16, device="openreg")
    graphed = openreg.make_graphed_callables(module, (sample,))
    assert graphed is module
    _train_graphed(module, cpu_module, graphed)
    module.eval()  # another training state runs the original forward
    x = torch.randn(8, 16)
    torch.testing.assert_close(module(x.to("openreg")).detach().cpu(), cpu_module.eval()(x))


def test_make_graphed_callables_graphs_a_tuple_of_modules_in_one_pool():
    torch.manual_seed(1)
    cpu_first, cpu_second = nn.Sequential(nn.Linear(16, 32), nn.ReLU()), nn.Linear(32, 4)
    first, second = copy.deepcopy(cpu_first).to("openreg"), copy.deepcopy(cpu_second).to("openreg")
    sample_first = torch.randn(8, 16, device="openreg", requires_grad=False)
    sample_second = torch.randn(8, 32, device="openreg", requires_grad=True)
    graphed_first, graphed_second = openreg.make_graphed_callables(
        (first, second), ((sample_first,), (sample_second,))
    )
    _train_graphed(
        nn.Sequential(first, second),
        nn.Sequential(cpu_first, cpu_second),
        lambda x: graphed_second(graphed_first(x)),
    )


def test_make_graphed_callables_graphs_a_function():
    weight = torch.randn(16, 4, device="openreg", requires_grad=True)
    cpu_weight = weight.detach().cpu().requires_grad_()

    def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x @ w)

    graphed = openreg.make_graphed_callables(
        project, (torch.randn(8, 16, device="openreg"), weight)
    )
    x = torch.randn(8, 16)
    graphed(x.to("openreg"), weight).sum().backward()
    project(x, cpu_weight).sum().backward()
    torch.testing.assert_close(weight.grad.cpu(), cpu_weight.grad)


def test_make_graphed_callables_refuses_what_it_cannot_graph():
    module = nn.Linear(4, 4).to("openreg")
    module.register_forward_hook(lambda *args: None)
    with pytest.raises(RuntimeError, match="hooks"):
        openreg.make_graphed_callables(module, (torch.randn(2, 4, device="openreg"),))
    with pytest.raises(ValueError, match="2 callables but 1"):
        openreg.make_graphed_callables((module, module), ((torch.randn(2, 4),),))
    with pytest.raises(ValueError, match="openreg tensors"):
        openreg.make_graphed_callables(nn.Linear(4, 4).to("openreg"), (torch.randn(2, 4),))


# ---- Memory limits, torch.compile, exit ------------------------------------------------------


def test_running_out_of_memory_during_capture_raises_naming_the_capture():
    x = torch.ones(10, device="openreg")
    warm(lambda: x + 1)
    total = openreg.mem_get_info()[1]
    # Room for 64 MiB more than is reserved now; the capture then asks for 256 MiB.
    openreg.set_per_process_memory_fraction((openreg.memory_reserved() + (64 << 20)) / total)
    try:
        with pytest.raises(torch.OutOfMemoryError, match="while a graph is being captured"):
            with openreg.graph(openreg.OpenRegGraph()):
                x + 1
                torch.empty(256 << 20, dtype=torch.uint8, device="openreg")
    finally:
        openreg.set_per_process_memory_fraction(1.0)


def test_compile_reduce_overhead_falls_back_as_on_the_cpu():
    from torch._dynamo.utils import counters

    skips = {}
    for device in ("cpu", "openreg"):
        torch._dynamo.reset()
        counters.clear()
        torch.manual_seed(0)
        model = nn.Linear(16, 4).to(device)
        compiled = torch.compile(model, mode="reduce-overhead")
        x = torch.randn(8, 16).to(device)
        for _ in range(2):
            out = compiled(x)
        torch.testing.assert_close(out.detach().cpu(), model(x).detach().cpu())
        skips[device] = counters["inductor"]["cudagraph_skips"]
    torch._dynamo.reset()
    # Inductor skips CUDA graphs for both devices (openreg is not in its fixed device list).
    assert skips == {"cpu": 1, "openreg": 1}


@pytest.mark.child_interpreters
def test_exiting_during_a_capture_discards_it_with_a_note(run_python):
    result = run_python(
        """
        import torch
        import torch_openreg
        x = torch.ones(10, device="openreg")
        x + 1  # warm-up
        graph = torch.openreg.OpenRegGraph()
        with torch.openreg.stream(torch.openreg.Stream()):
            graph.capture_begin()
            x + 1
        print("exiting", flush=True)
        """
    )
    # The exit path ends the capture before it synchronizes: no error is pending.
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exiting"
    assert "a graph capture begun on stream 1 of openreg:0 was still underway" in result.stderr
    assert "pending" not in result.stderr
