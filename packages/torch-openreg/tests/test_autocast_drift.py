"""Drift guard: openreg's autocast policy is CUDA's, for the installed torch.

openreg expands PyTorch's shared autocast lists and adds what CUDA registers
outside them (csrc/integration/autocast.cpp). A new torch may add, drop or move
an operator in either place; these tests read CUDA's policy out of the
installed torch (``_autocast_probe``: the dispatcher's AutocastCUDA
registrations, observed on fake CUDA tensors) and fail on any difference,
naming the operator and what changed.
"""

from __future__ import annotations

import pytest
import torch
from _autocast_probe import (
    Observation,
    autocast_operators,
    classify,
    interception,
    observe,
    observe_all,
    policy_differences,
    registration_site,
)

import torch_openreg

AUTOCAST_SOURCE = "aten/src/ATen/autocast_mode.cpp"
# AutocastCUDA kernels that torch registers outside autocast_mode.cpp, in CUDA
# library code, and that openreg deliberately does not mirror:
# _cudnn_rnn is cuDNN's fused RNN entry point; its autocast kernel also packs
# the weights into cuDNN's flat buffer. Only CUDA tensors with cuDNN reach it;
# openreg RNNs run through the cell operators (_thnn_fused_lstm_cell, lstm_cell,
# ...), which are in the lower_precision_fp list like on CUDA.
CUDA_LIBRARY_ONLY = {"aten::_cudnn_rnn"}

Observations = dict[str, dict[tuple[torch.dtype, str], Observation]]


def cuda_policy_operators() -> set[str]:
    return {
        name
        for name in autocast_operators("cuda")
        if registration_site(name, "cuda").endswith(AUTOCAST_SOURCE)
    }


@pytest.fixture(scope="module")
def cuda_observations() -> Observations:
    return observe_all(cuda_policy_operators(), "cuda")


@pytest.fixture(scope="module")
def openreg_observations() -> Observations:
    return observe_all(autocast_operators("openreg"), "openreg")


def declared_policy() -> dict[str, str]:
    return dict(torch_openreg._C._autocast_policy())


def test_cuda_kernels_outside_the_autocast_source_are_known() -> None:
    elsewhere = {
        name: registration_site(name, "cuda")
        for name in autocast_operators("cuda")
        if not registration_site(name, "cuda").endswith(AUTOCAST_SOURCE)
    }
    assert set(elsewhere) <= CUDA_LIBRARY_ONLY, (
        f"torch registers new CUDA autocast kernels outside {AUTOCAST_SOURCE}: {elsewhere}; "
        "decide whether openreg mirrors them (csrc/integration/autocast.cpp) or list them "
        "in CUDA_LIBRARY_ONLY with the reason"
    )


def test_the_probe_sees_cuda_policy() -> None:
    # The probe must find the policy on CUDA at all (a probe that sees nothing
    # would make the comparison vacuous): mm, exp and addcmul are in torch's lists.
    operators = {"aten::mm", "aten::exp", "aten::addcmul", "aten::binary_cross_entropy"}
    assert operators <= cuda_policy_operators()
    observed = observe_all(operators, "cuda")
    assert classify(observed["aten::mm"], "aten::mm") == "lower_precision_fp"
    assert classify(observed["aten::exp"], "aten::exp") == "fp32"
    assert classify(observed["aten::addcmul"], "aten::addcmul") == "promote"
    assert classify(observed["aten::binary_cross_entropy"], "") == "banned"


def test_openreg_has_a_rule_for_exactly_cudas_operators() -> None:
    cuda = cuda_policy_operators()
    openreg = autocast_operators("openreg")
    assert not cuda - openreg, f"CUDA autocasts these, openreg does not: {sorted(cuda - openreg)}"
    assert not openreg - cuda, f"openreg autocasts these, CUDA does not: {sorted(openreg - cuda)}"


def test_declared_table_is_what_the_dispatcher_has() -> None:
    table = torch_openreg._C._autocast_policy()
    names = [name for name, _ in table]
    assert len(names) == len(set(names)), "an operator is registered twice"
    assert set(names) == autocast_operators("openreg")


def test_openreg_policy_equals_cuda_policy(
    cuda_observations: Observations, openreg_observations: Observations
) -> None:
    differences = policy_differences(cuda_observations, openreg_observations, declared_policy())
    assert not differences, "openreg's autocast differs from CUDA's:\n" + "\n".join(differences)
    categories = {classify(cuda_observations[name], name) for name in cuda_observations}
    assert categories == {
        "lower_precision_fp",
        "fp32",
        "fp32_set_opt_dtype",
        "fp32_append_dtype",
        "promote",
        "banned",
    }


def _passthrough(op: torch._ops.OpOverload, key: str):
    keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def kernel(*args: object, **kwargs: object) -> object:
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return op(*args, **kwargs)

    return kernel


def _casting_to_float(op: torch._ops.OpOverload, key: str):
    keys = torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key))

    def kernel(x: torch.Tensor) -> torch.Tensor:
        with torch._C._ExcludeDispatchKeyGuard(keys):
            return op(x.float())

    return kernel


def test_the_guard_fails_when_torch_moves_or_adds_an_operator(
    cuda_observations: Observations, openreg_observations: Observations
) -> None:
    """Simulated drift: openreg's exp loses its rule; CUDA gains a rule for tanh."""
    library = torch.library.Library("aten", "IMPL")
    try:
        exp = torch.ops.aten.exp.default
        library.impl("exp", _passthrough(exp, "AutocastPrivateUse1"), "AutocastPrivateUse1")
        tanh = torch.ops.aten.tanh.default
        library.impl("tanh", _casting_to_float(tanh, "AutocastCUDA"), "AutocastCUDA")

        cuda = dict(cuda_observations)
        with interception({"aten::tanh"}, "cuda"):
            cuda["aten::tanh"] = {
                case: observe("aten::tanh", "cuda", *case)
                for case in cuda_observations["aten::exp"]
            }
        openreg = dict(openreg_observations)
        openreg.update(observe_all({"aten::exp"}, "openreg"))
    finally:
        library._destroy()

    differences = "\n".join(policy_differences(cuda, openreg, declared_policy()))
    assert "aten::tanh: CUDA autocasts it (fp32), openreg has no rule" in differences
    assert "aten::exp with torch.float16, inputs all_lower: CUDA passes on" in differences
    # Once the simulation is gone, openreg matches again.
    assert observe_all({"aten::exp"}, "openreg") == {"aten::exp": openreg_observations["aten::exp"]}
