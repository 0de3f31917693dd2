/* The default per-batch byte budget of a variable-length field (docs/loader.md, "Memory"):
 * batch x bytes_max while that is at most 64 MiB, else the largest of 64 MiB, bytes_max and
 * 4 x batch x bytes_mean, capped at DSC__SLOT_FIELD_MAX. */
#include "pipeline.h"
#include "testlib.h"

#define MIB (1ull << 20)

int main(void) {
    int exact = -1;
    /* Tokens: 2048 x i32 at most, batch 32: 256 KiB, every batch fits. */
    CHECK_EQ_INT(dsc__var_default_budget(32, 8192, 2000.0, &exact), 32 * 8192);
    CHECK_EQ_INT(exact, 1);
    /* Exactly 64 MiB is still exact. */
    CHECK_EQ_INT(dsc__var_default_budget(64, MIB, 1000.0, &exact), 64 * MIB);
    CHECK_EQ_INT(exact, 1);
    /* Past it: 64 MiB when the mean is small ... */
    CHECK_EQ_INT(dsc__var_default_budget(256, MIB, 1000.0, &exact), 64 * MIB);
    CHECK_EQ_INT(exact, 0);
    /* ... 4 x B x mean when that is larger (audio: mean 100 KB, batch 256: 102.4 MB) ... */
    CHECK_EQ_INT(dsc__var_default_budget(256, 10 * MIB, 100000.0, &exact), 102400000);
    CHECK_EQ_INT(exact, 0);
    /* ... bytes_max when one sample is larger still (any one sample fits) ... */
    CHECK_EQ_INT(dsc__var_default_budget(2, 200 * MIB, 1000.0, &exact), 200 * MIB);
    CHECK_EQ_INT(exact, 0);
    /* ... and never past DSC__SLOT_FIELD_MAX. */
    CHECK_EQ_INT(dsc__var_default_budget(1u << 20, 1ull << 30, 1e9, &exact), DSC__SLOT_FIELD_MAX);
    /* An empty field: 0 (create rounds it up to one row). */
    CHECK_EQ_INT(dsc__var_default_budget(32, 0, 0.0, &exact), 0);
    CHECK_EQ_INT(exact, 1);
    if (dsc_test_failures)
        return 1;
    printf("ok\n");
    return 0;
}
