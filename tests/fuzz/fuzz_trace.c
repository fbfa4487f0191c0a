// libFuzzer target for the simulator's trace readers: arbitrary bytes as an
// Azure LLM inference trace (CSV) and as a Mooncake trace (JSONL). Every
// input must end in a trace or a status naming the line, never a crash,
// leak or hang.
#include <stddef.h>
#include <stdint.h>

#include "planner/simulate.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  for (int f = 0; f < RG_SIM_TRACE_COUNT; f++) {
    rg_sim_trace_t t;
    rg_status_t s =
        rg_sim_trace_parse("fuzz", (const char *)data, size, (rg_sim_trace_format_t)f, &t);
    if (!s) {
      // A trace that parsed is in arrival order from 0, every request runnable.
      for (size_t i = 0; i < t.n; i++)
        if (t.reqs[i].prompt < 1 || t.reqs[i].output < 1 ||
            (i && t.reqs[i].arrival < t.reqs[i - 1].arrival) ||
            t.reqs[i].hash_at + t.reqs[i].n_hash > t.n_hashes)
          __builtin_trap();
      if (t.n && t.reqs[0].arrival != 0) __builtin_trap();
    }
    rg_status_free(s);
    rg_sim_trace_free(&t);
  }
  return 0;
}
