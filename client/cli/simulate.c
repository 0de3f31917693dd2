/* dsc_simulate_step: sleep, then spin to the exact end of a simulated training step. */
#include "simulate.h"
#include "util.h"

#include <time.h>

void dsc_simulate_step(double seconds) {
    if (seconds <= 0)
        return;
    double end = dsc_now_s() + seconds;
    double nap = seconds - 100e-6;
    if (nap > 0) {
        struct timespec ts = {(time_t)nap, (long)((nap - (double)(time_t)nap) * 1e9)};
        while (nanosleep(&ts, &ts) != 0)
            ;
    }
    while (dsc_now_s() < end)
        ;
}
