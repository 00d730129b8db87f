/*
 * fuzz: what every libFuzzer target in tests/fuzz/ shares.
 *
 * Each fuzz_<name>.c defines LLVMFuzzerTestOneInput and includes this
 * header after the project headers. Built by tests/fuzz/fuzz.mk (clang,
 * -DFUZZ_LIBFUZZER), libFuzzer supplies main(). Built any other way (gcc,
 * valgrind, a debugger without the fuzzer runtime), this header supplies a
 * main() that runs each file named on the command line through the target
 * once, so a reproducer replays anywhere.
 *
 * Helpers are static inline: one header, no object of its own, because
 * every .c in tests/fuzz/ is a program of its own.
 */
#ifndef CSISIDECAR_FUZZ_H
#define CSISIDECAR_FUZZ_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

/* The JSON nesting a target accepts: deep enough for any real object,
 * shallow enough that the recursive code under test is exercised, not the
 * stack. The API server's own decoder limit is far above real objects too. */
#define FUZZ_JSON_DEPTH 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A NUL-terminated copy of the input (caller frees); NULL on no memory. */
static inline char *fuzz_cstr(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (s == NULL)
        return NULL;
    if (size > 0)
        memcpy(s, data, size);
    s[size] = '\0';
    return s;
}

/* The input parsed as one JSON value (any type), or NULL when it is not
 * JSON. The caller owns the result. */
static inline json_object *fuzz_json(const uint8_t *data, size_t size)
{
    if (size > INT_MAX)
        return NULL;
    json_tokener *tok = json_tokener_new_ex(FUZZ_JSON_DEPTH);
    if (tok == NULL)
        return NULL;
    json_object *o = json_tokener_parse_ex(tok, (const char *)data, (int)size);
    if (json_tokener_get_error(tok) != json_tokener_success) {
        json_object_put(o);
        o = NULL;
    }
    json_tokener_free(tok);
    return o;
}

/*
 * Splits the input at the first byte `sep`: *head is the part before it
 * (NUL-terminated copy, caller frees), *rest and *rest_len the bytes after
 * it (borrowed). Without `sep` *head is the whole input and *rest_len 0.
 */
static inline char *fuzz_split(const uint8_t *data, size_t size, uint8_t sep, const uint8_t **rest,
                               size_t *rest_len)
{
    const uint8_t *p = size > 0 ? memchr(data, sep, size) : NULL;
    size_t n = p != NULL ? (size_t)(p - data) : size;
    *rest = p != NULL ? p + 1 : data + size;
    *rest_len = p != NULL ? size - n - 1 : 0;
    return fuzz_cstr(data, n);
}

#ifndef FUZZ_LIBFUZZER
/* Replays each file named on the command line once (the gcc build). */
int main(int argc, char **argv)
{
    for (int i = 1; i < argc; i++) {
        FILE *f = fopen(argv[i], "rb");
        if (f == NULL) {
            perror(argv[i]);
            return 1;
        }
        uint8_t *buf = NULL;
        size_t len = 0;
        size_t cap = 0;
        for (;;) {
            if (len == cap) {
                cap = cap == 0 ? 4096 : cap * 2;
                uint8_t *nb = realloc(buf, cap);
                if (nb == NULL) {
                    free(buf);
                    (void)fclose(f);
                    return 1;
                }
                buf = nb;
            }
            size_t got = fread(buf + len, 1, cap - len, f);
            if (got == 0)
                break;
            len += got;
        }
        (void)fclose(f);
        (void)LLVMFuzzerTestOneInput(buf, len);
        free(buf);
        printf("%s: ok\n", argv[i]);
    }
    return 0;
}
#endif

#endif
