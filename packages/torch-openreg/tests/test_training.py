"""End-to-end training on openreg, checked against the same training on the CPU.

Every run starts from identical weights (a deep copy of one CPU model) and sees
identical batches; per-step losses and final parameters are compared.

Every comparison is bit-exact: every operator runs the CPU kernel on the same
bytes — including ``scaled_dot_product_attention``, which picks the CPU's backend
(its flash kernel) on openreg too (``csrc/kernels/attention.cpp``), and the fused
``native_layer_norm`` (``preferCpuKernels`` in ``csrc/engine/fallback.cpp``).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable

import pytest
import torch
import torch.nn.functional as F
from torch import nn

OptimizerFactory = Callable[[Iterable[torch.Tensor]], torch.optim.Optimizer]
Batch = tuple[torch.Tensor, torch.Tensor]

EXACT = {"rtol": 0.0, "atol": 0.0}


def make_mlp(dropout: float = 0.0) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(dropout), nn.Linear(64, 10))


def mlp_batches(steps: int = 5) -> list[Batch]:
    generator = torch.Generator().manual_seed(1)
    return [
        (torch.randn(16, 32, generator=generator), torch.randint(0, 10, (16,), generator=generator))
        for _ in range(steps)
    ]


class TransformerClassifier(nn.Module):
    def __init__(self, dropout: float = 0.0, enable_nested_tensor: bool = False) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(
            d_model=32, nhead=4, dim_feedforward=64, dropout=dropout, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(
            layer, num_layers=2, enable_nested_tensor=enable_nested_tensor
        )
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor, padding_mask: torch.Tensor | None = None) -> torch.Tensor:
        encoded = self.encoder(x, src_key_padding_mask=padding_mask)
        return self.head(encoded.mean(dim=1))


def make_transformer(dropout: float = 0.0, enable_nested_tensor: bool = False) -> nn.Module:
    torch.manual_seed(0)
    return TransformerClassifier(dropout, enable_nested_tensor)


def transformer_batches(steps: int = 4) -> list[Batch]:
    generator = torch.Generator().manual_seed(2)
    return [
        (torch.randn(4, 6, 32, generator=generator), torch.randint(0, 5, (4,), generator=generator))
        for _ in range(steps)
    ]


def train(
    model: nn.Module,
    device: str,
    make_optimizer: OptimizerFactory,
    batches: list[Batch],
    seed: int | None = None,
) -> tuple[torch.Tensor, nn.Module, torch.optim.Optimizer]:
    """Train ``model`` (moved to ``device``) one step per batch.

    Returns the per-step losses (on the CPU), the trained model and its optimizer.
    With ``seed``, the global RNG (CPU and every openreg device) is seeded first.
    """
    model = model.to(device)
    model.train()
    optimizer = make_optimizer(model.parameters())
    if seed is not None:
        torch.manual_seed(seed)
    losses = []
    for inputs, targets in batches:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs.to(device)), targets.to(device))
        loss.backward()
        optimizer.step()
        losses.append(loss.detach().cpu())
    return torch.stack(losses), model, optimizer


def cpu_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: value.detach().cpu() for name, value in model.state_dict().items()}


def assert_same_training(
    reference: tuple[torch.Tensor, nn.Module, torch.optim.Optimizer],
    actual: tuple[torch.Tensor, nn.Module, torch.optim.Optimizer],
    tolerance: dict[str, float],
) -> None:
    torch.testing.assert_close(actual[0], reference[0], **tolerance)
    expected_state, actual_state = cpu_state(reference[1]), cpu_state(actual[1])
    assert actual_state.keys() == expected_state.keys()
    for name, value in expected_state.items():
        torch.testing.assert_close(actual_state[name], value, **tolerance, msg=name)


def assert_all_on(model: nn.Module, optimizer: torch.optim.Optimizer, device: str) -> None:
    expected = torch.device(device)
    for name, parameter in model.named_parameters():
        assert parameter.device == expected, name
        assert parameter.grad is not None, name
        assert parameter.grad.device == expected, name
    for parameter, state in optimizer.state.items():
        assert parameter.device == expected
        for key, value in state.items():
            if key != "step":  # a CPU scalar unless capturable/fused, as on CUDA
                assert value.device == expected, key


OPTIMIZERS: dict[str, OptimizerFactory] = {
    "sgd_momentum": lambda params: torch.optim.SGD(params, lr=0.1, momentum=0.9),
    "sgd_momentum_nesterov_wd": lambda params: torch.optim.SGD(
        params, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-2
    ),
    "adam": lambda params: torch.optim.Adam(params, lr=1e-2),
    "adamw_amsgrad": lambda params: torch.optim.AdamW(params, lr=1e-2, amsgrad=True),
}


@pytest.mark.parametrize("optimizer", list(OPTIMIZERS))
def test_mlp_training_matches_cpu(optimizer: str) -> None:
    model, batches = make_mlp(), mlp_batches()
    reference = train(copy.deepcopy(model), "cpu", OPTIMIZERS[optimizer], batches)
    actual = train(copy.deepcopy(model), "openreg", OPTIMIZERS[optimizer], batches)
    # The model learns something, so the comparison is not between constants.
    assert not torch.equal(cpu_state(actual[1])["0.weight"], cpu_state(model)["0.weight"])
    assert_same_training(reference, actual, EXACT)
    assert_all_on(actual[1], actual[2], "openreg:0")


# On openreg the default is the foreach implementation (openreg is a foreach
# device), on the CPU the for-loop one: check each implementation explicitly.
@pytest.mark.parametrize(
    "implementation", [{"foreach": False}, {"foreach": True}, {"fused": True}], ids=str
)
@pytest.mark.parametrize("optimizer", [torch.optim.SGD, torch.optim.Adam])
def test_mlp_optimizer_implementations_match_cpu(
    optimizer: type[torch.optim.Optimizer], implementation: dict[str, bool]
) -> None:
    options = {"lr": 1e-2, **implementation}
    if optimizer is torch.optim.SGD:
        options["momentum"] = 0.9
    model, batches = make_mlp(), mlp_batches(3)
    reference = train(copy.deepcopy(model), "cpu", lambda p: optimizer(p, **options), batches)
    actual = train(copy.deepcopy(model), "openreg", lambda p: optimizer(p, **options), batches)
    assert_same_training(reference, actual, EXACT)
    assert_all_on(actual[1], actual[2], "openreg:0")


def test_adam_capturable_matches_cpu() -> None:
    # capturable=True is rejected on the CPU; openreg must accept it, keep
    # `step` on the device, and compute what the plain CPU Adam computes.
    model, batches = make_mlp(), mlp_batches(3)
    reference = train(copy.deepcopy(model), "cpu", lambda p: torch.optim.Adam(p, lr=1e-2), batches)
    actual = train(
        copy.deepcopy(model),
        "openreg",
        lambda p: torch.optim.Adam(p, lr=1e-2, capturable=True),
        batches,
    )
    torch.testing.assert_close(actual[0], reference[0], rtol=1e-6, atol=1e-7)
    for name, value in cpu_state(reference[1]).items():
        torch.testing.assert_close(cpu_state(actual[1])[name], value, rtol=1e-5, atol=1e-6)
    for state in actual[2].state.values():
        assert state["step"].device == torch.device("openreg:0")


def test_mlp_dropout_training_matches_cpu_with_same_seed() -> None:
    # The openreg generator runs the CPU engine (mt19937): with the same seed
    # the dropout masks, hence the losses, must be identical.
    model, batches = make_mlp(dropout=0.3), mlp_batches()
    factory = OPTIMIZERS["sgd_momentum"]
    reference = train(copy.deepcopy(model), "cpu", factory, batches, seed=123)
    actual = train(copy.deepcopy(model), "openreg", factory, batches, seed=123)
    assert_same_training(reference, actual, EXACT)
    # Dropout is really active: another seed gives other losses.
    other = train(copy.deepcopy(model), "openreg", factory, batches, seed=124)
    assert not torch.equal(other[0], actual[0])
    # ... and so is eval(): no dropout, hence identical outputs.
    inputs = batches[0][0]
    actual[1].eval()
    reference[1].eval()
    torch.testing.assert_close(actual[1](inputs.to("openreg")).cpu(), reference[1](inputs), **EXACT)


@pytest.mark.parametrize("dropout", [0.0, 0.1])
def test_transformer_adamw_training_matches_cpu(dropout: float) -> None:
    model, batches = make_transformer(dropout), transformer_batches()
    factory: OptimizerFactory = lambda p: torch.optim.AdamW(p, lr=1e-3)  # noqa: E731
    reference = train(copy.deepcopy(model), "cpu", factory, batches, seed=7)
    actual = train(copy.deepcopy(model), "openreg", factory, batches, seed=7)
    assert_same_training(reference, actual, EXACT)
    assert_all_on(actual[1], actual[2], "openreg:0")
    if dropout:
        # A different seed must change the losses (dropout is active and
        # seeded through torch.manual_seed on openreg too).
        other = train(copy.deepcopy(model), "openreg", factory, batches, seed=8)
        assert (other[0] - actual[0]).abs().max() > 1e-4


def padded_batch() -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(3, 6, 32, generator=generator)
    padding = torch.zeros(3, 6, dtype=torch.bool)
    padding[0, 4:] = True
    padding[2, 1:] = True
    return inputs, padding


def eval_with_padding(model: nn.Module, device: str) -> torch.Tensor:
    inputs, padding = padded_batch()
    model = copy.deepcopy(model).to(device).eval()
    with torch.no_grad():
        return model(inputs.to(device), padding.to(device)).cpu()


def test_transformer_eval_with_padding_mask_matches_cpu() -> None:
    # In eval/no_grad the encoder layers take the fused fast path
    # (_transformer_encoder_layer_fwd), which runs the CPU kernel: exact.
    model = make_transformer()
    expected = eval_with_padding(model, "cpu")
    torch.testing.assert_close(eval_with_padding(model, "openreg"), expected, **EXACT)
    # The mask matters: without it the outputs differ.
    inputs, _ = padded_batch()
    with torch.no_grad():
        unmasked = copy.deepcopy(model).eval()(inputs)
    assert not torch.allclose(unmasked, expected)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
def test_transformer_eval_with_padding_mask_nested_tensor_fast_path() -> None:
    # enable_nested_tensor=True (nn.TransformerEncoder's default) converts the
    # padded batch to a nested tensor (torch._nested_tensor_from_mask) in the
    # fast path; openreg is one of the fast path's supported device types.
    model = make_transformer(enable_nested_tensor=True)
    expected = eval_with_padding(model, "cpu")
    torch.testing.assert_close(eval_with_padding(model, "openreg"), expected, **EXACT)


@pytest.mark.usefixtures("steady_memory_stats")
def test_training_on_second_device() -> None:
    model, batches = make_mlp(dropout=0.2), mlp_batches(3)
    factory = OPTIMIZERS["adam"]
    device0_before = torch.openreg.memory_allocated(0)
    reference = train(copy.deepcopy(model), "cpu", factory, batches, seed=5)
    actual = train(copy.deepcopy(model), "openreg:1", factory, batches, seed=5)
    assert_same_training(reference, actual, EXACT)
    assert_all_on(actual[1], actual[2], "openreg:1")
    for state in actual[2].state.values():
        assert state["exp_avg"].device == torch.device("openreg:1")
    # Nothing leaked to device 0, and the current device did not change.
    assert torch.openreg.current_device() == 0
    assert torch.openreg.memory_allocated(0) == device0_before


def test_module_openreg_method_and_optimizer_state() -> None:
    model = make_mlp()
    reference = copy.deepcopy(model)
    moved = model.openreg()  # generated by generate_methods_for_privateuse1_backend
    assert moved is model
    for parameter in model.parameters():
        assert parameter.device == torch.device("openreg:0")
        assert parameter.is_openreg

    batches = mlp_batches(3)
    factory = OPTIMIZERS["adam"]
    actual = train(model, "openreg", factory, batches)
    expected = train(reference, "cpu", factory, batches)
    assert_same_training(expected, actual, EXACT)
    optimizer = actual[2]
    assert len(optimizer.state) == 4
    for state in optimizer.state.values():
        assert state["exp_avg"].is_openreg
        assert state["exp_avg_sq"].is_openreg
        assert state["step"].device == torch.device("cpu")

    # Module.openreg(1) moves everything, in place, to the other device.
    assert model.openreg(1) is model
    assert {parameter.device for parameter in model.parameters()} == {torch.device("openreg:1")}


def test_resume_cpu_checkpoint_on_openreg() -> None:
    # Train 2 steps on the CPU, then continue on openreg from the CPU
    # optimizer's state_dict: Optimizer.load_state_dict moves the state to
    # the parameters' device. The continuation must match staying on the CPU.
    factory = OPTIMIZERS["adam"]
    batches = mlp_batches(4)
    _, cpu_model, cpu_optimizer = train(make_mlp(), "cpu", factory, batches[:2])
    checkpoint = copy.deepcopy(cpu_optimizer.state_dict())

    resumed = copy.deepcopy(cpu_model).openreg()
    optimizer = factory(resumed.parameters())
    optimizer.load_state_dict(checkpoint)
    for state in optimizer.state.values():
        assert state["exp_avg"].is_openreg
        assert state["exp_avg_sq"].is_openreg

    expected_losses, actual_losses = [], []
    for inputs, targets in batches[2:]:
        for model, opt, device, losses in (
            (cpu_model, cpu_optimizer, "cpu", expected_losses),
            (resumed, optimizer, "openreg", actual_losses),
        ):
            opt.zero_grad()
            loss = F.cross_entropy(model(inputs.to(device)), targets.to(device))
            loss.backward()
            opt.step()
            losses.append(loss.detach().cpu())
    torch.testing.assert_close(torch.stack(actual_losses), torch.stack(expected_losses), **EXACT)
    for name, value in cpu_state(cpu_model).items():
        torch.testing.assert_close(cpu_state(resumed)[name], value, **EXACT, msg=name)
