/* Minimal test helpers: checks that survive NDEBUG, and SKIP with a printed reason (exit 77). */
#ifndef DSC_TESTLIB_H
#define DSC_TESTLIB_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int dsc_test_failures __attribute__((unused));

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);               \
            dsc_test_failures++;                                                                   \
        }                                                                                          \
    } while (0)

/* Fatal variant: stops the test at the first failure (use when later steps depend on it). */
#define REQUIRE(cond)                                                                              \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #cond);             \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                                         \
    do {                                                                                           \
        long long _a = (long long)(a), _b = (long long)(b);                                        \
        if (_a != _b) {                                                                            \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %lld, %s == %lld\n", __FILE__,          \
                    __LINE__, #a, _a, #b, _b);                                                     \
            dsc_test_failures++;                                                                   \
        }                                                                                          \
    } while (0)

#define SKIP(...)                                                                                  \
    do {                                                                                           \
        printf("SKIP: ");                                                                          \
        printf(__VA_ARGS__);                                                                       \
        printf("\n");                                                                              \
        exit(77);                                                                                  \
    } while (0)

/* Ends a test main(): prints a summary and returns the exit code. */
#define TEST_DONE()                                                                                \
    (dsc_test_failures ? (fprintf(stderr, "FAILED: %d check(s)\n", dsc_test_failures), 1)          \
                       : (printf("ok\n"), 0))

#endif
