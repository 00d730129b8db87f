/*
 * util_err: the per-thread "last error" text behind util_err_set() and
 * util_err_last(). Functions return negative errno codes; this buffer holds
 * the human-readable detail so the caller can print it once, at the top.
 */
#include "util.h"

#include <stdarg.h>
#include <string.h>

#define UTIL_ERR_LEN 1024

static _Thread_local char err_text[UTIL_ERR_LEN];

int util_err_set(int code, const char *fmt, ...)
{
    /* Format into a scratch buffer first: callers often wrap the previous
     * message ("ctx: %s", util_err_last()), and vsnprintf must not write
     * into its own source. */
    char tmp[UTIL_ERR_LEN];
    va_list ap;

    if (fmt == NULL) {
        err_text[0] = '\0';
        return code;
    }
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n < 0)
        tmp[0] = '\0';
    memcpy(err_text, tmp, sizeof(err_text));
    return code;
}

const char *util_err_last(void)
{
    return err_text;
}

void util_err_clear(void)
{
    err_text[0] = '\0';
}
