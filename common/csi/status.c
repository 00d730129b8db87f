/*
 * gRPC status codes and endpoint syntax: the small pure pieces of csi that
 * both the client and the server use.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "csi/csi.h"

static const char *const code_names[] = {
    "OK",
    "CANCELLED",
    "UNKNOWN",
    "INVALID_ARGUMENT",
    "DEADLINE_EXCEEDED",
    "NOT_FOUND",
    "ALREADY_EXISTS",
    "PERMISSION_DENIED",
    "RESOURCE_EXHAUSTED",
    "FAILED_PRECONDITION",
    "ABORTED",
    "OUT_OF_RANGE",
    "UNIMPLEMENTED",
    "INTERNAL",
    "UNAVAILABLE",
    "DATA_LOSS",
    "UNAUTHENTICATED",
};

#define N_CODES ((int)(sizeof(code_names) / sizeof(code_names[0])))

const char *csi_code_name(int code)
{
    if (code < 0 || code >= N_CODES)
        return "UNKNOWN_CODE";
    return code_names[code];
}

static const char *const go_names[] = {
    "OK",       "Canceled",        "Unknown",          "InvalidArgument",   "DeadlineExceeded",
    "NotFound", "AlreadyExists",   "PermissionDenied", "ResourceExhausted", "FailedPrecondition",
    "Aborted",  "OutOfRange",      "Unimplemented",    "Internal",          "Unavailable",
    "DataLoss", "Unauthenticated",
};

const char *csi_code_go_name(int code)
{
    if (code < 0 || code >= N_CODES)
        return "Unknown";
    return go_names[code];
}

char *csi_status_text(const csi_status *st)
{
    return util_asprintf("rpc error: code = %s desc = %s", csi_code_go_name(st->code), st->message);
}

int csi_code_from_name(const char *name, int *code)
{
    for (int i = 0; name && i < N_CODES; i++) {
        if (strcmp(name, code_names[i]) == 0) {
            *code = i;
            return 0;
        }
    }
    return util_err_set(-EINVAL, "unknown gRPC code name \"%s\"", name ? name : "");
}

int csi_status_set(csi_status *st, int code, const char *fmt, ...)
{
    st->code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->message, sizeof(st->message), fmt, ap);
    va_end(ap);
    return code == CSI_OK ? 0 : -EREMOTEIO;
}

int csi_endpoint_parse(const char *flag_name, const char *value, char **target, char **path)
{
    const char *p = NULL;
    if (value && util_has_prefix(value, "unix://"))
        p = value + strlen("unix://");
    else if (value && value[0] == '/')
        p = value;
    if (!p || p[0] != '/' || p[1] == '\0')
        return util_err_set(-EINVAL,
                            "--%s: \"%s\" is not a unix socket endpoint; use unix:///abs/path or "
                            "/abs/path",
                            flag_name, value ? value : "");
    if (strlen(p) >= 108) /* sizeof(sockaddr_un.sun_path) */
        return util_err_set(-EINVAL, "--%s: socket path \"%s\" is longer than 107 bytes", flag_name,
                            p);
    *target = util_asprintf("unix://%s", p);
    if (path)
        *path = util_strdup(p);
    return 0;
}
