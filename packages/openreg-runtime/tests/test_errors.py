"""Exception hierarchy: codes, C names, built-in bases, how runtime failures surface."""

import pytest

import openreg_runtime as rt
from openreg_runtime import errors

# (code, class, C name, extra built-in base or None) — from openreg.h.
ERRORS = [
    (1, errors.InvalidValueError, "orErrorInvalidValue", ValueError),
    (2, errors.OutOfMemoryError, "orErrorOutOfMemory", MemoryError),
    (3, errors.InitializationError, "orErrorInitialization", None),
    (4, errors.InvalidDeviceError, "orErrorInvalidDevice", ValueError),
    (5, errors.InvalidDevicePointerError, "orErrorInvalidDevicePointer", ValueError),
    (6, errors.InvalidHostPointerError, "orErrorInvalidHostPointer", ValueError),
    (7, errors.InvalidMemcpyDirectionError, "orErrorInvalidMemcpyDirection", ValueError),
    (8, errors.NotReadyError, "orErrorNotReady", None),
    (9, errors.InvalidHandleError, "orErrorInvalidResourceHandle", ValueError),
    (10, errors.DeviceMismatchError, "orErrorDeviceMismatch", ValueError),
    (11, errors.LaunchFailureError, "orErrorLaunchFailure", None),
    (12, errors.NotPermittedError, "orErrorNotPermitted", None),
]
ERROR_IDS = [name for _, _, name, _ in ERRORS]


def all_error_classes():
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, errors.OpenRegError)
    ]


@pytest.mark.parametrize(("code", "cls", "name", "_base"), ERRORS, ids=ERROR_IDS)
def test_error_class_maps_code_to_class(code, cls, name, _base):
    assert errors.error_class(code) is cls
    assert cls.code == code
    assert cls.name == name


@pytest.mark.parametrize(("code", "cls", "name", "_base"), ERRORS, ids=ERROR_IDS)
def test_class_names_match_the_c_library(lib, code, cls, name, _base):
    assert lib.orGetErrorName(code).decode() == name == cls.name


def test_every_class_in_the_module_is_covered():
    covered = {cls for _, cls, _, _ in ERRORS} | {errors.OpenRegError}
    assert set(all_error_classes()) == covered
    for cls in all_error_classes():
        assert errors.error_class(cls.code) is cls


@pytest.mark.parametrize(("code", "cls", "name", "_base"), ERRORS, ids=ERROR_IDS)
def test_from_status_builds_the_class_with_message_and_c_name(code, cls, name, _base):
    error = errors.from_status(code, "something specific went wrong")
    assert type(error) is cls
    assert error.code == code
    assert error.name == name
    assert str(error) == f"something specific went wrong [{name}]"
    assert error.args == ("something specific went wrong",)


@pytest.mark.parametrize(("code", "cls", "_name", "base"), ERRORS, ids=ERROR_IDS)
def test_hierarchy(code, cls, _name, base):
    assert issubclass(cls, errors.OpenRegError)
    assert issubclass(cls, RuntimeError)
    if base is not None:
        assert issubclass(cls, base)
    if base is not ValueError:
        assert not issubclass(cls, ValueError)


def test_out_of_memory_error_is_a_memory_error():
    error = errors.from_status(2, "device full")
    assert isinstance(error, MemoryError)
    with pytest.raises(MemoryError):
        raise error


def test_base_class():
    assert issubclass(errors.OpenRegError, RuntimeError)
    assert errors.OpenRegError.code == 999
    assert errors.OpenRegError.name == "orErrorUnknown"
    error = errors.OpenRegError("plain")
    assert str(error) == "plain [orErrorUnknown]"
    custom = errors.OpenRegError("custom", code=42, name="orError(42)")
    assert (custom.code, custom.name) == (42, "orError(42)")


def test_unrecognised_code_maps_to_base_class():
    assert errors.error_class(123) is errors.OpenRegError
    error = errors.from_status(123, "strange")
    assert type(error) is errors.OpenRegError
    assert error.code == 123
    assert str(error) == "strange [orError(123)]"


def test_unknown_error_code_keeps_its_c_name(lib):
    # orErrorUnknown (999) is a real code of the C API; its C name must survive.
    error = errors.from_status(999, "internal failure")
    assert type(error) is errors.OpenRegError
    assert error.code == 999
    assert error.name == lib.orGetErrorName(999).decode() == "orErrorUnknown"
    assert str(error) == "internal failure [orErrorUnknown]"


def test_package_reexports_every_error_class():
    for cls in all_error_classes():
        assert getattr(rt, cls.__name__) is cls
        assert cls.__name__ in rt.__all__
        assert cls.__name__ in errors.__all__


@pytest.mark.parametrize(
    ("call", "cls", "fragment"),
    [
        (lambda: rt.set_device(7), rt.InvalidDeviceError, "device index 7 is out of range"),
        (lambda: rt.free(rt.malloc_host(8) + 1), rt.InvalidDevicePointerError, "not OpenReg"),
        (lambda: rt.Stream(priority=5), rt.InvalidValueError, "stream priority 5"),
        (lambda: rt.free_host(1), rt.InvalidHostPointerError, "orFreeHost"),
    ],
    ids=["device", "device-pointer", "value", "host-pointer"],
)
def test_runtime_failures_raise_the_mapped_class(call, cls, fragment):
    with pytest.raises(cls) as info:
        call()
    assert type(info.value) is cls
    assert fragment in str(info.value)
    assert str(info.value).endswith(f"[{cls.name}]")


def test_failed_calls_do_not_leave_a_pending_last_error(lib):
    with pytest.raises(rt.InvalidDeviceError):
        rt.set_device(-1)
    assert lib.orPeekAtLastError() == 0
    assert lib.orGetLastError() == 0
