"""Exception hierarchy for OpenReg runtime errors.

Every error of the C API (an ``orError_t`` code) becomes an instance of the
class registered for that code; all derive from :class:`OpenRegError`, and
several also derive from the matching built-in exception so that generic
handlers (``except MemoryError``) keep working.
"""

from __future__ import annotations


class OpenRegError(RuntimeError):
    """Base class of all OpenReg runtime errors.

    ``code`` is the ``orError_t`` value and ``name`` its C name.
    """

    code: int = 999
    name: str = "orErrorUnknown"

    def __init__(self, message: str, code: int | None = None, name: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        if name is not None:
            self.name = name

    def __str__(self) -> str:
        return f"{self.args[0]} [{self.name}]"


class InvalidValueError(OpenRegError, ValueError):
    code, name = 1, "orErrorInvalidValue"


class OutOfMemoryError(OpenRegError, MemoryError):
    code, name = 2, "orErrorOutOfMemory"


class InitializationError(OpenRegError):
    code, name = 3, "orErrorInitialization"


class InvalidDeviceError(OpenRegError, ValueError):
    code, name = 4, "orErrorInvalidDevice"


class InvalidDevicePointerError(OpenRegError, ValueError):
    code, name = 5, "orErrorInvalidDevicePointer"


class InvalidHostPointerError(OpenRegError, ValueError):
    code, name = 6, "orErrorInvalidHostPointer"


class InvalidMemcpyDirectionError(OpenRegError, ValueError):
    code, name = 7, "orErrorInvalidMemcpyDirection"


class NotReadyError(OpenRegError):
    code, name = 8, "orErrorNotReady"


class InvalidHandleError(OpenRegError, ValueError):
    code, name = 9, "orErrorInvalidResourceHandle"


class DeviceMismatchError(OpenRegError, ValueError):
    code, name = 10, "orErrorDeviceMismatch"


class LaunchFailureError(OpenRegError):
    code, name = 11, "orErrorLaunchFailure"


class NotPermittedError(OpenRegError):
    code, name = 12, "orErrorNotPermitted"


_CLASS_BY_CODE: dict[int, type[OpenRegError]] = {
    cls.code: cls
    for cls in (
        InvalidValueError,
        OutOfMemoryError,
        InitializationError,
        InvalidDeviceError,
        InvalidDevicePointerError,
        InvalidHostPointerError,
        InvalidMemcpyDirectionError,
        NotReadyError,
        InvalidHandleError,
        DeviceMismatchError,
        LaunchFailureError,
        NotPermittedError,
    )
}


def error_class(code: int) -> type[OpenRegError]:
    """The exception class raised for an ``orError_t`` code."""
    return _CLASS_BY_CODE.get(code, OpenRegError)


def from_status(code: int, message: str) -> OpenRegError:
    """Build the exception for a failed C call (used by the native module)."""
    cls = error_class(code)
    if cls is not OpenRegError:
        return cls(message)
    if code == OpenRegError.code:
        return OpenRegError(message)
    return OpenRegError(message, code=code, name=f"orError({code})")


__all__ = [
    "DeviceMismatchError",
    "InitializationError",
    "InvalidDeviceError",
    "InvalidDevicePointerError",
    "InvalidHandleError",
    "InvalidHostPointerError",
    "InvalidMemcpyDirectionError",
    "InvalidValueError",
    "LaunchFailureError",
    "NotPermittedError",
    "NotReadyError",
    "OpenRegError",
    "OutOfMemoryError",
    "error_class",
    "from_status",
]
