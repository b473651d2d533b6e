/* Marks the measured region of a process running under callgrind.
 *
 * The CPU-only tax family (cpu_tax.py) counts the instructions a training step
 * executes. It starts the interpreter with instrumentation off, so importing torch
 * costs little, and these client requests switch counting on around the steps and
 * write one named dump per workload. Outside valgrind they do nothing.
 * Built at benchmark time: cc -shared -fPIC callgrind_region.c (needs valgrind's
 * headers).
 */
#include <valgrind/callgrind.h>

void region_start(void) {
  CALLGRIND_ZERO_STATS;
  CALLGRIND_START_INSTRUMENTATION;
}

void region_stop(const char* name) {
  CALLGRIND_STOP_INSTRUMENTATION;
  CALLGRIND_DUMP_STATS_AT(name);
}
