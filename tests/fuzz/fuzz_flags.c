/*
 * fuzz_flags: Go `flag` syntax parsing from an arbitrary command line. The
 * input is split at NUL bytes into argv[1..]; one flag of every kind is
 * registered. --help and --version print to stdout, as they would.
 */
#include <stdlib.h>
#include <string.h>

#include "util/util.h"

#include "fuzz.h"

#define MAX_ARGS 32

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1024)
        return 0;
    char *buf = fuzz_cstr(data, size);
    if (buf == NULL)
        return 0;
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    argv[argc++] = "fuzz";
    for (size_t i = 0; i <= size && argc <= MAX_ARGS; i += strlen(buf + i) + 1)
        argv[argc++] = buf + i;
    argv[argc] = NULL;

    bool b = false;
    int n = 1;
    int64_t n64 = 2;
    double dbl = 0.5;
    const char *str = "x";
    util_duration dur = UTIL_SECOND;
    util_flags *f = util_flags_new("fuzz", "v0");
    if (f != NULL) {
        (void)util_flags_bool(f, "b", &b, "a boolean");
        (void)util_flags_int(f, "n", &n, "an int");
        (void)util_flags_int64(f, "n64", &n64, "an int64");
        (void)util_flags_double(f, "d", &dbl, "a double");
        (void)util_flags_string(f, "s", &str, "a string");
        (void)util_flags_duration(f, "t", &dur, "a duration");
        (void)util_flags_deprecated(f, "old", true, "deprecated");
        (void)util_flags_deprecated(f, "old-bool", false, "deprecated");
        int first = 0;
        if (util_flags_parse(f, argc, argv, &first) == 0) {
            (void)util_flags_is_set(f, "b");
            (void)util_flags_is_set(f, "s");
        }
        util_flags_free(f);
    }
    free(buf);
    return 0;
}
