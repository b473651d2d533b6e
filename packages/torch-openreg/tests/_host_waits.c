/* _host_waits.c — counts the host's waits for openreg devices (a test tool).
 *
 * Preloaded (LD_PRELOAD) in front of libopenreg.so, it interposes every runtime
 * call that makes the calling host thread wait for device work: stream, event
 * and device synchronization and the synchronous copies and fills. Each call is
 * counted and forwarded to the runtime; openreg_host_waits() reads the count.
 * The binding reaches the runtime only through openreg.h, so nothing it does
 * can wait without passing through one of these functions.
 */
#define _GNU_SOURCE
#include <openreg.h>

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

static atomic_long waits;

long openreg_host_waits(void) { return atomic_load(&waits); }

static void* runtimeFunction(const char* name) {
  void* function = dlsym(RTLD_NEXT, name);
  if (function == NULL) {
    fprintf(stderr, "_host_waits: the runtime does not export %s\n", name);
    abort();
  }
  return function;
}

#define COUNTED(NAME, PARAMETERS, ARGUMENTS)                                  \
  orError_t NAME PARAMETERS {                                                 \
    static orError_t(*real) PARAMETERS;                                       \
    if (real == NULL) real = (orError_t(*) PARAMETERS)runtimeFunction(#NAME); \
    atomic_fetch_add(&waits, 1);                                              \
    return real ARGUMENTS;                                                    \
  }

COUNTED(orDeviceSynchronize, (void), ())
COUNTED(orStreamSynchronize, (orStream_t stream), (stream))
COUNTED(orEventSynchronize, (orEvent_t event), (event))
COUNTED(orMemcpy, (void* dst, const void* src, size_t count, orMemcpyKind kind),
        (dst, src, count, kind))
COUNTED(orMemset, (void* devPtr, int value, size_t count), (devPtr, value, count))
