/*
 * The intent record's I/O: one coordination.k8s.io/v1 Lease per provisioner
 * (per node with --node-deployment) in the leader-election namespace, whose
 * annotation lists the claims whose CreateVolume may have made a volume
 * that no PV records yet (intent_plan.c has the pure part).
 *
 * Group commit: a worker about to call CreateVolume joins the set and
 * waits until a write carried its entry. Whoever finds no write under way
 * does the next one, for everyone who joined meanwhile, so N concurrent
 * creates cost one write. Entries are dropped lazily: done ones leave with
 * the next write, or with an idle write once nothing has happened for
 * INTENT_IDLE. The thread that does the idle write ("intent-idle") runs only
 * while done entries are left in the record: a done entry starts it, and it
 * exits once none is left (a thread kept idle would keep glibc's malloc
 * cache of its last write for good). Writes are PUTs with the
 * resourceVersion last seen; a 409 (only after a leader change or a hand
 * edit: nobody else writes this record) re-reads the record, keeps its
 * unknown entries (they get recovered) and writes again.
 *
 * Not here: deciding what to do with an entry (ctrl_claims.c).
 */
#include "ctrl_internal.h"

#include <errno.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* After this long without a join or a done entry, done entries are written out. */
#define INTENT_IDLE (5 * UTIL_SECOND)
/* Re-reads after a conflict before the write counts as failed. */
#define INTENT_CONFLICT_TRIES 5

/*
 * A worker waiting for a write to carry its entry. It sleeps on its own
 * semaphore rather than on a condition shared by all: a write wakes exactly
 * the workers it decided (and one more to write next), and none of them
 * needs it->mu again to learn the outcome. With a shared condition every
 * write and every done entry woke all waiting workers, which then queued
 * on it->mu one after the other.
 */
struct intent_waiter {
    struct intent_waiter *next;
    const char *uid;
    uint64_t since;
    sem_t sem;
    /* Set before the post: DURABLE, FAILED (err), INVALID, or PENDING (look
     * again: write next, or stopping). */
    prov_intent_status st;
    int err;
};

struct ctrl_intents {
    prov_ctrl *c;
    kube_client *kube;
    char *ns, *name, *path;
    pthread_mutex_t mu;
    pthread_cond_t room_cv; /* an entry left: a joiner of a full record may retry */
    pthread_cond_t idle_cv; /* only stopping signals it */
    size_t room_waiters;
    struct intent_waiter *waiters;
    prov_intent_set *set;
    /* The Lease as last read or written; only the flusher (one at a time)
     * touches it. NULL until the record was read. */
    json_object *lease;
    util_duration last_activity;
    bool stopping;
    /* The idle writer: running while it will look at the record again (set
     * by the ctrl_intent_done that starts it, cleared by the thread as it
     * leaves or by a start that failed); idle_th is known once
     * idle_starting is back to 0. */
    pthread_t idle_th;
    bool idle_running;
    int idle_starting;
    pthread_cond_t started_cv; /* idle_starting dropped to 0 */
    /* Claim keys to recover, held until the workers run. */
    bool workers_running;
    char **held;
    size_t n_held, cap_held;
    obs_metric *writes;  /* csi_provisioner_intent_record_writes_total{result} */
    obs_metric *entries; /* csi_provisioner_intent_record_entries */
    /* Test-only crash point (CSI_PROVISIONER_CRASH_AT=<point>:<n>). */
    char crash_point[32];
    long crash_at;
    long crash_seen;
};

/* The entries of a record this process did not know: their claims are
 * synced, which finishes or undoes each (ctrl_sync_claim). */
static void enqueue_recovery(void *ud, const prov_intent *in)
{
    struct ctrl_intents *it = ud;
    char *key = util_asprintf("%s/%s", in->ns, in->name);
    obs_v(2, "intent record %s/%s: recovering claim %s (uid %s, volume %s)", it->ns, it->name, key,
          in->uid, in->volume);
    if (it->workers_running) {
        wq_add(it->c->claims, key);
        free(key);
        return;
    }
    /* Held until the workers run: keys added before the pool starts do
     * not grow it, and each recovery may take a whole CreateVolume. */
    if (it->n_held == it->cap_held) {
        it->cap_held = it->cap_held ? it->cap_held * 2 : 16;
        char **h = realloc(it->held, it->cap_held * sizeof(*h));
        if (!h)
            abort();
        it->held = h;
    }
    it->held[it->n_held++] = key;
}

/* Merges the annotation of `lease` (under it->mu). */
static void merge_locked(struct ctrl_intents *it, const json_object *lease)
{
    const char *text = kobj_annotation(lease, PROV_INTENT_ANNOTATION);
    size_t skipped = 0;
    size_t n = prov_intent_set_merge(it->set, text, &skipped, enqueue_recovery, it);
    if (n)
        obs_info("intent record %s/%s: %zu claims to finish or clean up", it->ns, it->name, n);
    if (skipped)
        obs_warn("intent record %s/%s: %zu malformed entries skipped (edited by hand?)", it->ns,
                 it->name, skipped);
}

/* GETs the record, creating it when absent; it->lease is replaced. */
static int read_record(struct ctrl_intents *it)
{
    kube_resp r = {0};
    int rc = kube_get(it->kube, it->path, &r);
    if (rc < 0 && kube_is_not_found(&r)) {
        kube_resp_clear(&r);
        json_object *obj = json_object_new_object();
        json_object_object_add(obj, "apiVersion", json_object_new_string("coordination.k8s.io/v1"));
        json_object_object_add(obj, "kind", json_object_new_string("Lease"));
        json_object *md = json_object_new_object();
        json_object_object_add(md, "name", json_object_new_string(it->name));
        json_object_object_add(md, "namespace", json_object_new_string(it->ns));
        json_object *ann = json_object_new_object();
        json_object_object_add(ann, PROV_INTENT_ANNOTATION,
                               json_object_new_string("{\"entries\":[]}"));
        json_object_object_add(md, "annotations", ann);
        json_object_object_add(obj, "metadata", md);
        json_object_object_add(obj, "spec", json_object_new_object());
        char *coll = kube_path(&KUBE_LEASE, it->ns, NULL, NULL);
        rc = kube_create(it->kube, coll, obj, &r);
        free(coll);
        json_object_put(obj);
        if (rc < 0 && kube_is_already_exists(&r)) {
            kube_resp_clear(&r);
            rc = kube_get(it->kube, it->path, &r);
        }
    }
    if (rc == 0 && !kobj_typed(r.body, json_type_object))
        rc = -EPROTO;
    if (rc < 0) {
        rc = util_err_set(rc, "reading the intent record %s/%s: %s", it->ns, it->name,
                          r.message[0] ? r.message : "not an object");
        kube_resp_clear(&r);
        return rc;
    }
    json_object_put(it->lease);
    it->lease = json_object_get(r.body);
    kube_resp_clear(&r);
    return 0;
}

/*
 * PUTs `text` as the record, guarded by it->lease's resourceVersion; 0,
 * -EAGAIN on a conflict, or -errno. The body is built from what the record
 * owns, never from the object as read: a read the network or a broken
 * server corrupted must neither be refused for ever nor be written back.
 */
static int put_record(struct ctrl_intents *it, const char *text)
{
    const char *rv = kobj_rv(it->lease);
    if (!rv || !*rv)
        return util_err_set(-EPROTO, "intent record %s/%s: read without a resourceVersion", it->ns,
                            it->name);
    json_object *obj = json_object_new_object();
    json_object_object_add(obj, "apiVersion", json_object_new_string("coordination.k8s.io/v1"));
    json_object_object_add(obj, "kind", json_object_new_string("Lease"));
    json_object *md = json_object_new_object();
    json_object_object_add(md, "name", json_object_new_string(it->name));
    json_object_object_add(md, "namespace", json_object_new_string(it->ns));
    json_object_object_add(md, "resourceVersion", json_object_new_string(rv));
    json_object *ann = json_object_new_object();
    json_object_object_add(ann, PROV_INTENT_ANNOTATION, json_object_new_string(text));
    json_object_object_add(md, "annotations", ann);
    json_object_object_add(obj, "metadata", md);
    json_object_object_add(obj, "spec", json_object_new_object());
    int rc;
    kube_resp r = {0};
    rc = kube_update(it->kube, it->path, obj, &r);
    json_object_put(obj);
    if (it->writes) {
        const char *v[] = {rc == 0 ? "ok" : kube_is_conflict(&r) ? "conflict" : "error"};
        obs_counter_add(it->writes, v, 1);
    }
    if (rc == 0 && kobj_typed(r.body, json_type_object)) {
        json_object_put(it->lease);
        it->lease = json_object_get(r.body);
    } else if (rc < 0 && (kube_is_conflict(&r) || kube_is_not_found(&r))) {
        rc = -EAGAIN;
    } else if (rc < 0) {
        rc = util_err_set(rc, "writing the intent record %s/%s: %s", it->ns, it->name, r.message);
    }
    kube_resp_clear(&r);
    return rc;
}

/*
 * Wakes (under it->mu) every waiter whose entry a write decided, and while
 * no write is under way one waiter still pending, to write next. Each is
 * unlinked before its post: once posted, its frame may be gone.
 */
static void wake_waiters_locked(struct ctrl_intents *it)
{
    bool writer = it->stopping || prov_intent_set_flushing(it->set);
    for (struct intent_waiter **pp = &it->waiters; *pp;) {
        struct intent_waiter *w = *pp;
        int err = 0;
        prov_intent_status st = PROV_INTENT_PENDING;
        if (!it->stopping)
            st = prov_intent_set_status(it->set, w->uid, w->since, &err);
        if (st == PROV_INTENT_PENDING && !it->stopping) {
            if (writer) {
                pp = &w->next;
                continue;
            }
            writer = true;
        }
        *pp = w->next;
        w->st = st;
        w->err = err;
        sem_post(&w->sem);
    }
}

/*
 * One flush, entered and left with it->mu held (released during I/O). The
 * first write of this process reads the record first (it may not have been
 * readable at start); a conflict re-reads it. Entries read that the set did
 * not know are kept (and recovered), so the write that follows keeps them.
 */
static int flush_locked(struct ctrl_intents *it)
{
    char *text = NULL;
    uint64_t seq = 0;
    if (prov_intent_set_flush_begin(it->set, &text, &seq) < 0)
        return -EBUSY;
    int rc = 0;
    for (int tries = 1;; tries++) {
        if (!it->lease) {
            pthread_mutex_unlock(&it->mu);
            rc = read_record(it);
            pthread_mutex_lock(&it->mu);
            if (rc < 0)
                break;
            merge_locked(it, it->lease);
            free(text);
            text = NULL;
            rc = prov_intent_set_flush_text(it->set, &text);
            if (rc < 0)
                break;
        }
        pthread_mutex_unlock(&it->mu);
        rc = put_record(it, text);
        pthread_mutex_lock(&it->mu);
        if (rc < 0 && rc != -EAGAIN) {
            /* Whatever went wrong, the next flush starts from a fresh read
             * rather than repeat a write built on this one. */
            json_object_put(it->lease);
            it->lease = NULL;
        }
        if (rc != -EAGAIN)
            break;
        json_object_put(it->lease);
        it->lease = NULL;
        if (tries >= INTENT_CONFLICT_TRIES) {
            rc = util_err_set(-EAGAIN, "intent record %s/%s: a conflict on every write", it->ns,
                              it->name);
            break;
        }
        obs_v(2, "intent record %s/%s: conflict; reading it again", it->ns, it->name);
    }
    prov_intent_set_flush_end(it->set, seq, rc);
    wake_waiters_locked(it);
    if (it->room_waiters)
        pthread_cond_broadcast(&it->room_cv);
    if (it->entries)
        obs_gauge_set(it->entries, NULL, (double)prov_intent_set_count(it->set));
    if (rc < 0)
        obs_warn("%s", util_err_last());
    free(text);
    return rc;
}

/* Whether the record holds no done entry an idle write would drop, nor may
 * a write under way leave one there. Under it->mu. */
static bool idle_write_needless_locked(const struct ctrl_intents *it)
{
    size_t joiners = 0, done = 0;
    prov_intent_set_pending(it->set, &joiners, &done);
    return done == 0 && !prov_intent_set_flushing(it->set);
}

static void *idle_loop(void *arg)
{
    struct ctrl_intents *it = arg;
    util_thread_name("intent-idle");
    pthread_mutex_lock(&it->mu);
    /* Known before this thread may leave: the handle is the latest one's. */
    it->idle_th = pthread_self();
    if (--it->idle_starting == 0)
        pthread_cond_broadcast(&it->started_cv);
    while (!it->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += 1;
        pthread_cond_timedwait(&it->idle_cv, &it->mu, &ts);
        if (it->stopping)
            break;
        size_t joiners = 0, done = 0;
        prov_intent_set_pending(it->set, &joiners, &done);
        if (done && !joiners && !prov_intent_set_flushing(it->set) &&
            util_now_mono() - it->last_activity >= INTENT_IDLE) {
            obs_v(4, "intent record %s/%s: idle write drops %zu done entries", it->ns, it->name,
                  done);
            flush_locked(it);
        }
        /* Nothing left to drop (a write, this one or a joiner's, took the
         * done entries along): leave; the next done entry starts another. */
        if (!it->stopping && idle_write_needless_locked(it)) {
            it->idle_running = false;
            pthread_mutex_unlock(&it->mu);
            util_thread_leave_trimmed();
            return NULL;
        }
    }
    pthread_mutex_unlock(&it->mu);
    return NULL;
}

/* Starts the idle writer for the ctrl_intent_done that set idle_running
 * (not under it->mu: workers wait on it). */
static void idle_start(struct ctrl_intents *it)
{
    pthread_t th;
    if (pthread_create(&th, NULL, idle_loop, it) == 0)
        return;
    /* The next done entry tries again; a joiner's write drops them meanwhile. */
    pthread_mutex_lock(&it->mu);
    it->idle_running = false;
    if (--it->idle_starting == 0)
        pthread_cond_broadcast(&it->started_cv);
    pthread_mutex_unlock(&it->mu);
    obs_warn("intent record %s/%s: the idle writer thread could not be started", it->ns, it->name);
}

int ctrl_intents_start(prov_ctrl *c)
{
    struct ctrl_intents *it = util_calloc(1, sizeof(*it));
    it->c = c;
    it->kube = c->o.kube;
    it->ns = kube_leader_namespace(c->o.intent_namespace);
    it->name = prov_intent_record_name(c->cfg.driver_name, c->o.node.name);
    it->path = kube_path(&KUBE_LEASE, it->ns, it->name, NULL);
    size_t max = (size_t)(c->o.workers > 0 ? c->o.workers : 1) * 4;
    it->set = prov_intent_set_new(max > 1024 ? max : 1024, PROV_INTENT_BYTES_MAX);
    pthread_mutex_init(&it->mu, NULL);
    pthread_cond_init(&it->room_cv, NULL);
    pthread_cond_init(&it->idle_cv, NULL);
    pthread_cond_init(&it->started_cv, NULL);
    it->last_activity = util_now_mono();
    if (c->o.metrics) {
        static const char *const result[] = {"result", NULL};
        it->writes = obs_counter_new(c->o.metrics, "csi_provisioner_intent_record_writes_total",
                                     "Writes of the provisioner's intent record, by result (ok, "
                                     "conflict, error).",
                                     result);
        it->entries = obs_gauge_new(c->o.metrics, "csi_provisioner_intent_record_entries",
                                    "Claims whose CreateVolume the intent record holds, as of "
                                    "its last write.",
                                    NULL);
    }
    const char *crash = getenv("CSI_PROVISIONER_CRASH_AT");
    if (crash && *crash) {
        /* Test-only (tests/e2e/test_provisioner_crash.sh): SIGKILL ourselves
         * the n-th time a named point is reached. */
        const char *colon = strchr(crash, ':');
        snprintf(it->crash_point, sizeof(it->crash_point), "%.*s",
                 (int)(colon ? (size_t)(colon - crash) : strlen(crash)), crash);
        it->crash_at = colon ? strtol(colon + 1, NULL, 10) : 1;
        obs_warn("CSI_PROVISIONER_CRASH_AT=%s: this process kills itself (tests only)", crash);
    }
    c->intents = it;
    /* Read (or create) the record now, so what a predecessor left is
     * recovered at once; a failure is retried by the first write. */
    int rc = read_record(it);
    pthread_mutex_lock(&it->mu);
    if (rc == 0)
        merge_locked(it, it->lease);
    pthread_mutex_unlock(&it->mu);
    if (rc < 0)
        obs_warn("%s; retried before the first CreateVolume", util_err_last());
    else
        obs_info("intent record %s/%s: %zu entries", it->ns, it->name,
                 prov_intent_set_count(it->set));
    /* No idle writer yet: nothing is done; the first done entry starts it. */
    return 0;
}

void ctrl_intents_workers_started(prov_ctrl *c)
{
    struct ctrl_intents *it = c->intents;
    pthread_mutex_lock(&it->mu);
    it->workers_running = true;
    char **held = it->held;
    size_t n = it->n_held;
    it->held = NULL;
    it->n_held = it->cap_held = 0;
    pthread_mutex_unlock(&it->mu);
    for (size_t i = 0; i < n; i++) {
        wq_add(c->claims, held[i]);
        free(held[i]);
    }
    free(held);
}

void ctrl_intents_stop(prov_ctrl *c)
{
    struct ctrl_intents *it = c ? c->intents : NULL;
    if (!it)
        return;
    pthread_mutex_lock(&it->mu);
    it->stopping = true;
    pthread_cond_broadcast(&it->room_cv);
    pthread_cond_signal(&it->idle_cv);
    wake_waiters_locked(it);
    /* With stopping set no idle writer leaves on its own and none starts:
     * once the one being started (if any) is known, join the one there. */
    while (it->idle_starting > 0)
        pthread_cond_wait(&it->started_cv, &it->mu);
    bool running = it->idle_running;
    it->idle_running = false;
    pthread_t th = it->idle_th;
    pthread_mutex_unlock(&it->mu);
    if (running)
        pthread_join(th, NULL);
}

void ctrl_intents_free(prov_ctrl *c)
{
    struct ctrl_intents *it = c ? c->intents : NULL;
    if (!it)
        return;
    ctrl_intents_stop(c);
    prov_intent_set_free(it->set);
    json_object_put(it->lease);
    for (size_t i = 0; i < it->n_held; i++)
        free(it->held[i]);
    free(it->held);
    pthread_mutex_destroy(&it->mu);
    pthread_cond_destroy(&it->room_cv);
    pthread_cond_destroy(&it->idle_cv);
    pthread_cond_destroy(&it->started_cv);
    free(it->ns);
    free(it->name);
    free(it->path);
    free(it);
    c->intents = NULL;
}

int ctrl_intent_join(prov_ctrl *c, const json_object *pvc, const json_object *sc,
                     const char *volume)
{
    struct ctrl_intents *it = c->intents;
    char *text = NULL;
    int rc = prov_intent_encode(pvc, sc, volume, &text);
    if (rc < 0)
        return rc;
    const char *uid = kobj_uid(pvc);
    pthread_mutex_lock(&it->mu);
    it->last_activity = util_now_mono();
    uint64_t since = prov_intent_set_seq(it->set);
    bool joined = false, durable = false;
    while (!it->stopping) {
        prov_intent_status st;
        int err = 0;
        if (!joined) {
            st = prov_intent_set_join(it->set, text);
            if (st == PROV_INTENT_FULL) {
                /* Never dropped: wait for room (entries done elsewhere). */
                obs_v(4, "intent record full; claim %s/%s waits for room", kobj_namespace(pvc),
                      kobj_name(pvc));
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                it->room_waiters++;
                pthread_cond_timedwait(&it->room_cv, &it->mu, &ts);
                it->room_waiters--;
                continue;
            }
            if (st == PROV_INTENT_INVALID) {
                rc = util_err_set(-EINVAL, "intent entry of claim %s/%s does not decode",
                                  kobj_namespace(pvc), kobj_name(pvc));
                break;
            }
            joined = true;
        } else {
            st = prov_intent_set_status(it->set, uid, since, &err);
        }
        if (st == PROV_INTENT_DURABLE) {
            durable = true;
            break;
        }
        if (st == PROV_INTENT_FAILED || st == PROV_INTENT_INVALID) {
            rc = util_err_set(err < 0 ? err : -EIO,
                              "recording the intent to create a volume for claim %s/%s failed",
                              kobj_namespace(pvc), kobj_name(pvc));
            break;
        }
        if (!prov_intent_set_flushing(it->set)) {
            flush_locked(it);
            continue;
        }
        /* A write is under way: sleep until one decides this entry. */
        struct intent_waiter w = {.uid = uid, .since = since, .next = it->waiters};
        sem_init(&w.sem, 0, 0);
        it->waiters = &w;
        pthread_mutex_unlock(&it->mu);
        while (sem_wait(&w.sem) < 0 && errno == EINTR)
            ;
        sem_destroy(&w.sem);
        if (w.st == PROV_INTENT_DURABLE) {
            free(text);
            return 0;
        }
        pthread_mutex_lock(&it->mu);
        /* FAILED and INVALID are reported by the status check above. */
    }
    if (rc == 0 && !durable)
        rc = util_err_set(-ECANCELED, "stopping: claim %s/%s not provisioned", kobj_namespace(pvc),
                          kobj_name(pvc));
    pthread_mutex_unlock(&it->mu);
    free(text);
    return rc;
}

void ctrl_intent_done(prov_ctrl *c, const char *uid)
{
    struct ctrl_intents *it = c->intents;
    if (!it || !uid)
        return;
    pthread_mutex_lock(&it->mu);
    prov_intent_set_done(it->set, uid);
    it->last_activity = util_now_mono();
    if (it->room_waiters)
        pthread_cond_broadcast(&it->room_cv);
    /* A done entry needs an idle write unless a write takes it along: the
     * idle writer is started if it is not there (it leaves once none is
     * left; one already there looks again before it may leave). */
    bool start = !it->stopping && !it->idle_running && !idle_write_needless_locked(it);
    if (start) {
        it->idle_running = true;
        it->idle_starting++;
    }
    pthread_mutex_unlock(&it->mu);
    if (start)
        idle_start(it);
}

void ctrl_intent_trim(prov_ctrl *c)
{
    struct ctrl_intents *it = c->intents;
    if (!it)
        return;
    pthread_mutex_lock(&it->mu);
    prov_intent_set_trim(it->set);
    pthread_mutex_unlock(&it->mu);
}

bool ctrl_intent_has(prov_ctrl *c, const char *uid)
{
    struct ctrl_intents *it = c->intents;
    if (!it || !uid)
        return false;
    pthread_mutex_lock(&it->mu);
    bool has = prov_intent_set_has(it->set, uid);
    pthread_mutex_unlock(&it->mu);
    return has;
}

struct collect {
    size_t n, cap;
    char **texts;
};

static void collect_one(void *ud, const prov_intent *in)
{
    struct collect *col = ud;
    if (col->n == col->cap) {
        col->cap = col->cap ? col->cap * 2 : 4;
        char **t = realloc(col->texts, col->cap * sizeof(*t));
        if (!t)
            abort();
        col->texts = t;
    }
    json_object *e = json_object_new_object();
    json_object_object_add(e, "claim", prov_intent_claim(in));
    json_object_object_add(e, "volume", json_object_new_string(in->volume));
    col->texts[col->n++] = kobj_to_text(e, NULL);
    json_object_put(e);
}

int ctrl_intent_each(prov_ctrl *c, const char *ns, const char *name,
                     int (*fn)(prov_ctrl *c, const prov_intent *in, void *ud), void *ud)
{
    struct ctrl_intents *it = c->intents;
    if (!it)
        return 0;
    /* Copied out under the lock, acted on without it (fn does I/O). */
    struct collect col = {0};
    pthread_mutex_lock(&it->mu);
    prov_intent_set_each(it->set, ns, name, collect_one, &col);
    pthread_mutex_unlock(&it->mu);
    int rc = 0;
    for (size_t i = 0; i < col.n; i++) {
        json_object *o = kobj_parse_text(col.texts[i], strlen(col.texts[i]));
        prov_intent in;
        if (o && prov_intent_decode(o, &in) == 0) {
            int r = fn(c, &in, ud);
            if (r < 0 && rc == 0)
                rc = r;
        }
        json_object_put(o);
        free(col.texts[i]);
    }
    free(col.texts);
    return rc;
}

void ctrl_crash_point(prov_ctrl *c, const char *point)
{
    struct ctrl_intents *it = c->intents;
    if (!it || !it->crash_at || strcmp(it->crash_point, point) != 0)
        return;
    pthread_mutex_lock(&it->mu);
    bool now = ++it->crash_seen == it->crash_at;
    pthread_mutex_unlock(&it->mu);
    if (now) {
        obs_warn("CSI_PROVISIONER_CRASH_AT: killed at %s #%ld", point, it->crash_at);
        kill(getpid(), SIGKILL);
    }
}
