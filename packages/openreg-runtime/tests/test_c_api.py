"""The C API used from a C program built only with get_include()/get_library_dir()."""

import shutil
import subprocess
from pathlib import Path

import pytest
from _c_programs import CHECK_MACRO, build_c_program

import openreg_runtime as rt

C_PROGRAM = (
    r"""
#include <stdio.h>
#include <string.h>

#include "openreg.h"

"""
    + CHECK_MACRO
    + r"""
static void fail_in_callback(void* user_data) {
  (void)user_data;
  orSetKernelError("kernel says no");
}

static void add_one(void* user_data) { *(int*)user_data += 1; }

/* Synchronizing from inside stream work must fail at once, not hang. */
struct SyncInside {
  orStream_t stream;
  orEvent_t event;
  orError_t codes[3];
  int message_ok;
};

static void synchronize_inside(void* user_data) {
  struct SyncInside* s = (struct SyncInside*)user_data;
  s->codes[0] = orStreamSynchronize(s->stream);
  s->message_ok =
      strstr(orGetLastErrorMessage(), "inside work running on an OpenReg stream") != NULL;
  s->codes[1] = orDeviceSynchronize();
  s->codes[2] = orEventSynchronize(s->event);
  (void)orGetLastError();
}

int main(void) {
  int count = 0;
  CHECK(orGetDeviceCount(&count));
  printf("device count %d\n", count);

  int version = 0;
  CHECK(orRuntimeGetVersion(&version));
  printf("version %d\n", version);

  enum { N = 64 };
  int host_in[N], host_out[N];
  for (int i = 0; i < N; ++i) {
    host_in[i] = i * i - 7;
    host_out[i] = -1;
  }

  size_t free_before = 0, total = 0;
  CHECK(orMemGetInfo(&free_before, &total));

  void* device = NULL;
  CHECK(orMalloc(&device, sizeof host_in));
  size_t free_during = 0;
  CHECK(orMemGetInfo(&free_during, &total));
  if (free_during >= free_before) {
    fprintf(stderr, "orMalloc did not reduce free memory\n");
    return 1;
  }

  orPointerAttributes attributes;
  CHECK(orPointerGetAttributes(&attributes, (char*)device + 8));
  if (attributes.type != orMemoryTypeDevice || attributes.device != 0 ||
      attributes.allocationBase != device) {
    fprintf(stderr, "unexpected pointer attributes\n");
    return 1;
  }

  orDeviceAddressRange range;
  CHECK(orDeviceGetAddressRange(&range, 0));
  void* kernel = NULL;
  CHECK(orGetKernelPointer(&kernel, (char*)device + 8));
  const char* device_base = (const char*)range.deviceBase;
  if ((const char*)device < device_base || (const char*)device >= device_base + range.size ||
      range.size != 2 * total ||
      (char*)kernel - ((char*)device + 8) != (char*)range.kernelBase - (char*)range.deviceBase) {
    fprintf(stderr, "the address range does not match the pointer translation\n");
    return 1;
  }
  if (orDeviceGetAddressRange(&range, count) != orErrorInvalidDevice) return 1;
  (void)orGetLastError();

  CHECK(orMemcpy(device, host_in, sizeof host_in, orMemcpyHostToDevice));
  CHECK(orMemcpy(host_out, device, sizeof host_out, orMemcpyDeviceToHost));
  if (memcmp(host_in, host_out, sizeof host_in) != 0) {
    fprintf(stderr, "round trip mismatch\n");
    return 1;
  }
  printf("round trip ok\n");

  orError_t wrong = orMemcpy(device, device, sizeof host_in, orMemcpyHostToDevice);
  printf("wrong kind -> %s (%d)\n", orGetErrorName(wrong), (int)wrong);
  if (wrong != orErrorInvalidMemcpyDirection) return 1;
  if (orPeekAtLastError() != orErrorInvalidMemcpyDirection) return 1;
  if (strstr(orGetLastErrorMessage(), "orMemcpyHostToDevice") == NULL) return 1;
  if (orGetLastError() != orErrorInvalidMemcpyDirection || orGetLastError() != orSuccess) return 1;

  orError_t bad_kind = orMemcpy(host_out, host_in, 4, (orMemcpyKind)7);
  printf("kind 7 -> %s\n", orGetErrorName(bad_kind));
  (void)orGetLastError();

  orStream_t stream = NULL;
  CHECK(orStreamCreate(&stream));
  int counter = 0;
  CHECK(orLaunchHostFunc(stream, add_one, &counter));
  CHECK(orLaunchHostFunc(stream, fail_in_callback, NULL));
  CHECK(orLaunchHostFunc(stream, add_one, &counter));
  orError_t launch = orStreamSynchronize(stream);
  printf("launch -> %s, counter %d, message has text: %d\n", orGetErrorName(launch), counter,
         strstr(orGetLastErrorMessage(), "kernel says no") != NULL);
  (void)orGetLastError();
  CHECK(orStreamSynchronize(stream));

  struct SyncInside inside = {stream, NULL, {orSuccess, orSuccess, orSuccess}, 0};
  CHECK(orEventCreate(&inside.event));
  CHECK(orEventRecord(inside.event, stream));
  CHECK(orLaunchHostFunc(stream, synchronize_inside, &inside));
  CHECK(orLaunchHostFunc(stream, add_one, &counter));
  CHECK(orStreamSynchronize(stream));
  printf("synchronize inside work -> %s %s %s, message ok %d, counter %d\n",
         orGetErrorName(inside.codes[0]), orGetErrorName(inside.codes[1]),
         orGetErrorName(inside.codes[2]), inside.message_ok, counter);
  CHECK(orEventDestroy(inside.event));
  CHECK(orStreamDestroy(stream));
  if (orSetKernelError("outside") != orErrorNotPermitted) return 1;
  (void)orGetLastError();

  CHECK(orFree(device));
  size_t free_after = 0;
  CHECK(orMemGetInfo(&free_after, &total));
  printf("free == total: %d\n", free_after == total);
  if (free_after != total) return 1;

  if (orFree(device) != orErrorInvalidDevicePointer) return 1;
  printf("%s: %s\n", orGetErrorName(orGetLastError()),
         orGetErrorString(orErrorInvalidDevicePointer));
  printf("done\n");
  return 0;
}
"""
)


def test_c_compiler_is_available():
    assert shutil.which("cc") is not None, "a C compiler (cc) is required to test the C API"


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    return build_c_program(C_PROGRAM, tmp_path_factory.mktemp("c_api"), "uses_openreg")


def test_paths_point_at_the_installed_files():
    assert (Path(rt.get_include()) / "openreg.h").is_file()
    assert (Path(rt.get_library_dir()) / "libopenreg.so").is_file()
    assert Path(rt.library_path()) == Path(rt.get_library_dir()) / "libopenreg.so"


def test_c_program_uses_the_runtime(program, clean_env):
    result = subprocess.run(
        [str(program)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    assert result.stdout.splitlines() == [
        "device count 2",
        "version 10",
        "round trip ok",
        "wrong kind -> orErrorInvalidMemcpyDirection (7)",
        "kind 7 -> orErrorInvalidMemcpyDirection",
        "launch -> orErrorLaunchFailure, counter 2, message has text: 1",
        "synchronize inside work -> orErrorNotPermitted orErrorNotPermitted "
        "orErrorNotPermitted, message ok 1, counter 3",
        "free == total: 1",
        "orErrorInvalidDevicePointer: invalid device pointer",
        "done",
    ]


def test_c_program_sees_the_environment(program, clean_env):
    result = subprocess.run(
        [str(program)],
        capture_output=True,
        text=True,
        env=clean_env(OPENREG_DEVICE_COUNT="5"),
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "device count 5"


def test_c_program_reports_bad_environment(program, clean_env):
    result = subprocess.run(
        [str(program)],
        capture_output=True,
        text=True,
        env=clean_env(OPENREG_DEVICE_COUNT="99"),
        timeout=60,
        check=False,
    )
    assert result.returncode == 1
    assert "orGetDeviceCount(&count) failed: orErrorInitialization" in result.stderr
    assert "OPENREG_DEVICE_COUNT='99' is invalid" in result.stderr
