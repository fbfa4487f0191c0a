// base/clock.h — the one clock ridge times things with: CLOCK_MONOTONIC in
// seconds, and a sleep that finishes its time through signals.
#ifndef RG_BASE_CLOCK_H
#define RG_BASE_CLOCK_H

// Seconds on the monotonic clock (an arbitrary origin: compare, never print).
double rg_clock_now(void);
// Sleeps s seconds (nothing for s <= 0), resuming after a signal interrupts.
void rg_clock_sleep(double s);

#endif  // RG_BASE_CLOCK_H
