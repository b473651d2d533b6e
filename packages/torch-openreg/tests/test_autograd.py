"""Autograd on openreg: gradients checked against the CPU, plus autograd mechanics.

The backbone is differential: each function runs on CPU inputs and on copies
of them on openreg, is backpropagated with the same upstream gradient, and
outputs and input gradients are compared. Nearly everything is bit-exact
(openreg runs the CPU kernels on the same bytes). The exceptions are operators
whose composite kernel takes precedence over the PrivateUse1 fallback, so that
openreg runs a decomposition where the CPU runs a fused kernel:
``native_layer_norm`` (CompositeExplicitAutograd ``math_native_layer_norm``;
measured differences up to ~1e-6) and ``silu_backward``
(CompositeImplicitAutograd ``math_silu_backward``; one ulp). Those cases get
the tolerance noted next to them.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.autograd import gradcheck, gradgradcheck

EXACT = {"rtol": 0.0, "atol": 0.0}
# Decomposed kernels on openreg (see above): measured <= 9.6e-7 absolute.
COMPOSITE = {"rtol": 1e-5, "atol": 2e-6}

Shape = tuple[int, ...]


def on(device: str) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda tensor: tensor.to(device)


def make_inputs(shapes: Sequence[Shape], dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(shape, generator=generator, dtype=dtype) for shape in shapes]


def run_backward(
    fn: Callable[..., torch.Tensor], inputs: Sequence[torch.Tensor], device: str
) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Output and input gradients (leaves on ``device``) for a fixed upstream gradient."""
    leaves = [tensor.detach().to(device).requires_grad_() for tensor in inputs]
    output = fn(*leaves)
    generator = torch.Generator().manual_seed(1)
    upstream = torch.randn(output.shape, generator=generator, dtype=output.dtype)
    output.backward(upstream.to(device))
    for leaf in leaves:
        assert leaf.grad is not None
        assert leaf.grad.device == leaf.device
        assert leaf.grad.dtype == leaf.dtype
        assert leaf.grad.shape == leaf.shape
    return output.detach(), [leaf.grad for leaf in leaves]


def index_on(tensor: torch.Tensor, values: list) -> torch.Tensor:
    return torch.tensor(values, device=tensor.device)


def inplace_chain(x: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.mul_(2)
    y[1:].add_(1)
    y.t_()
    y.relu_()
    return y * 3


def inplace_on_views(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    y = x.clone()
    y.addmm_(w, w.t())
    y[:, 0].mul_(2)  # in-place through views
    y[1:, 1:].add_(w[1:, :3])
    y.masked_fill_(y > 2, 0.5)
    return y.sigmoid_()


def index_put_accumulate(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    return x.index_put((index_on(x, [0, 2, 0]),), v, accumulate=True)


# name -> (function, input shapes, tolerance)
CASES: dict[str, tuple[Callable[..., torch.Tensor], list[Shape], dict[str, float]]] = {
    "matmul": (torch.matmul, [(5, 7), (7, 3)], EXACT),
    "matmul_batched_broadcast": (torch.matmul, [(2, 5, 7), (7, 3)], EXACT),
    "linear": (F.linear, [(4, 6), (3, 6), (3,)], EXACT),
    "conv2d": (
        lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1),
        [(2, 3, 8, 8), (4, 3, 3, 3), (4,)],
        EXACT,
    ),
    "conv2d_groups_dilation": (
        lambda x, w: F.conv2d(x, w, groups=2, dilation=2),
        [(2, 4, 9, 9), (6, 2, 3, 3)],
        EXACT,
    ),
    "layer_norm": (
        lambda x, w, b: F.layer_norm(x, (16,), w, b),
        [(4, 5, 16), (16,), (16,)],
        COMPOSITE,
    ),
    "batch_norm_train": (
        lambda x, w, b: F.batch_norm(x, None, None, w, b, training=True),
        [(4, 3, 5, 5), (3,), (3,)],
        EXACT,
    ),
    "softmax": (lambda x: F.softmax(x, dim=-1), [(4, 9)], EXACT),
    "log_softmax": (lambda x: F.log_softmax(x, dim=0), [(4, 9)], EXACT),
    "cross_entropy": (lambda x: F.cross_entropy(x, index_on(x, [1, 0, 3, 2])), [(4, 5)], EXACT),
    "cross_entropy_weight_smoothing": (
        lambda x: F.cross_entropy(
            x,
            index_on(x, [1, 0, 3, 2]),
            weight=torch.arange(1.0, 6.0).to(x.device),
            label_smoothing=0.1,
        ),
        [(4, 5)],
        EXACT,
    ),
    "cross_entropy_probabilities": (
        lambda x, t: F.cross_entropy(x, t.softmax(dim=1)),
        [(4, 5), (4, 5)],
        EXACT,
    ),
    "mse_loss": (F.mse_loss, [(4, 5), (4, 5)], EXACT),
    "index_tensor": (lambda x: x[index_on(x, [0, 2, 2])], [(4, 5)], EXACT),
    "index_cpu_indices": (lambda x: x[torch.tensor([3, 0, 0])], [(4, 5)], EXACT),
    "index_bool_mask": (lambda x: x[x > 0], [(4, 5)], EXACT),
    "index_select": (lambda x: x.index_select(1, index_on(x, [0, 4, 4, 1])), [(4, 5)], EXACT),
    "gather": (
        lambda x: x.gather(1, index_on(x, [[0, 1], [2, 2], [4, 0], [3, 3]])),
        [(4, 5)],
        EXACT,
    ),
    "scatter": (
        lambda x, s: x.scatter(1, index_on(x, [[0, 1], [2, 3], [4, 0], [3, 1]]), s),
        [(4, 5), (4, 2)],
        EXACT,
    ),
    "scatter_add": (
        lambda x, s: x.scatter_add(1, index_on(x, [[0, 0], [2, 2], [4, 0], [3, 1]]), s),
        [(4, 5), (4, 2)],
        EXACT,
    ),
    "index_put_accumulate": (index_put_accumulate, [(4, 5), (3, 5)], EXACT),
    "embedding": (lambda w: F.embedding(index_on(w, [[0, 2], [2, 5]]), w), [(6, 4)], EXACT),
    "masked_fill_where": (
        lambda x, y: torch.where(x > y, x, y).masked_fill(x < -1, 0.0),
        [(4, 5), (4, 5)],
        EXACT,
    ),
    "cat": (lambda a, b: torch.cat([a, b], dim=1), [(3, 4), (3, 2)], EXACT),
    "stack": (lambda a, b: torch.stack([a, b * a]).cumsum(0), [(3, 4), (3, 4)], EXACT),
    "views": (
        lambda x: x.view(6, 4).t()[1:3, ::2].reshape(-1).unsqueeze(0).expand(3, -1),
        [(4, 6)],
        EXACT,
    ),
    "slicing": (
        lambda x: x[:, 1:5:2].transpose(0, 1).narrow(1, 1, 2).contiguous().flatten(),
        [(4, 6)],
        EXACT,
    ),
    "permute_unflatten": (
        lambda x: x.permute(2, 0, 1).unflatten(0, (2, 2)).sum(1),
        [(3, 5, 4)],
        EXACT,
    ),
    "split_chunk": (
        lambda x: torch.cat([c * (i + 1) for i, c in enumerate(x.chunk(3, 1))]),
        [(2, 6)],
        EXACT,
    ),
    "inplace_chain_on_clone": (inplace_chain, [(3, 4)], EXACT),
    "inplace_on_views_of_clone": (inplace_on_views, [(4, 4), (4, 3)], EXACT),
    "max_pool2d": (lambda x: F.max_pool2d(x, 2), [(2, 3, 6, 6)], EXACT),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, 3), [(2, 3, 7, 7)], EXACT),
    "gelu_tanh_times_silu": (
        lambda x: F.gelu(x, approximate="tanh") * F.silu(x),
        [(4, 5)],
        COMPOSITE,  # silu_backward is CompositeImplicitAutograd
    ),
    "reductions": (
        lambda x: x.cumprod(0) * x.logsumexp(1, keepdim=True) + x.amax(0),
        [(4, 5)],
        EXACT,
    ),
    "vector_norm": (lambda x: torch.linalg.vector_norm(x, dim=1), [(4, 5)], EXACT),
    "sort_topk": (lambda x: x.sort(1).values + x.topk(5, 1).values, [(4, 5)], EXACT),
    "openreg_swish": (torch.ops.openreg.swish, [(4, 5)], EXACT),
}


@pytest.mark.parametrize("name", list(CASES))
def test_backward_matches_cpu(name: str) -> None:
    fn, shapes, tolerance = CASES[name]
    inputs = make_inputs(shapes)
    expected_output, expected_grads = run_backward(fn, inputs, "cpu")
    output, grads = run_backward(fn, inputs, "openreg")
    assert output.device == torch.device("openreg:0")
    # swish's forward uses a hand-written kernel, x / (1 + exp(-x)), on openreg
    # and x * sigmoid(x) on the CPU: outputs agree to rounding only.
    output_tolerance = {"rtol": 1e-6, "atol": 1e-7} if name == "openreg_swish" else tolerance
    torch.testing.assert_close(output.cpu(), expected_output, **output_tolerance)
    for index, (grad, expected) in enumerate(zip(grads, expected_grads, strict=True)):
        torch.testing.assert_close(grad.cpu(), expected, **tolerance, msg=f"grad of input {index}")


DOUBLE_BACKWARD: dict[str, tuple[Callable[..., torch.Tensor], list[Shape]]] = {
    "tanh": (torch.tanh, [(3, 4)]),
    "matmul_sin": (lambda a, b: (a @ b).sin(), [(3, 4), (4, 2)]),
    "softmax_times_input": (lambda a: F.softmax(a, dim=1) * a, [(3, 4)]),
    "logsigmoid_exp": (lambda a: F.logsigmoid(a) * a.exp(), [(3, 4)]),
    "cross_entropy": (lambda a: F.cross_entropy(a, index_on(a, [0, 3, 1])), [(3, 4)]),
    "openreg_swish": (torch.ops.openreg.swish, [(3, 4)]),
}


@pytest.mark.parametrize("name", list(DOUBLE_BACKWARD))
def test_double_backward_matches_cpu(name: str) -> None:
    fn, shapes = DOUBLE_BACKWARD[name]
    inputs = make_inputs(shapes, torch.float64)
    results = {}
    for device in ("cpu", "openreg"):
        leaves = [tensor.to(device).requires_grad_() for tensor in inputs]
        grads = torch.autograd.grad(fn(*leaves).sum(), leaves, create_graph=True)
        assert all(grad.requires_grad for grad in grads)
        penalty = sum((grad * grad).sum() for grad in grads)
        second = torch.autograd.grad(penalty, leaves)
        assert all(g.device.type == device for g in (*grads, *second))
        results[device] = [g.detach().cpu() for g in (*grads, *second)]
    for actual, expected in zip(results["openreg"], results["cpu"], strict=True):
        torch.testing.assert_close(actual, expected, **EXACT)
    # The second-order gradients are not trivially zero.
    assert any(g.abs().max() > 0 for g in results["cpu"][len(inputs) :])


GRADCHECK: dict[str, tuple[Callable[..., torch.Tensor], list[Shape]]] = {
    "matmul": (torch.matmul, [(3, 4), (4, 2)]),
    "softmax": (lambda a: F.softmax(a, dim=1), [(3, 4)]),
    "layer_norm": (lambda a, w, b: F.layer_norm(a, (4,), w, b), [(3, 4), (4,), (4,)]),
    "gather": (lambda a: a.gather(1, index_on(a, [[0, 3], [1, 1], [2, 0]])), [(3, 4)]),
    "cross_entropy": (lambda a: F.cross_entropy(a, index_on(a, [0, 3, 1])), [(3, 4)]),
    "cat_views_cumsum": (lambda a, b: torch.cat([a.t(), b[:, 1:]], 1).cumsum(0), [(3, 4), (4, 3)]),
    "conv2d": (lambda x, w: F.conv2d(x, w, padding=1), [(1, 2, 4, 4), (2, 2, 3, 3)]),
    "openreg_swish": (torch.ops.openreg.swish, [(3, 4)]),
}


@pytest.mark.parametrize("name", list(GRADCHECK))
def test_gradcheck_on_openreg(name: str) -> None:
    fn, shapes = GRADCHECK[name]
    inputs = [
        tensor.to("openreg").requires_grad_() for tensor in make_inputs(shapes, torch.float64)
    ]
    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


def test_gradcheck_detects_wrong_gradient_on_openreg() -> None:
    # gradcheck on openreg must be able to fail: a function with a deliberately
    # wrong backward.
    class WrongSquare(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * x  # should be 2 * x

    x = torch.randn(3, dtype=torch.float64, device="openreg", requires_grad=True)
    assert not gradcheck(WrongSquare.apply, (x,), raise_exception=False)


def test_requires_grad_propagation() -> None:
    a = torch.randn(3, 4, device="openreg", requires_grad=True)
    b = torch.randn(3, 4, device="openreg")
    assert a.is_leaf and b.is_leaf
    assert not b.requires_grad
    assert (b * 2).grad_fn is None
    c = a * b + b
    assert c.requires_grad and not c.is_leaf
    assert c.grad_fn is not None and c.grad_fn.name() == "AddBackward0"
    assert a.sum().requires_grad
    assert a[1:, ::2].requires_grad  # views of a leaf
    assert a.detach().requires_grad is False
    assert a.clone().requires_grad
    # Integer results do not require grad.
    assert not a.argmax().requires_grad
    c.sum().backward()
    assert b.grad is None
    torch.testing.assert_close(a.grad.cpu(), b.cpu(), **EXACT)
    # Turning requires_grad on later affects only graphs built afterwards.
    b.requires_grad_()
    a.grad = None
    d = a * b + b
    assert d.grad_fn.name() == "AddBackward0"
    d.sum().backward()
    torch.testing.assert_close(a.grad.cpu(), b.detach().cpu(), **EXACT)
    torch.testing.assert_close(b.grad.cpu(), (a.detach() + 1).cpu(), **EXACT)


def test_grad_device_and_accumulation() -> None:
    for device in ("openreg:0", "openreg:1"):
        x = torch.randn(4, 3, device=device, requires_grad=True)
        y = torch.randn(4, 3, device=device, requires_grad=True)
        (x * y).sum().backward()
        assert x.grad.device == torch.device(device) and x.grad.is_openreg
        first = x.grad.clone()
        torch.testing.assert_close(first.cpu(), y.detach().cpu(), **EXACT)
        (x * y).sum().backward()  # gradients accumulate
        torch.testing.assert_close(x.grad.cpu(), 2 * first.cpu(), **EXACT)
        x.grad = None
        (3 * x).sum().backward()
        torch.testing.assert_close(x.grad.cpu(), torch.full((4, 3), 3.0), **EXACT)
    assert torch.openreg.current_device() == 0


def test_gradient_flows_across_devices() -> None:
    # CPU leaf -> openreg -> ops -> CPU: the gradient comes back to each device.
    x_cpu = torch.randn(3, 4, requires_grad=True)
    w = torch.randn(4, 2, device="openreg", requires_grad=True)
    out = (x_cpu.to("openreg") @ w).tanh().cpu() * torch.arange(2.0)
    out.sum().backward()
    assert x_cpu.grad.device == torch.device("cpu")
    assert w.grad.device == torch.device("openreg:0")

    x_ref = x_cpu.detach().clone().requires_grad_()
    w_ref = w.detach().cpu().requires_grad_()
    ((x_ref @ w_ref).tanh() * torch.arange(2.0)).sum().backward()
    torch.testing.assert_close(x_cpu.grad, x_ref.grad, **EXACT)
    torch.testing.assert_close(w.grad.cpu(), w_ref.grad, **EXACT)

    # openreg:0 -> openreg:1 and back.
    z = torch.randn(5, device="openreg:0", requires_grad=True)
    (z.to("openreg:1").exp() * 2).sum().backward()
    assert z.grad.device == torch.device("openreg:0")
    torch.testing.assert_close(z.grad.cpu(), 2 * z.detach().cpu().exp(), **EXACT)


def test_retain_graph() -> None:
    x = torch.randn(5, device="openreg", requires_grad=True)
    y = (x.sin() * x).sum()  # saves tensors for backward
    y.backward(retain_graph=True)
    first = x.grad.clone()
    y.backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * first.cpu(), **EXACT)
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()

    x_cpu = x.detach().cpu().requires_grad_()
    (x_cpu.sin() * x_cpu).sum().backward()
    torch.testing.assert_close(first.cpu(), x_cpu.grad, **EXACT)


def test_tensor_hooks() -> None:
    seen = []

    def double(grad: torch.Tensor) -> torch.Tensor:
        seen.append(grad.device)
        return grad * 2

    results = {}
    for device in ("cpu", "openreg"):
        x = torch.arange(6.0, device=device).requires_grad_()
        h = x * x
        h.register_hook(double)  # on an intermediate
        handle = x.register_hook(lambda grad: grad + 1)  # on the leaf
        accumulated = []
        x.register_post_accumulate_grad_hook(
            lambda leaf, out=accumulated: out.append(leaf.grad.clone())
        )
        (h * 3).sum().backward()
        first = x.grad.clone()
        handle.remove()
        x.grad = None
        (x * 5).sum().backward()
        assert len(accumulated) == 2
        assert all(grad.device == x.device for grad in accumulated)
        results[device] = (first.cpu(), x.grad.cpu(), accumulated[0].cpu())
    assert seen == [torch.device("cpu"), torch.device("openreg:0")]
    # d/dx of 3 x^2 is 6x; the hook on h doubles it, the hook on x adds 1.
    expected_first = 12 * torch.arange(6.0) + 1
    torch.testing.assert_close(results["openreg"][0], expected_first, **EXACT)
    torch.testing.assert_close(results["openreg"][2], expected_first, **EXACT)
    torch.testing.assert_close(results["openreg"][1], torch.full((6,), 5.0), **EXACT)
    for actual, expected in zip(results["openreg"], results["cpu"], strict=True):
        torch.testing.assert_close(actual, expected, **EXACT)


def test_module_backward_hooks_see_openreg_gradients() -> None:
    torch.manual_seed(0)
    initial = nn.Sequential(nn.Linear(4, 3), nn.Tanh())
    inputs = torch.randn(2, 4)
    results = {}
    for device in ("cpu", "openreg"):
        model = copy.deepcopy(initial).to(device)
        grads = []
        model[0].register_full_backward_hook(
            lambda module, grad_in, grad_out, out=grads: out.append((grad_in[0], grad_out[0]))
        )
        x = inputs.to(device).requires_grad_()
        model(x).sum().backward()
        assert len(grads) == 1
        assert all(grad.device == x.device for grad in grads[0])
        results[device] = [grad.cpu() for grad in grads[0]]
    for actual, expected in zip(results["openreg"], results["cpu"], strict=True):
        torch.testing.assert_close(actual, expected, **EXACT)
    # grad_out of the Linear is tanh's derivative: 1 - tanh^2.
    pre_tanh = initial[0](inputs).detach()
    torch.testing.assert_close(results["openreg"][1], 1 - pre_tanh.tanh() ** 2)


def test_no_grad_and_enable_grad() -> None:
    x = torch.randn(3, device="openreg", requires_grad=True)
    with torch.no_grad():
        y = x * 2
        assert not y.requires_grad and y.grad_fn is None
        assert y.is_openreg
        with torch.enable_grad():
            z = x * 2
        assert z.requires_grad
        x.add_(1)  # in-place update of a leaf is allowed under no_grad
    assert x.requires_grad and x.is_leaf
    torch.testing.assert_close(y.cpu() + 2, (x * 2).detach().cpu(), **EXACT)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.add_(1)


def test_inference_mode() -> None:
    values = torch.randn(3)
    results = {}
    for device in ("cpu", "openreg"):
        x = values.to(device).requires_grad_()
        with torch.inference_mode():
            y = x.exp()
            assert y.is_inference() and not y.requires_grad and y.device == x.device
        assert not x.is_inference()
        # Inference tensors cannot be saved for backward ...
        with pytest.raises(RuntimeError, match="Inference tensors cannot be saved for backward"):
            x * y
        # ... nor updated in place outside inference mode (PyTorch reports this
        # after the kernel ran, so the update happens on both devices).
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor"):
            y.add_(1)
        with torch.inference_mode():
            y.mul_(3)  # allowed inside inference mode
        results[device] = y.cpu()
    torch.testing.assert_close(results["openreg"], results["cpu"], **EXACT)
    torch.testing.assert_close(results["openreg"], (values.exp() + 1) * 3)


def test_detach_shares_storage_and_version_counter() -> None:
    x = torch.randn(4, device="openreg", requires_grad=True)
    y = x.exp()
    d = y.detach()
    assert not d.requires_grad and d.grad_fn is None and d.is_openreg
    assert d.data_ptr() == y.data_ptr()
    d.zero_()  # visible through y; y was saved by exp's backward ...
    assert torch.count_nonzero(y.detach().cpu()) == 0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()  # ... so backward must notice the version change
    # detach_() in place.
    z = x * 2
    z.detach_()
    assert not z.requires_grad and z.is_leaf


def test_inplace_on_leaf_requiring_grad_is_an_error() -> None:
    x = torch.randn(3, device="openreg", requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x.mul_(2)
    with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
        x[0] = 1.0


def swish_reference(x: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(x)


def test_swish_custom_op_forward_and_gradient() -> None:
    x_cpu = torch.linspace(-6, 6, 25, dtype=torch.float64)
    x = x_cpu.to("openreg").requires_grad_()
    y = torch.ops.openreg.swish(x)
    assert y.is_openreg and y.requires_grad
    assert "Swish" in y.grad_fn.name()  # its own autograd Function
    torch.testing.assert_close(y.detach().cpu(), swish_reference(x_cpu), rtol=1e-12, atol=1e-15)
    y.sum().backward()
    s = torch.sigmoid(x_cpu)
    torch.testing.assert_close(x.grad.cpu(), s + x_cpu * s * (1 - s), rtol=1e-12, atol=1e-15)


class SwishMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.fc2 = nn.Linear(16, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.ops.openreg.swish(self.fc1(x)))


def test_swish_trains_inside_a_module() -> None:
    torch.manual_seed(0)
    initial = SwishMLP()
    generator = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(10, 8, generator=generator), torch.randint(0, 3, (10,), generator=generator))
        for _ in range(5)
    ]
    losses = {}
    models = {}
    for device in ("cpu", "openreg"):
        model = SwishMLP().to(device)
        model.load_state_dict(initial.state_dict())
        optimizer = torch.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
        device_losses = []
        for inputs, targets in batches:
            optimizer.zero_grad()
            loss = F.cross_entropy(model(inputs.to(device)), targets.to(device))
            loss.backward()
            assert model.fc1.weight.grad.device.type == device
            optimizer.step()
            device_losses.append(loss.item())
        losses[device], models[device] = torch.tensor(device_losses), model
    # The openreg swish kernel rounds differently from the CPU's x * sigmoid(x):
    # agreement to float32 rounding, not bitwise.
    # Measured: losses within 1.2e-7, parameters within 6e-8.
    torch.testing.assert_close(losses["openreg"], losses["cpu"], rtol=1e-6, atol=2e-7)
    for name, value in models["cpu"].state_dict().items():
        torch.testing.assert_close(
            models["openreg"].state_dict()[name].cpu(), value, rtol=1e-6, atol=2e-7, msg=name
        )
    assert losses["openreg"][-1] < losses["openreg"][0]  # it learns


@pytest.mark.child_interpreters
def test_exit_waits_for_a_busy_autograd_device_thread(run_python) -> None:
    """An autograd device thread lets go of a finished backward's graph task (which
    holds Python objects, so it needs the GIL) just after the backward returned. If
    the interpreter finalizes first, that thread's GIL request ends it through C++
    frames that cannot unwind: an abort at exit. So the binding's exit handler waits
    until every "pt_autograd_<device>" thread is idle. Here a stand-in thread of that
    name stays busy long after the main thread has finished; a handler registered
    before the binding's runs after it and reports what it found."""
    result = run_python(
        """
        import atexit, ctypes, threading, time
        idle = threading.Event()
        atexit.register(lambda: print("idle at exit:", idle.is_set(), flush=True))
        import torch
        import torch_openreg  # registers the exit handler, which runs first
        def device_thread():
            ctypes.CDLL(None).prctl(15, b"pt_autograd_7")  # PR_SET_NAME
            named.set()
            time.sleep(2.0)  # busy (not waiting for a task) while the main thread exits
            idle.set()
            threading.Event().wait()  # idle: an untimed wait, like a device thread's
        named = threading.Event()
        threading.Thread(target=device_thread, daemon=True).start()
        named.wait()
        torch.ones(2, device="openreg").add_(1)
        """,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "idle at exit: True", result.stdout + result.stderr


@pytest.mark.child_interpreters
def test_exit_gives_up_on_an_autograd_thread_that_never_goes_idle(run_python) -> None:
    """The wait is bounded: a device thread stuck in a backward (run by a daemon
    thread, say) delays exit by the limit at most, it does not hang it."""
    result = run_python(
        """
        import ctypes, threading, time
        import torch
        import torch_openreg
        from torch_openreg import _exit
        _exit.AUTOGRAD_IDLE_LIMIT_S = 0.2
        def busy_forever():
            ctypes.CDLL(None).prctl(15, b"pt_autograd_7")
            named.set()
            while True:
                time.sleep(0.01)
        named = threading.Event()
        threading.Thread(target=busy_forever, daemon=True).start()
        named.wait()
        print("exiting", flush=True)
        """,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "exiting"
