/*
 * example-cosi-driver: a COSI (cosi.v1alpha1) driver whose "object store"
 * is a folder per bucket under --state-dir, built on common/csi's server
 * helpers and common/drvkit. It is the test double of the COSI sidecar's
 * tests, so it is strict: idempotency and error codes as the spec says.
 *
 * Modules (one header for all of them):
 *   main.c     flags, start-up, signals
 *   service.c  the one dispatcher every call goes through (counters,
 *              faults, UTF-8 check, commit before replying) and Identity
 *   bucket.c   DriverCreateBucket, DriverDeleteBucket
 *   access.c   DriverGrantBucketAccess, DriverRevokeBucketAccess
 *   state.c    the model (a JSON tree), state.json and status.json
 */
#ifndef EXAMPLE_COSI_DRIVER_H
#define EXAMPLE_COSI_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>

#include <json-c/json.h>

#include "cosi/cosi.h"
#include "drvkit/drvkit.h"

/* ---- methods ----------------------------------------------------------------- */

#define COSID_METHODS(X)                                                                           \
    X(DriverGetInfo)                                                                               \
    X(DriverCreateBucket)                                                                          \
    X(DriverDeleteBucket)                                                                          \
    X(DriverGrantBucketAccess)                                                                     \
    X(DriverRevokeBucketAccess)

typedef enum {
#define COSID_M_ENUM(name) COSID_M_##name,
    COSID_METHODS(COSID_M_ENUM)
#undef COSID_M_ENUM
        COSID_N_METHODS
} cosid_method;

/* The short names, indexed by cosid_method (counters, fault specs). */
const char *const *cosid_method_names(void);

/* ---- the store ---------------------------------------------------------------- */

/*
 * The model is a JSON tree, the very document state.json holds:
 *   {"version": 1, "buckets": [{"id", "name", "protocol", "parameters",
 *    "path", "grants": [{"account_id", "name", "authentication_type",
 *    "parameters", "credentials": {protocol key: {name: value}}}]}]}
 * One mutex guards it. status.json is the same with call counters and
 * every credential value replaced by its SHA-256.
 */
typedef struct cosid_store cosid_store;

/* Loads <dir>/state.json when present (a damaged file is an error: starting
 * empty would lose buckets), creates buckets/, writes a first status.json. */
int cosid_store_new(const char *dir, bool sync, cosid_store **out);
void cosid_store_free(cosid_store *s);
const char *cosid_store_dir(const cosid_store *s);
/* The "buckets" array, locked until cosid_store_unlock. */
json_object *cosid_store_lock(cosid_store *s);
void cosid_store_unlock(cosid_store *s);
/* With the lock held, after a mutation. */
void cosid_store_changed(cosid_store *s);
void cosid_store_count_call(cosid_store *s, cosid_method m);
/* Puts every mutation and count so far on disk. A state that cannot be
 * written ends the process: callers were told nothing yet. */
void cosid_store_commit(cosid_store *s);

/* Lookups in the buckets array (NULL when absent). */
json_object *cosid_bucket_by_id(json_object *buckets, const char *id);
json_object *cosid_bucket_by_name(json_object *buckets, const char *name);
/* A fresh "<prefix>-<16 hex>" from getrandom. */
char *cosid_random_id(const char *prefix);
/* `n` random characters of `alphabet`, from getrandom. */
char *cosid_random_text(const char *alphabet, size_t n);
/* Lower-case hex SHA-256 of `s` (caller frees). */
char *cosid_sha256_hex(const char *s, size_t len);

/* ---- context and handlers ---------------------------------------------------------- */

typedef struct cosid_config {
    const char *endpoint;
    const char *driver_name;
    const char *state_dir;
    bool sync;
} cosid_config;

typedef struct cosid {
    const cosid_config *cfg;
    cosid_store *store;
    drvkit_faults *faults;
    atomic_bool stopping; /* injected delays end early when set */
} cosid;

/* The csi_handler_fn of every route: `ud` is the cosid. */
void cosid_dispatch(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply);

/* Handlers answer exactly once; the dispatcher commits before the reply
 * leaves. */
void cosid_create_bucket(cosid *d, const ProtobufCMessage *req, csi_reply *reply);
void cosid_delete_bucket(cosid *d, const ProtobufCMessage *req, csi_reply *reply);
void cosid_grant_access(cosid *d, const ProtobufCMessage *req, csi_reply *reply);
void cosid_revoke_access(cosid *d, const ProtobufCMessage *req, csi_reply *reply);

/* A proto map<string,string> as a JSON object of strings (caller puts). */
json_object *cosid_map_to_json(ProtobufCMessage *const *entries, size_t n);
/* Same keys with the same string values. */
bool cosid_json_map_equal(const json_object *a, const json_object *b);
/* A name field that is empty or holds a control character: why, else NULL. */
const char *cosid_name_check(const char *name);

#endif
