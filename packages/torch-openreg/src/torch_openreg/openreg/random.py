"""Random number generator state of openreg devices (mirrors torch.cuda.random).

Each device has a default generator (``torch.openreg.default_generators``).
Its engine is the CPU's (mt19937), so the same seed gives the same numbers on
openreg as on the CPU.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from .. import _C
from ._utils import DeviceLike, _get_device_index


def _generator(device: DeviceLike = "openreg") -> torch.Generator:
    index = _get_device_index(device, optional=True)
    return _C._get_default_generator(index)


def _all_generators() -> list[torch.Generator]:
    return [_C._get_default_generator(i) for i in range(_C._device_count())]


def get_rng_state(device: DeviceLike = "openreg") -> torch.Tensor:
    """The RNG state of ``device`` as a ByteTensor."""
    return _generator(device).get_state()


def get_rng_state_all() -> list[torch.Tensor]:
    """The RNG states of all devices."""
    return [generator.get_state() for generator in _all_generators()]


def set_rng_state(new_state: torch.Tensor, device: DeviceLike = "openreg") -> None:
    """Set the RNG state of ``device``."""
    _generator(device).set_state(new_state.clone(memory_format=torch.contiguous_format))


def set_rng_state_all(new_states: Iterable[torch.Tensor]) -> None:
    """Set the RNG states of all devices, in device order."""
    for index, state in enumerate(new_states):
        set_rng_state(state, index)


def manual_seed(seed: int) -> None:
    """Seed the current device's generator."""
    _generator().manual_seed(int(seed))


def manual_seed_all(seed: int) -> None:
    """Seed every device's generator."""
    for generator in _all_generators():
        generator.manual_seed(int(seed))


def seed() -> None:
    """Seed the current device's generator with a random number."""
    _generator().seed()


def seed_all() -> None:
    """Seed every device's generator with one random number."""
    generators = _all_generators()
    if not generators:
        return
    random_seed = generators[0].seed()
    for generator in generators[1:]:
        generator.manual_seed(random_seed)


def initial_seed() -> int:
    """The current device's initial seed."""
    return _generator().initial_seed()


__all__ = [
    "get_rng_state",
    "get_rng_state_all",
    "initial_seed",
    "manual_seed",
    "manual_seed_all",
    "seed",
    "seed_all",
    "set_rng_state",
    "set_rng_state_all",
]
