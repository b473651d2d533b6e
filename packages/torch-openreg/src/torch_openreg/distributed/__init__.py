"""torch.distributed on openreg tensors: the ``orgloo`` c10d backend.

``import torch_openreg`` (or ``import torch`` with the autoload shim) registers
the backend ``orgloo`` for the ``openreg`` device (and for the CPU, which it
hands to Gloo unchanged), so all of these work::

    dist.init_process_group("cpu:gloo,openreg:orgloo")
    dist.init_process_group(device_id=torch.device("openreg", local_rank))
    dist.init_process_group()            # the default backend of the openreg accelerator

Collectives run on torch's ``ProcessGroupGloo`` over CPU aliases of the device
memory (no copies), in CUDA's stream order; see docs/distributed.md. Gloo's
environment applies as it is (``GLOO_SOCKET_IFNAME`` picks the network
interface on multi-homed hosts).

Registration costs a few dictionary updates: ``import torch`` has already
imported ``torch.distributed``, and the Gloo process group is only created when a
group is.
"""

from __future__ import annotations

from typing import Any

import torch

from .. import _C

BACKEND_NAME: str = _C._process_group_backend_name
_DEVICES = ["openreg", "cpu"]


def is_available() -> bool:
    """True if this torch has torch.distributed with Gloo, which the backend runs on."""
    return torch.distributed.is_available() and torch.distributed.is_gloo_available()


def register() -> None:
    """Register the ``orgloo`` backend with torch.distributed (idempotent).

    Does nothing on a torch built without distributed support or without Gloo.
    """
    if not is_available():
        return
    from torch.distributed import Backend

    if BACKEND_NAME.upper() in Backend._plugins:
        return
    Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=_DEVICES)


def _bound_device_index(options: Any) -> int | None:
    """The openreg device the new group is bound to (``device_id=``), if any."""
    group = getattr(options, "process_group", None)
    bound = getattr(group, "bound_device_id", None) if group is not None else None
    if bound is not None and bound.type == "openreg":
        return bound.index
    return None


def _create_backend(options: Any, backend_options: object | None) -> Any:
    """torch.distributed's creator (extended API): a ProcessGroupGloo wrapped for openreg."""
    from torch.distributed import ProcessGroupGloo

    if backend_options is not None:
        raise ValueError(
            f"the {BACKEND_NAME} backend takes no pg_options (got {backend_options!r}); "
            "configure Gloo through its environment variables (GLOO_SOCKET_IFNAME, ...) instead"
        )
    gloo = ProcessGroupGloo(
        options.store, options.group_rank, options.group_size, timeout=options.timeout
    )
    gloo.options.global_ranks_in_group = options.global_ranks_in_group
    gloo.options.group_name = options.group_id
    return _C._create_process_group(
        gloo,
        options.group_rank,
        options.group_size,
        _bound_device_index(options),
        options.timeout,
    )


__all__ = ["BACKEND_NAME", "is_available", "register"]
