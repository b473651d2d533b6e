"""Random number generation on openreg: seeding, state, generators.

An openreg generator's engine is the CPU's (mt19937), so the same seed gives
the same numbers as on the CPU: random ops are checked exactly against the CPU.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

RANDOM_OPS = {
    "rand": lambda device, **kw: torch.rand(50, device=device, **kw),
    "randn": lambda device, **kw: torch.randn(7, 9, device=device, **kw),
    "randn_float64": lambda device, **kw: torch.randn(33, dtype=torch.float64, device=device, **kw),
    "randint": lambda device, **kw: torch.randint(-10, 10, (40,), device=device, **kw),
    "normal_": lambda device, **kw: torch.empty(30, device=device).normal_(2.0, 3.0, **kw),
    "normal": lambda device, **kw: torch.normal(
        torch.zeros(20, device=device), torch.ones(20, device=device), **kw
    ),
    "uniform_": lambda device, **kw: torch.empty(30, device=device).uniform_(-5, 5, **kw),
    "bernoulli": lambda device, **kw: torch.bernoulli(
        torch.linspace(0, 1, 40, device=device), **kw
    ),
    "bernoulli_p": lambda device, **kw: torch.empty(40, device=device).bernoulli_(0.3, **kw),
    "randperm": lambda device, **kw: torch.randperm(25, device=device, **kw),
    "multinomial": lambda device, **kw: torch.multinomial(
        torch.arange(1.0, 11.0, device=device), 6, **kw
    ),
    "multinomial_replacement": lambda device, **kw: torch.multinomial(
        torch.arange(1.0, 5.0, device=device), 20, replacement=True, **kw
    ),
    "exponential_": lambda device, **kw: torch.empty(20, device=device).exponential_(**kw),
    "random_": lambda device, **kw: torch.empty(20, dtype=torch.int64, device=device).random_(
        0, 1000, **kw
    ),
}

NO_GENERATOR_ARGUMENT = {"randn_float64"}


def assert_same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    assert actual.device.type == "openreg"
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


@pytest.mark.parametrize("name", list(RANDOM_OPS))
@pytest.mark.parametrize("device", ["openreg:0", "openreg:1"])
def test_torch_manual_seed_matches_cpu(name, device):
    op = RANDOM_OPS[name]
    torch.manual_seed(2024)
    expected = op("cpu")
    torch.manual_seed(2024)
    actual = op(device)
    assert actual.device == torch.device(device)
    assert_same(actual, expected)


@pytest.mark.parametrize("name", list(RANDOM_OPS))
def test_openreg_manual_seed_repeats(name):
    op = RANDOM_OPS[name]
    torch.openreg.manual_seed(7)
    first = op("openreg").cpu()
    second = op("openreg").cpu()
    torch.openreg.manual_seed(7)
    again = op("openreg")
    assert_same(again, first)
    if name not in ("bernoulli",):  # bernoulli of linspace(0, 1) is mostly deterministic
        assert not torch.equal(first, second)


def test_dropout_in_train_mode_matches_cpu():
    torch.manual_seed(11)
    expected = F.dropout(torch.ones(200), p=0.4, training=True)
    torch.manual_seed(11)
    actual = F.dropout(torch.ones(200, device="openreg"), p=0.4, training=True)
    assert_same(actual, expected)
    zeros = int((expected == 0).sum())
    assert 0 < zeros < 200


def test_dropout_module_train_and_eval():
    module = torch.nn.Dropout(0.5).openreg()
    data = torch.ones(100, device="openreg")
    torch.manual_seed(3)
    trained = module(data)
    torch.manual_seed(3)
    trained_again = module(data)
    assert_same(trained, trained_again.cpu())
    assert (trained.cpu() == 0).any()
    module.eval()
    assert_same(module(data), torch.ones(100))


def test_torch_manual_seed_seeds_every_device():
    torch.manual_seed(99)
    assert [g.initial_seed() for g in torch.openreg.default_generators] == [99, 99]
    torch.manual_seed(100)
    assert torch.openreg.initial_seed() == 100


def test_openreg_manual_seed_seeds_current_device_only():
    torch.openreg.manual_seed_all(5)
    with torch.openreg.device(1):
        torch.openreg.manual_seed(6)
    assert torch.openreg.default_generators[0].initial_seed() == 5
    assert torch.openreg.default_generators[1].initial_seed() == 6


def test_manual_seed_all():
    torch.openreg.manual_seed_all(123)
    values = [torch.rand(8, device=f"openreg:{i}").cpu() for i in range(2)]
    torch.manual_seed(123)
    expected = torch.rand(8)
    for value in values:
        torch.testing.assert_close(value, expected, rtol=0, atol=0)


def test_initial_seed():
    torch.openreg.manual_seed(4242)
    assert torch.openreg.initial_seed() == 4242
    torch.rand(3, device="openreg")
    assert torch.openreg.initial_seed() == 4242


def test_seed_sets_fresh_random_seed():
    torch.openreg.manual_seed(1)
    torch.openreg.seed()
    first = torch.openreg.initial_seed()
    torch.openreg.seed()
    second = torch.openreg.initial_seed()
    assert first != 1
    assert first != second


def test_seed_all_gives_every_device_the_same_seed():
    torch.openreg.seed_all()
    seeds = [g.initial_seed() for g in torch.openreg.default_generators]
    assert seeds[0] == seeds[1]
    torch.openreg.seed_all()
    assert torch.openreg.default_generators[0].initial_seed() != seeds[0]


def test_default_generators():
    generators = torch.openreg.default_generators
    assert len(generators) == torch.openreg.device_count()
    assert [g.device for g in generators] == [torch.device("openreg:0"), torch.device("openreg:1")]
    assert all(isinstance(g, torch.Generator) for g in generators)
    # The same objects every time (the process-wide default generators).
    generators[0].manual_seed(31)
    assert torch.openreg.default_generators[0].initial_seed() == 31


def test_default_generator_drives_ops():
    torch.openreg.default_generators[1].manual_seed(55)
    actual = torch.randn(10, device="openreg:1")
    expected = torch.randn(10, generator=torch.Generator().manual_seed(55))
    assert_same(actual, expected)


def test_get_rng_state_is_cpu_byte_tensor():
    state = torch.openreg.get_rng_state()
    assert state.dtype == torch.uint8
    assert state.device == torch.device("cpu")
    assert state.shape == torch.get_rng_state().shape


def test_restoring_state_replays_sequence():
    torch.openreg.manual_seed(8)
    torch.rand(5, device="openreg")
    state = torch.openreg.get_rng_state()
    first = torch.randn(20, device="openreg").cpu()
    torch.randn(20, device="openreg")
    torch.openreg.set_rng_state(state)
    replay = torch.randn(20, device="openreg")
    assert_same(replay, first)


def test_rng_state_is_per_device():
    torch.openreg.manual_seed_all(1)
    state1 = torch.openreg.get_rng_state(1)
    expected = torch.rand(10, device="openreg:1").cpu()
    torch.openreg.set_rng_state(torch.openreg.get_rng_state(0), 0)
    torch.rand(100, device="openreg:0")
    torch.openreg.set_rng_state(state1, "openreg:1")
    assert_same(torch.rand(10, device="openreg:1"), expected)


def test_rng_state_all_round_trip():
    torch.openreg.manual_seed_all(21)
    torch.rand(3, device="openreg:1")
    states = torch.openreg.get_rng_state_all()
    assert len(states) == 2
    first = [torch.rand(6, device=f"openreg:{i}").cpu() for i in range(2)]
    assert not torch.equal(first[0], first[1])  # device 1 advanced before the snapshot
    torch.openreg.set_rng_state_all(states)
    for i in range(2):
        assert_same(torch.rand(6, device=f"openreg:{i}"), first[i])


def test_set_rng_state_copies_state():
    torch.openreg.manual_seed(13)
    state = torch.openreg.get_rng_state()
    snapshot = state.clone()
    torch.openreg.set_rng_state(state)
    torch.rand(50, device="openreg")
    assert torch.equal(state, snapshot)


def test_fork_rng_restores_openreg_state():
    torch.openreg.manual_seed(17)
    expected = torch.rand(5, device="openreg").cpu()
    torch.openreg.manual_seed(17)
    with torch.random.fork_rng(devices=[0], device_type="openreg"):
        torch.rand(100, device="openreg")
    assert_same(torch.rand(5, device="openreg"), expected)


def test_devices_have_independent_generators():
    torch.openreg.manual_seed_all(1)
    expected0 = torch.rand(5, device="openreg:0").cpu()
    torch.openreg.manual_seed_all(1)
    torch.rand(1000, device="openreg:1")  # drawing on device 1 ...
    assert_same(torch.rand(5, device="openreg:0"), expected0)  # ... leaves device 0 alone


def test_reseeding_one_device_leaves_the_other():
    torch.openreg.manual_seed_all(1)
    torch.rand(5, device="openreg:0")
    state0 = torch.openreg.get_rng_state(0)
    with torch.openreg.device(1):
        torch.openreg.manual_seed(999)
    assert torch.openreg.default_generators[1].initial_seed() == 999
    assert torch.equal(torch.openreg.get_rng_state(0), state0)


def test_openreg_generators_do_not_touch_cpu_generator():
    torch.manual_seed(5)
    expected = torch.rand(5)
    torch.manual_seed(5)
    torch.rand(100, device="openreg")
    torch.testing.assert_close(torch.rand(5), expected, rtol=0, atol=0)


# --- explicit generators -------------------------------------------------------------


@pytest.mark.parametrize("device", ["openreg", "openreg:1"])
def test_explicit_generator_device(device):
    generator = torch.Generator(device=device)
    assert generator.device == torch.device(device if ":" in device else "openreg:0")


@pytest.mark.parametrize("name", [n for n in RANDOM_OPS if n not in NO_GENERATOR_ARGUMENT])
def test_explicit_generator_matches_cpu_generator(name):
    op = RANDOM_OPS[name]
    expected = op("cpu", generator=torch.Generator().manual_seed(77))
    generator = torch.Generator(device="openreg").manual_seed(77)
    actual = op("openreg", generator=generator)
    assert_same(actual, expected)


def test_explicit_generator_does_not_advance_default():
    torch.openreg.manual_seed(3)
    expected = torch.rand(5, device="openreg").cpu()
    torch.openreg.manual_seed(3)
    generator = torch.Generator(device="openreg").manual_seed(3)
    torch.rand(100, device="openreg", generator=generator)
    assert_same(torch.rand(5, device="openreg"), expected)


def test_explicit_generator_state_round_trip():
    generator = torch.Generator(device="openreg:1").manual_seed(4)
    state = generator.get_state()
    first = torch.randn(10, device="openreg:1", generator=generator).cpu()
    generator.set_state(state)
    assert_same(torch.randn(10, device="openreg:1", generator=generator), first)
    assert generator.initial_seed() == 4


def test_explicit_generator_clone_state():
    generator = torch.Generator(device="openreg").manual_seed(12)
    clone = generator.clone_state()
    assert clone.device == generator.device
    assert_same(
        torch.rand(5, device="openreg", generator=clone),
        torch.rand(5, device="openreg", generator=generator).cpu(),
    )


def test_cpu_generator_rejected_for_openreg_op():
    # CUDA: "Expected a 'cuda' device type for generator but found 'cpu'".
    # Silently drawing from the CPU generator would hide a real bug in device code.
    with pytest.raises(RuntimeError, match="generator"):
        torch.rand(3, device="openreg", generator=torch.Generator())


def test_openreg_generator_rejected_for_cpu_op():
    with pytest.raises(RuntimeError, match="generator"):
        torch.rand(3, generator=torch.Generator(device="openreg"))
