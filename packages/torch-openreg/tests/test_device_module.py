"""torch.openreg: the device module, mirroring torch.cuda.

Availability and count, the per-thread current device (set_device, the
``device`` / ``device_of`` context managers), invalid indices, device strings,
the registration with torch (device module, PrivateUse1 name, generated
convenience methods) and torch.accelerator.
"""

from __future__ import annotations

import threading

import pytest
import torch
from torch.nn.utils.rnn import pack_padded_sequence

import torch_openreg

INVALID_INDEX = (
    r"Invalid openreg device index {index}: there are 2 openreg devices \(valid indices 0\.\.1\)"
)


# --- availability and count -------------------------------------------------


def test_is_available():
    assert torch.openreg.is_available() is True


def test_device_count_defaults_to_two():
    assert torch.openreg.device_count() == 2
    assert isinstance(torch.openreg.device_count(), int)


def test_accelerator_device_count_matches():
    assert torch.accelerator.device_count() == torch.openreg.device_count()
    assert torch.accelerator.is_available()


def test_package_reexports_device_module_functions():
    assert torch_openreg.device_count is torch.openreg.device_count
    assert torch_openreg.set_device is torch.openreg.set_device
    assert torch_openreg.device is torch.openreg.device


@pytest.mark.child_interpreters
def test_device_count_follows_environment_and_initialisation_is_lazy(run_python):
    # One fresh interpreter (they are slow to start) for both environment-dependent facts.
    result = run_python(
        """
        import torch, torch_openreg
        print(torch.openreg.is_initialized())
        print(torch.openreg.device_count(), torch.accelerator.device_count())
        print(torch.openreg.is_initialized())
        print(torch.ones(1, device="openreg:3").device)
        print(torch.openreg.is_initialized())
        """,
        OPENREG_DEVICE_COUNT="4",
    )
    assert result.returncode == 0, result.stderr
    # Querying the count does not initialise a device; allocating does.
    assert result.stdout.split() == ["False", "4", "4", "False", "openreg:3", "True"]


@pytest.mark.child_interpreters
def test_invalid_device_count_environment(run_python):
    result = run_python(
        """
        import torch, torch_openreg
        print(torch.openreg.is_available(), torch.openreg.device_count())
        try:
            torch.openreg.init()
        except RuntimeError as error:
            print("init:", error)
        try:
            torch.empty(1, device="openreg")
        except RuntimeError as error:
            print("empty:", error)
        """,
        OPENREG_DEVICE_COUNT="bogus",
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "False 0"
    assert lines[1].startswith("init:") and "OPENREG_DEVICE_COUNT='bogus'" in lines[1]
    assert lines[2].startswith("empty:") and "OPENREG_DEVICE_COUNT='bogus'" in lines[2]


# A typo in OPENREG_DEVICE_COUNT must not pass for "no device": like torch.cuda with a
# broken driver, asking for the devices warns once, naming the variable and its range.
WARNINGS_OF_AVAILABILITY = """
import warnings, torch, torch_openreg
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")  # Python's own once-per-place filter must not hide repeats
    print(torch.openreg.is_available(), torch.openreg.device_count(),
          torch.accelerator.device_count(), torch.openreg.is_available())
for warning in caught:
    print(f"warning: {warning.category.__name__}: {warning.message}".replace("\\n", " "))
"""


@pytest.mark.child_interpreters
@pytest.mark.parametrize("value", ["0", "17", "two"])
def test_an_invalid_device_count_warns_once_naming_the_valid_range(run_python, value):
    result = run_python(WARNINGS_OF_AVAILABILITY, OPENREG_DEVICE_COUNT=value)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "False 0 0 False"
    warnings = lines[1:]
    assert len(warnings) == 1, result.stdout
    assert warnings[0].startswith("warning: UserWarning: openreg initialization: "), warnings
    assert f"OPENREG_DEVICE_COUNT='{value}' is invalid" in warnings[0], warnings
    assert "from 1 to 16" in warnings[0], warnings
    # Nothing more at exit: the warning was given when the devices were asked for.
    assert "OPENREG_DEVICE_COUNT" not in result.stderr, result.stderr


@pytest.mark.child_interpreters
def test_a_valid_device_count_gives_no_warning(run_python):
    result = run_python(WARNINGS_OF_AVAILABILITY, OPENREG_DEVICE_COUNT="3")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["True 3 3 True"]


@pytest.mark.child_interpreters
def test_an_invalid_device_count_is_not_reported_to_a_program_that_never_asks(run_python):
    # A CPU-only program (every program, with the autoload shim) hears nothing.
    result = run_python(
        "import torch, torch_openreg; print(torch.ones(2).sum().item())",
        OPENREG_DEVICE_COUNT="two",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2.0"
    assert "OPENREG_DEVICE_COUNT" not in result.stderr, result.stderr


# The binding's caching allocator cuts every block from a segment of 2 MiB or more, so a
# smaller device could not hold a single tensor: refused like an invalid value.
SMALL_DEVICE = """
import warnings, torch, torch_openreg
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    print(torch.openreg.is_available(), torch.openreg.device_count())
for warning in caught:
    print("warning:", str(warning.message).replace("\\n", " "))
for call in (lambda: torch.ones(1, device="openreg"), torch.openreg.init):
    try:
        call()
    except RuntimeError as error:
        print("raised:", type(error).__name__, str(error).splitlines()[0])
    else:
        print("no error")
"""


@pytest.mark.child_interpreters
@pytest.mark.parametrize("value", ["1MiB", "2000000", "1.5M"])
def test_device_memory_below_one_allocator_segment_is_refused(run_python, value):
    result = run_python(SMALL_DEVICE, OPENREG_DEVICE_MEMORY=value)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "False 0"
    (warning,) = [line for line in lines if line.startswith("warning:")]
    errors = [line for line in lines if line.startswith("raised:")]
    assert len(errors) == 2, result.stdout
    for message in (warning, *errors):
        assert f"OPENREG_DEVICE_MEMORY='{value}' is invalid" in message, message
        assert "at least 2MiB" in message, message  # the minimum
        assert "caching allocator" in message, message  # why
        assert "or unset it" in message, message  # the fix
    for error in errors:
        assert error.startswith("raised: RuntimeError"), error  # not an out-of-memory error


@pytest.mark.child_interpreters
def test_device_memory_of_one_allocator_segment_holds_a_tensor(run_python):
    # The minimum is exactly what the allocator needs: a change of its smallest
    # segment must move the minimum too.
    result = run_python(
        """
        import torch, torch_openreg
        x = torch.arange(1000.0, device="openreg")
        print(torch.openreg.device_count(), (x * 2).sum().item())
        """,
        OPENREG_DEVICE_MEMORY="2MiB",
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["2", "999000.0"]


# --- initialisation -----------------------------------------------------------


def test_is_initialized_after_allocation():
    torch.empty(1, device="openreg")
    assert torch.openreg.is_initialized() is True


def test_init_succeeds_with_valid_environment():
    assert torch.openreg.init() is None


# --- current device -------------------------------------------------------------


def test_current_device_starts_at_zero():
    assert torch.openreg.current_device() == 0
    assert torch.accelerator.current_device_index() == 0


@pytest.mark.parametrize(
    "spec", [1, "openreg:1", torch.device("openreg:1"), torch.device("openreg", 1)]
)
def test_set_device_accepts_int_str_and_device(spec):
    torch.openreg.set_device(spec)
    assert torch.openreg.current_device() == 1
    assert torch.accelerator.current_device_index() == 1
    assert torch.empty(1, device="openreg").device == torch.device("openreg:1")


def test_set_device_back_to_zero():
    torch.openreg.set_device(1)
    torch.openreg.set_device(0)
    assert torch.openreg.current_device() == 0


def test_set_device_negative_is_noop():
    # As torch.cuda.set_device: a negative index leaves the current device alone.
    torch.openreg.set_device(1)
    torch.openreg.set_device(-1)
    assert torch.openreg.current_device() == 1


def test_set_device_without_index_is_noop():
    torch.openreg.set_device(1)
    torch.openreg.set_device("openreg")
    assert torch.openreg.current_device() == 1


@pytest.mark.parametrize("index", [2, 99])
def test_set_device_invalid_index_raises(index):
    with pytest.raises(RuntimeError, match=INVALID_INDEX.format(index=index)):
        torch.openreg.set_device(index)
    assert torch.openreg.current_device() == 0


def test_set_device_invalid_index_mentions_environment_variable():
    with pytest.raises(RuntimeError, match="OPENREG_DEVICE_COUNT"):
        torch.openreg.set_device(2)


def test_set_device_rejects_other_device_types():
    with pytest.raises(ValueError, match="Expected an openreg device"):
        torch.openreg.set_device("cpu")
    with pytest.raises(TypeError):
        torch.openreg.set_device(1.0)


@pytest.mark.parametrize("spec", ["openreg:2", "openreg:99"])
def test_tensor_on_invalid_device_raises(spec):
    with pytest.raises(RuntimeError, match=r"valid indices 0\.\.1"):
        torch.empty(2, device=spec)


@pytest.mark.parametrize("index", [2, 99])
def test_synchronize_invalid_index_raises(index):
    with pytest.raises(RuntimeError, match=INVALID_INDEX.format(index=index)):
        torch.openreg.synchronize(index)


@pytest.mark.parametrize("index", [2, 99])
def test_get_device_name_invalid_index_raises(index):
    # torch.cuda.get_device_name(99) raises; a name for a device that does not
    # exist would hide the mistake.
    with pytest.raises((RuntimeError, AssertionError, ValueError), match=str(index)):
        torch.openreg.get_device_name(index)


def test_current_device_is_per_thread():
    torch.openreg.set_device(1)
    seen = {}

    def worker():
        seen["start"] = torch.openreg.current_device()
        seen["tensor"] = torch.empty(1, device="openreg").device
        torch.openreg.set_device(1)
        seen["after"] = torch.openreg.current_device()

    torch.openreg.set_device(0)
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    # The new thread starts on device 0; its set_device does not leak back.
    assert seen == {"start": 0, "tensor": torch.device("openreg:0"), "after": 1}
    assert torch.openreg.current_device() == 0


def test_new_thread_does_not_inherit_current_device():
    torch.openreg.set_device(1)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(torch.openreg.current_device()))
    thread.start()
    thread.join()
    assert seen == [0]
    assert torch.openreg.current_device() == 1


# --- context managers ----------------------------------------------------------


@pytest.mark.parametrize("spec", [1, "openreg:1", torch.device("openreg:1")])
def test_device_context_manager(spec):
    with torch.openreg.device(spec):
        assert torch.openreg.current_device() == 1
        assert torch.empty(2, device="openreg").device == torch.device("openreg:1")
    assert torch.openreg.current_device() == 0


def test_device_context_manager_restores_previous_device():
    torch.openreg.set_device(1)
    with torch.openreg.device(0):
        assert torch.openreg.current_device() == 0
    assert torch.openreg.current_device() == 1


def test_device_context_manager_nested():
    with torch.openreg.device(1):
        with torch.openreg.device(0):
            assert torch.openreg.current_device() == 0
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0


def test_device_context_manager_restores_on_exception():
    with pytest.raises(KeyError), torch.openreg.device(1):
        raise KeyError("boom")
    assert torch.openreg.current_device() == 0


def test_device_context_manager_negative_is_noop():
    torch.openreg.set_device(1)
    with torch.openreg.device(-1):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 1


def test_device_context_manager_invalid_index_raises():
    with pytest.raises(RuntimeError, match=INVALID_INDEX.format(index=2)), torch.openreg.device(2):
        pass
    assert torch.openreg.current_device() == 0


def test_device_of_openreg_tensor():
    tensor = torch.ones(2, device="openreg:1")
    with torch.openreg.device_of(tensor):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 0


def test_device_of_cpu_tensor_is_noop():
    torch.openreg.set_device(1)
    with torch.openreg.device_of(torch.ones(2)):
        assert torch.openreg.current_device() == 1
    assert torch.openreg.current_device() == 1


# --- synchronize and names ------------------------------------------------------


@pytest.mark.parametrize("spec", [None, 0, 1, "openreg:1", torch.device("openreg:0")])
def test_synchronize_accepts_device_forms(spec):
    tensor = torch.randn(64, 64, device="openreg:1")
    result = tensor @ tensor
    torch.openreg.synchronize(spec)
    torch.testing.assert_close(result.cpu(), tensor.cpu() @ tensor.cpu())


def test_synchronize_keeps_current_device():
    torch.openreg.set_device(1)
    torch.openreg.synchronize(0)
    assert torch.openreg.current_device() == 1


def test_get_device_name():
    assert torch.openreg.get_device_name(0) == "OpenReg simulated device 0"
    assert torch.openreg.get_device_name("openreg:1") == "OpenReg simulated device 1"
    torch.openreg.set_device(1)
    assert torch.openreg.get_device_name() == "OpenReg simulated device 1"


# --- device strings and registration -------------------------------------------


def test_device_string_forms():
    assert torch.device("openreg").type == "openreg"
    assert torch.device("openreg").index is None
    assert torch.device("openreg:1") == torch.device("openreg", 1)
    assert str(torch.device("openreg:1")) == "openreg:1"
    assert repr(torch.device("openreg", 0)) == "device(type='openreg', index=0)"
    # The PrivateUse1 slot is renamed: its generic name resolves to openreg.
    assert torch.device("privateuseone").type == "openreg"


def test_invalid_device_string_raises():
    with pytest.raises(RuntimeError, match="Invalid device string"):
        torch.device("openreg:x")


def test_privateuse1_backend_name():
    assert torch._C._get_privateuse1_backend_name() == "openreg"


def test_device_module_registered():
    assert torch.openreg is torch_openreg.openreg
    assert torch.get_device_module("openreg") is torch.openreg
    assert torch.get_device_module(torch.device("openreg:1")) is torch.openreg


def test_device_module_cannot_be_registered_twice():
    with pytest.raises(RuntimeError, match="already been registered"):
        torch._register_device_module("openreg", torch.openreg)


def test_registration_is_idempotent():
    torch_openreg._registration.register()
    torch_openreg._autoload()
    assert torch.get_device_module("openreg") is torch.openreg
    assert torch.ones(1).openreg().device == torch.device("openreg:0")


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'no_such_function'"):
        torch.openreg.no_such_function  # noqa: B018


def test_accelerator_is_openreg():
    accelerator = torch.accelerator.current_accelerator()
    assert accelerator == torch.device("openreg")
    assert accelerator.type == "openreg"


def test_accelerator_set_device_index_changes_openreg_device():
    torch.accelerator.set_device_index(1)
    assert torch.openreg.current_device() == 1
    torch.accelerator.set_device_index(0)
    assert torch.openreg.current_device() == 0


# --- generated methods ----------------------------------------------------------


def test_tensor_openreg_method():
    cpu = torch.arange(4.0)
    moved = cpu.openreg()
    assert moved.device == torch.device("openreg:0")
    assert moved.is_openreg
    assert not cpu.is_openreg
    torch.testing.assert_close(moved.cpu(), cpu, rtol=0, atol=0)


@pytest.mark.parametrize("spec", [1, "openreg:1", torch.device("openreg:1")])
def test_tensor_openreg_method_with_device(spec):
    assert torch.arange(3).openreg(spec).device == torch.device("openreg:1")


def test_tensor_openreg_method_uses_current_device():
    with torch.openreg.device(1):
        assert torch.arange(3).openreg().device == torch.device("openreg:1")


def test_tensor_openreg_method_on_openreg_tensor_returns_self():
    tensor = torch.ones(2, device="openreg")
    assert tensor.openreg() is tensor


def test_module_openreg_method():
    module = torch.nn.Linear(3, 2)
    expected = module.weight.detach().clone()
    returned = module.openreg(1)
    assert returned is module
    assert module.weight.device == torch.device("openreg:1")
    assert module.bias.device == torch.device("openreg:1")
    torch.testing.assert_close(module.weight.detach().cpu(), expected, rtol=0, atol=0)


def test_module_openreg_method_uses_current_device():
    with torch.openreg.device(1):
        module = torch.nn.Linear(2, 2).openreg()
    assert module.weight.device == torch.device("openreg:1")


def test_untyped_storage_openreg_method():
    cpu = torch.arange(4, dtype=torch.uint8).untyped_storage()
    moved = cpu.openreg()
    assert moved.device == torch.device("openreg:0")
    assert moved.is_openreg
    assert not cpu.is_openreg
    assert moved.cpu().tolist() == [0, 1, 2, 3]


def test_untyped_storage_openreg_method_with_device():
    moved = torch.arange(2.0).untyped_storage().openreg(1)
    assert moved.device == torch.device("openreg:1")


def test_typed_storage_openreg_method():
    with pytest.warns(UserWarning, match="TypedStorage is deprecated"):
        storage = torch.arange(3.0).storage()
    moved = storage.openreg()
    assert moved.is_openreg
    assert moved.device == torch.device("openreg:0")
    assert moved.dtype == torch.float32
    assert moved.cpu().tolist() == [0.0, 1.0, 2.0]


def test_packed_sequence_openreg_method():
    padded = torch.randn(3, 2, 4)
    packed = pack_padded_sequence(padded, torch.tensor([3, 2]))
    moved = packed.openreg()
    assert moved.is_openreg
    assert not packed.is_openreg
    assert moved.data.device == torch.device("openreg:0")
    torch.testing.assert_close(moved.data.cpu(), packed.data, rtol=0, atol=0)


def test_tensor_get_device():
    assert torch.ones(1, device="openreg:1").get_device() == 1
    assert torch.ones(1, device="openreg:0").get_device() == 0
    assert torch.ones(1).get_device() == -1
