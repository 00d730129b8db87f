/*
 * drvkit: what the example drivers written in C (hack/example-driver,
 * hack/example-cosi-driver) share beyond common/csi's server: fault
 * injection from a flag and a control file, request string checks, and
 * durable state files.
 *
 * Both are test-double machinery: the sidecars never link them, but two
 * drivers need the same behaviour, so it lives here once.
 */
#ifndef CSISIDECAR_DRVKIT_H
#define CSISIDECAR_DRVKIT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "util/util.h"

/* ---- fault injection ----------------------------------------------------- */

typedef struct drvkit_faults drvkit_faults;

/* Injected failure messages are cut to this many bytes: long enough to test
 * a sidecar against the API's 1024-byte limit on stored error messages. */
#define DRVKIT_FAULT_MSG_MAX 4096

/* What the driver's dispatcher does to one call. */
typedef struct drvkit_fault_action {
    util_duration delay;
    int fail_code; /* CSI_OK: no injected failure */
    char fail_msg[DRVKIT_FAULT_MSG_MAX + 1];
    bool crash_before; /* _exit(137) before the call has any effect */
    bool crash_after;  /* _exit(137) after it took effect and was persisted */
} drvkit_fault_action;

/*
 * `methods` names the driver's methods (index = method number, as the
 * driver counts them); it must outlive the table. `spec` is the --fault
 * flag ("Method:rule;Method:rule...", may be NULL or empty); `file` is the
 * control file, re-read whenever it changes. -EINVAL with util_err_last()
 * for a bad spec.
 */
int drvkit_faults_new(const char *const *methods, int n_methods, const char *spec, const char *file,
                      drvkit_faults **out);
void drvkit_faults_free(drvkit_faults *f);
/* Counts this call against the rules of method `m` and says what to do. */
void drvkit_faults_on_call(drvkit_faults *f, int m, drvkit_fault_action *out);

/* ---- requests -------------------------------------------------------------- */

/* Every string of `m` and of the messages it holds is valid UTF-8. */
bool drvkit_strings_valid(const ProtobufCMessage *m);

/* ---- files ------------------------------------------------------------------ */

/* Creates or truncates `path` and writes `data`; fsync when `sync`.
 * 0 or -errno with util_err_last(). */
int drvkit_write_file(const char *path, const char *data, size_t len, bool sync);
/* fsync of a directory, so that a rename in it is durable. */
int drvkit_sync_dir(const char *dir);
/*
 * Replaces `path` whole: writes "<dir>/.<name>.tmp", renames it over
 * `path`, and with `sync` fsyncs the file and the directory first and
 * after, so a reader (or a crash) sees the old or the new file, never half.
 * `mode` is the file's permission bits (0600 for files holding secrets).
 */
int drvkit_replace_file(const char *path, const char *data, size_t len, unsigned mode, bool sync);
/* The whole of a file, NUL-terminated (caller frees); -ENOENT when absent. */
int drvkit_read_file(const char *path, char **data, size_t *len);
/* mkdir -p; 0 or -errno. */
int drvkit_mkdir_p(const char *path, unsigned mode);
/* rm -r without following symbolic links; 0 when `path` is absent. */
int drvkit_remove_tree(const char *path);

#endif
