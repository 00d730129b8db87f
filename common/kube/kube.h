/*
 * kube: the Kubernetes API as the sidecars use it, over libcurl and json-c.
 *
 *   config    where the API server is and how to authenticate: in-cluster
 *             (service-account token re-read as it rotates) or a kubeconfig
 *             parsed with libyaml (tokens, token files, client certificates,
 *             exec credential plugins).
 *   client    one request path for every verb, Status errors decoded,
 *             429/5xx retried within a bound (Retry-After honoured), a
 *             client-side token bucket with upstream's qps/burst meaning
 *             shared by all threads, connections reused.
 *   watch     newline-delimited JSON events parsed incrementally, cancellable.
 *   informer  list + watch into a thread-safe cache with indexes and handlers;
 *             objects are cached as compact JSON text after a transform, since
 *             a json-c tree costs ~10x its text.
 *   events    core/v1 Events, aggregated, rate limited, never blocking.
 *   leader    coordination.k8s.io/v1 Lease leader election.
 *
 * Objects are json-c trees outside the cache. Functions return 0 or a
 * negative errno; API errors come back as -EREMOTEIO with a kube_resp
 * holding the HTTP code, the Status reason and message.
 */
#ifndef CSISIDECAR_KUBE_H
#define CSISIDECAR_KUBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "obs/obs.h"
#include "util/util.h"

/* ---- resources -------------------------------------------------------------- */

typedef struct kube_resource {
    const char *group; /* "" for core */
    const char *version;
    const char *resource; /* plural */
    const char *kind;
    bool namespaced;
    /* kobj_check rules for the fields the sidecars read, beyond metadata
     * (NULL: none): an informer refuses an object that breaks one, as Go's
     * typed decoder would, and lists again rather than keep it. */
    const char *const *fields;
} kube_resource;

extern const kube_resource KUBE_PVC, KUBE_PV, KUBE_STORAGECLASS, KUBE_NODE, KUBE_CSINODE,
    KUBE_CSIDRIVER, KUBE_VOLUMEATTACHMENT, KUBE_POD, KUBE_SECRET, KUBE_EVENT, KUBE_LEASE,
    KUBE_CSISTORAGECAPACITY, KUBE_VOLUMESNAPSHOT, KUBE_VOLUMESNAPSHOTCONTENT,
    KUBE_VOLUMEATTRIBUTESCLASS, KUBE_NAMESPACE, KUBE_BUCKET, KUBE_BUCKETCLAIM, KUBE_BUCKETCLASS,
    KUBE_BUCKETACCESS, KUBE_BUCKETACCESSCLASS;

/*
 * "/api/v1/namespaces/<ns>/persistentvolumeclaims/<name>/<sub>": any of ns
 * (ignored for cluster-scoped), name and sub may be NULL. Names are escaped.
 * Caller frees.
 */
char *kube_path(const kube_resource *r, const char *ns, const char *name, const char *sub);

/*
 * 0 when `obj` is an object of `r` that can be trusted as an answer: a
 * metadata.name of at most 253 bytes (equal to `name` unless NULL), a
 * namespace exactly when `r` is namespaced, metadata fields of their
 * types and `r`'s field rules kept. Else -EBADMSG with a message: such an
 * answer is retried, never read as "absent" or "not ours", as Go's typed
 * decoder would fail on it.
 */
int kube_object_check(const kube_resource *r, const json_object *obj, const char *name);

/* ---- config ------------------------------------------------------------------ */

typedef struct kube_config kube_config;

/*
 * Upstream's order: `kubeconfig` (the --kubeconfig flag) if set, else
 * $KUBECONFIG if `use_env` and set, else `master` alone (server only, no
 * credentials, as client-go's BuildConfigFromFlags), else in-cluster.
 * `master` (may be NULL) overrides the server URL. A broken kubeconfig is
 * -EINVAL with a message naming the file, the key and what is wrong.
 */
int kube_config_load(const char *kubeconfig, const char *master, bool use_env, kube_config **out);
/* KUBERNETES_SERVICE_HOST/_PORT and /var/run/secrets/kubernetes.io/serviceaccount
 * (`sa_dir` overrides that directory for tests; NULL for the default). */
int kube_config_in_cluster(const char *sa_dir, kube_config **out);
int kube_config_from_file(const char *path, const char *master, kube_config **out);
void kube_config_free(kube_config *c);

const char *kube_config_server(const kube_config *c); /* "https://host:port" */
/* The namespace of the current context or the in-cluster namespace file,
 * else "default". */
const char *kube_config_namespace(const kube_config *c);

typedef struct kube_tls {
    bool insecure;           /* insecure-skip-tls-verify */
    const char *server_name; /* tls-server-name or NULL */
    const char *ca_file;     /* NULL or a path */
    const char *ca_pem;      /* NULL or PEM text (certificate-authority-data) */
    const char *cert_file;   /* client certificate */
    const char *cert_pem;
    const char *key_file;
    const char *key_pem;
} kube_tls;

const kube_tls *kube_config_tls(const kube_config *c);
/*
 * The bearer token to send now (malloc'ed, NULL when the config has none):
 * a static token, a token file re-read when it changed, or an exec plugin's
 * token cached until its expirationTimestamp. Thread-safe. -EACCES with a
 * message when a plugin or file fails.
 */
int kube_config_token(kube_config *c, char **token);

/* ---- client ------------------------------------------------------------------ */

typedef struct kube_client kube_client;

typedef struct kube_client_opts {
    double qps;             /* <= 0: no client-side limit */
    int burst;              /* bucket size; < 1 means 1 */
    const char *user_agent; /* "<binary>/<version>" */
    util_duration timeout;  /* per request; 0: 30 s (watches have none) */
    int max_retries;        /* for 429/5xx and transport errors; < 0: 0; 0: 10 */
    obs_registry *metrics;  /* may be NULL */
} kube_client_opts;

/* `cfg` is borrowed and must outlive the client. */
int kube_client_new(kube_config *cfg, const kube_client_opts *opts, kube_client **out);
void kube_client_free(kube_client *c);
/* Closes idle connections beyond `keep`: after a burst that opened many,
 * what they hold goes back instead of waiting for the next burst. */
void kube_client_trim(kube_client *c, size_t keep);

typedef struct kube_resp {
    /* In, set before the request: the caller reads nothing of a successful
     * answer but its code, so a 2xx body is not parsed (body stays NULL);
     * an error's Status still is. kube_resp_clear resets it. */
    bool skip_body;
    int code;           /* HTTP status; 0 when no answer came */
    json_object *body;  /* parsed body, or NULL */
    char reason[64];    /* Status reason ("NotFound", "Conflict", ...) or "" */
    char message[1024]; /* Status message or the transport error */
} kube_resp;

void kube_resp_clear(kube_resp *r);

enum kube_patch_type { KUBE_PATCH_MERGE, KUBE_PATCH_JSON, KUBE_PATCH_STRATEGIC };

/*
 * One request. `path` includes any query string. Returns 0 on 2xx,
 * -EREMOTEIO on any other answer, -EIO when no answer came after the
 * retries (r->message says why). r is always filled (clear it).
 */
int kube_request(kube_client *c, const char *method, const char *path, const char *content_type,
                 const char *body, kube_resp *r);
/*
 * Who goes first when the client-side rate limit (qps/burst) binds. A
 * background request (Events) takes only a spare token: it waits while any
 * normal request waits, so it never delays the writes that do the work; it
 * is the caller's business to coalesce or drop what cannot wait.
 */
enum kube_priority { KUBE_PRIO_NORMAL, KUBE_PRIO_BACKGROUND };
int kube_request_prio(kube_client *c, enum kube_priority prio, const char *method, const char *path,
                      const char *content_type, const char *body, kube_resp *r);
int kube_get(kube_client *c, const char *path, kube_resp *r);
/*
 * A GET of the object of `res` named `name` at `path` whose answer decides
 * something: 0 only when r->body passes kube_object_check, as an informer
 * checks what it caches; -EBADMSG (r->message says why) when the answer is
 * no such object: retry, never read it as "absent" or "already done";
 * else kube_get's error (kube_is_not_found for a 404).
 */
int kube_get_object(kube_client *c, const kube_resource *res, const char *path, const char *name,
                    kube_resp *r);
int kube_create(kube_client *c, const char *collection_path, const json_object *obj, kube_resp *r);
int kube_update(kube_client *c, const char *path, const json_object *obj, kube_resp *r);
int kube_patch(kube_client *c, const char *path, enum kube_patch_type type, const char *patch,
               kube_resp *r);
const char *kube_patch_content_type(enum kube_patch_type type);
/* `options` (may be NULL) is a DeleteOptions JSON text. */
int kube_delete(kube_client *c, const char *path, const char *options, kube_resp *r);

/* True for the codes upstream treats alike. */
bool kube_is_not_found(const kube_resp *r);
bool kube_is_conflict(const kube_resp *r);
bool kube_is_already_exists(const kube_resp *r);

/* ---- watch ------------------------------------------------------------------- */

typedef struct kube_watch kube_watch;

/* Called per event; `obj` is borrowed. Non-zero stops the watch. */
typedef int (*kube_watch_fn)(void *ud, const char *type, json_object *obj);

kube_watch *kube_watch_new(kube_client *c);
/*
 * Streams `path` (a collection path with ?watch=true and the other query
 * parameters) until the server ends it (0), fn returns non-zero (that value),
 * kube_watch_cancel (-ECANCELED), an ERROR event with code 410 (-ERANGE) or
 * another ERROR event (-EREMOTEIO), or a transport failure (-EIO). Blocking.
 */
int kube_watch_run(kube_watch *w, const char *path, kube_watch_fn fn, void *ud);
/* What kube_watch_run answers when kube_watch_end_when_quiet ended it. */
#define KUBE_WATCH_QUIET 1
/*
 * Makes each later kube_watch_run that delivered at least `min_events`
 * events end by itself (KUBE_WATCH_QUIET) once `quiet` passed without a
 * byte from the server; quiet 0 turns it off (the default). For a caller
 * that goes on from the last resourceVersion on a fresh thread after a
 * burst: glibc gives a thread's malloc cache back only when it exits.
 */
void kube_watch_end_when_quiet(kube_watch *w, util_duration quiet, size_t min_events);
/* From any thread: ends a running kube_watch_run promptly. */
void kube_watch_cancel(kube_watch *w);
void kube_watch_free(kube_watch *w);

/* ---- informer ---------------------------------------------------------------- */

typedef struct kube_informer kube_informer;

typedef struct kube_handlers {
    /* Objects are borrowed, valid for the call. `old` is the cached state. */
    void (*on_add)(void *ud, json_object *obj);
    void (*on_update)(void *ud, json_object *old, json_object *obj);
    void (*on_delete)(void *ud, json_object *obj);
    void *ud;
    /* on_update never reads `old`: it gets NULL, and the cached copy is not
     * parsed again for it (one JSON parse per event less). */
    bool old_unused;
} kube_handlers;

/* Computes index keys of `obj` for one index: calls add(key) for each. */
typedef void (*kube_index_fn)(const json_object *obj, void (*add)(void *ctx, const char *key),
                              void *ctx);

typedef struct kube_informer_opts {
    const kube_resource *res;
    const char *ns;             /* NULL: all namespaces */
    const char *label_selector; /* NULL: all */
    const char *field_selector; /* NULL: all */
    /* In-place slimming before caching (drop managedFields etc.); NULL: the
     * informer drops metadata.managedFields only. */
    void (*transform)(void *ud, json_object *obj);
    void *transform_ud;
    /* Which objects to cache at all (NULL: every one), asked before the
     * transform with transform_ud. An object that stops passing leaves the
     * cache with an on_delete call, as if deleted on the server: a sidecar
     * need not hold the cluster's objects that can never concern it. */
    bool (*keep)(void *ud, const json_object *obj);
    util_duration resync; /* 0: none; resync calls on_update(obj, obj) */
    int page_size;        /* list pages; 0: 500 */
    kube_handlers handlers;
} kube_informer_opts;

int kube_informer_new(kube_client *c, const kube_informer_opts *opts, kube_informer **out);
/* Adds an index (before start). */
int kube_informer_add_index(kube_informer *inf, const char *name, kube_index_fn fn);
/* Starts the list+watch thread. */
int kube_informer_start(kube_informer *inf);
bool kube_informer_has_synced(kube_informer *inf);
/* Waits until the first list is cached: 0, or -ETIMEDOUT. */
int kube_informer_wait_for_sync(kube_informer *inf, util_duration timeout);
void kube_informer_stop(kube_informer *inf);
void kube_informer_free(kube_informer *inf);

/* A parsed copy of the cached object (json_object_put it), or NULL. */
json_object *kube_informer_get(kube_informer *inf, const char *ns, const char *name);
/* Whether the object is cached, without parsing it. */
bool kube_informer_has(kube_informer *inf, const char *ns, const char *name);
/* Calls fn for every cached object (parsed copies, borrowed for the call). */
void kube_informer_each(kube_informer *inf, void (*fn)(void *ud, json_object *obj), void *ud);
/* Calls fn for the objects whose index `name` has `key`. */
int kube_informer_by_index(kube_informer *inf, const char *name, const char *key,
                           void (*fn)(void *ud, json_object *obj), void *ud);

/*
 * Own writes: what a controller wrote, kept until its informer shows that
 * version or a newer one, so a sync that runs before the watch caught up
 * decides on the object as it now is, not on the copy before our write
 * (which would repeat a driver call, or undo a step). Keys are the
 * caller's ("pvc:ns/name"); versions compare as the API server's numbers.
 * Thread-safe.
 */
typedef struct kube_overlay kube_overlay;
kube_overlay *kube_overlay_new(void);
void kube_overlay_free(kube_overlay *o);
/* Keeps a write's answer (an object with a resourceVersion; else nothing). */
void kube_overlay_put(kube_overlay *o, const char *key, const json_object *answer);
/* The fresher of `cached` (owned, NULL stays NULL) and our last write of
 * `key`; an entry the cache caught up with is dropped. */
json_object *kube_overlay_fresh(kube_overlay *o, const char *key, json_object *cached);
void kube_overlay_forget(kube_overlay *o, const char *key);
size_t kube_informer_count(kube_informer *inf);
/* After a burst: the cache's and indexes' hash tables shrink to fit what
 * they hold now (kobj_table_shrink). */
void kube_informer_trim(kube_informer *inf);
/* Bytes held by the cache (text, keys, indexes); benchmarks. */
size_t kube_informer_bytes(kube_informer *inf);

/* "ns/name" or "name" for an object; caller frees. */
char *kube_key(const json_object *obj);

/* ---- events ------------------------------------------------------------------- */

typedef struct kube_recorder kube_recorder;

/* `component` is the source component ("external-provisioner"); `host`
 * the source host (may be NULL). */
kube_recorder *kube_recorder_new(kube_client *c, const char *component, const char *host);
/*
 * Records an Event about `obj` (type "Normal" or "Warning"). Returns at once:
 * a background thread writes it; repeats of the same (object, type, reason,
 * message) update count and lastTimestamp of the existing Event; beyond a
 * rate limit events are dropped and counted.
 */
void kube_event(kube_recorder *r, const json_object *obj, const char *type, const char *reason,
                const char *fmt, ...) UTIL_ATTR_PRINTF(5, 6);
/* Writes what is queued (bounded by `timeout`) and stops. */
void kube_recorder_free(kube_recorder *r, util_duration timeout);

/* ---- leader election ------------------------------------------------------------ */

typedef struct kube_leader kube_leader;

typedef struct kube_leader_opts {
    const char *lock_name; /* sanitized into the Lease name as upstream */
    const char *ns;        /* NULL: upstream's order (POD_NAMESPACE, SA namespace, default) */
    const char *identity;  /* NULL: sanitized hostname */
    util_duration lease_duration; /* 0: 15 s */
    util_duration renew_deadline; /* 0: 10 s */
    util_duration retry_period;   /* 0: 5 s */
    const char *labels;           /* "k:v,k2:v2" for the Lease, or NULL */
    bool release_on_stop;
    obs_registry *metrics;
    kube_recorder *events; /* "became leader" events on the Lease, may be NULL */
    void (*on_started_leading)(void *ud);
    void (*on_stopped_leading)(void *ud); /* upstream: log "Stopped leading", exit 1 */
    void *ud;
} kube_leader_opts;

/* Upstream's sanitizing: [^a-zA-Z0-9-] -> '-', a trailing '-' gets an 'X'. */
char *kube_leader_lease_name(const char *lock_name);

/* Runs the election on its own thread (with its own client `c`). */
/* The namespace of the lease (and of anything a sidecar keeps beside it):
 * `flag` when set, else $POD_NAMESPACE, else the service account's
 * namespace file, else "default". Free it. */
char *kube_leader_namespace(const char *flag);
int kube_leader_start(kube_client *c, const kube_leader_opts *opts, kube_leader **out);
bool kube_leader_is_leader(kube_leader *l);
/* Healthy unless the lease was not renewed for lease_duration + `slack` (upstream: 20 s). */
bool kube_leader_healthy(kube_leader *l, util_duration slack);
/* Stops; releases the lease when configured and held. */
void kube_leader_stop(kube_leader *l);

#endif
