/* A simulated training step for `dscache bench` and the tests/bench programs (which build this
 * module too): what they put between batches in place of a trainer's compute. */
#ifndef DSC_CLI_SIMULATE_H
#define DSC_CLI_SIMULATE_H

/* A simulated accelerator step of `seconds`: sleeps (the CPU stays free, as with a GPU step)
 * until 100 us before the end, then spins, so that a late wake-up on a busy machine does not
 * stretch the step. seconds <= 0 returns at once. Blocks; thread-safe. */
void dsc_simulate_step(double seconds);

#endif
