/*
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go's
 * leaderelection with a LeaseLock does it, so Go and C replicas could even
 * share one lease:
 *
 *   every retry_period: GET the lease; create it when absent; take it over
 *   (PUT with the resourceVersion read) when it is ours or its holder has
 *   not renewed it for lease_duration as observed on our own clock; a
 *   leader that cannot renew for renew_deadline stops leading.
 *
 * Time written to the lease is MicroTime (exactly six fractional digits), the
 * only form client-go parses there.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kube/kube.h"
#include "kobj/kobj.h"

struct kube_leader {
    kube_client *c;
    kube_leader_opts o;
    char *name;
    char *ns;
    char *identity;
    char *path;
    pthread_t th;
    atomic_bool stop;
    atomic_bool leading;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    /* what we last observed of the lease, on the monotonic clock */
    char *observed_holder;
    char *observed_renew;
    util_duration observed_at;
    util_duration last_renew; /* our last successful renew, monotonic; atomic */
    obs_metric *status;
};

char *kube_leader_lease_name(const char *lock_name)
{
    size_t n = strlen(lock_name);
    char *out = util_calloc(n + 2, 1);
    for (size_t i = 0; i < n; i++) {
        char ch = lock_name[i];
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
                  (ch >= '0' && ch <= '9') || ch == '-';
        out[i] = ok ? ch : '-';
    }
    if (n > 0 && out[n - 1] == '-')
        out[n] = 'X';
    return out;
}

static void micro_now(char *buf, size_t len)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char base[32];
    strftime(base, sizeof(base), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, len, "%.20s.%06dZ", base, (int)(ts.tv_nsec / 1000) % 1000000);
}

static void set_leading(kube_leader *l, bool on)
{
    bool was = atomic_exchange(&l->leading, on);
    if (l->status) {
        const char *v[] = {l->o.lock_name};
        obs_gauge_set(l->status, v, on ? 1 : 0);
    }
    if (on && !was) {
        obs_info("successfully acquired lease %s/%s", l->ns, l->name);
        if (l->o.on_started_leading)
            l->o.on_started_leading(l->o.ud);
    } else if (!on && was) {
        obs_info("Stopped leading");
        if (l->o.on_stopped_leading)
            l->o.on_stopped_leading(l->o.ud);
    }
}

static json_object *lease_body(kube_leader *l, json_object *base, bool transition, int transitions)
{
    char now[48];
    micro_now(now, sizeof(now));
    json_object *obj = NULL;
    if (base) {
        json_object_deep_copy(base, &obj, NULL);
    } else {
        obj = json_object_new_object();
        json_object_object_add(obj, "apiVersion", json_object_new_string("coordination.k8s.io/v1"));
        json_object_object_add(obj, "kind", json_object_new_string("Lease"));
        json_object *meta = json_object_new_object();
        json_object_object_add(meta, "name", json_object_new_string(l->name));
        json_object_object_add(meta, "namespace", json_object_new_string(l->ns));
        if (l->o.labels && *l->o.labels) {
            json_object *labels = json_object_new_object();
            char *copy = util_strdup(l->o.labels);
            for (char *save = NULL, *kv = strtok_r(copy, ",", &save); kv;
                 kv = strtok_r(NULL, ",", &save)) {
                char *colon = strchr(kv, ':');
                if (colon) {
                    *colon = '\0';
                    json_object_object_add(labels, kv, json_object_new_string(colon + 1));
                }
            }
            free(copy);
            json_object_object_add(meta, "labels", labels);
        }
        json_object_object_add(obj, "metadata", meta);
    }
    json_object *spec = kobj_ensure_obj(obj, "spec");
    if (!spec) {
        /* A spec of another type is the server's garbage: ours replaces it. */
        spec = json_object_new_object();
        kobj_set(obj, "spec", spec);
    }
    json_object_object_add(spec, "holderIdentity", json_object_new_string(l->identity));
    json_object_object_add(
        spec, "leaseDurationSeconds",
        json_object_new_int((int)((l->o.lease_duration + UTIL_SECOND - 1) / UTIL_SECOND)));
    if (transition || !base)
        json_object_object_add(spec, "acquireTime", json_object_new_string(now));
    json_object_object_add(spec, "renewTime", json_object_new_string(now));
    json_object_object_add(spec, "leaseTransitions",
                           json_object_new_int(transition && base ? transitions + 1 : transitions));
    return obj;
}

/* One round: true when we hold the lease afterwards. */
static bool try_acquire_or_renew(kube_leader *l)
{
    kube_resp r = {0};
    int rc = kube_get(l->c, l->path, &r);
    if (rc < 0 && kube_is_not_found(&r)) {
        kube_resp_clear(&r);
        json_object *obj = lease_body(l, NULL, true, 0);
        char *coll = kube_path(&KUBE_LEASE, l->ns, NULL, NULL);
        rc = kube_create(l->c, coll, obj, &r);
        free(coll);
        json_object_put(obj);
        bool ok = rc == 0;
        if (!ok)
            obs_v(2, "cannot create lease %s/%s: %s", l->ns, l->name, r.message);
        kube_resp_clear(&r);
        return ok;
    }
    if (rc < 0) {
        obs_v(2, "cannot read lease %s/%s: %s", l->ns, l->name, r.message);
        kube_resp_clear(&r);
        return false;
    }
    if (!kobj_typed(r.body, json_type_object)) {
        obs_v(2, "cannot read lease %s/%s: the answer is not an object", l->ns, l->name);
        kube_resp_clear(&r);
        return false;
    }
    json_object *spec = kobj_obj(r.body, "spec");
    const char *holder = kobj_str(spec, "holderIdentity");
    const char *renew = kobj_str(spec, "renewTime");
    int64_t tr = 0;
    int transitions =
        kobj_int64(spec, "leaseTransitions", &tr) == 0 && tr >= 0 && tr < INT32_MAX ? (int)tr : 0;
    util_duration now = util_now_mono();
    /* Expiry is judged by when *we* saw the record change, never by the
     * timestamps in it: clocks of other replicas are not ours. */
    bool changed = !l->observed_holder || strcmp(l->observed_holder, holder ? holder : "") != 0 ||
                   !l->observed_renew || strcmp(l->observed_renew, renew ? renew : "") != 0;
    if (changed) {
        free(l->observed_holder);
        free(l->observed_renew);
        l->observed_holder = util_strdup(holder ? holder : "");
        l->observed_renew = util_strdup(renew ? renew : "");
        l->observed_at = now;
    }
    bool mine = holder && strcmp(holder, l->identity) == 0;
    bool free_lease = !holder || !*holder;
    bool expired = now - l->observed_at > l->o.lease_duration;
    if (!mine && !free_lease && !expired) {
        kube_resp_clear(&r);
        return false;
    }
    json_object *obj = lease_body(l, r.body, !mine, transitions);
    kube_resp_clear(&r);
    rc = kube_update(l->c, l->path, obj, &r);
    json_object_put(obj);
    bool ok = rc == 0;
    if (ok) {
        free(l->observed_holder);
        free(l->observed_renew);
        const char *renewed = kobj_path_str(r.body, "spec.renewTime");
        l->observed_holder = util_strdup(l->identity);
        l->observed_renew = util_strdup(renewed ? renewed : "");
        l->observed_at = util_now_mono();
        if (!mine)
            obs_info("%s became leader of %s/%s", l->identity, l->ns, l->name);
        if (!mine && l->o.events)
            kube_event(l->o.events, r.body, "Normal", "LeaderElection", "%s became leader",
                       l->identity);
    } else {
        obs_v(2, "cannot update lease %s/%s: %s", l->ns, l->name, r.message);
    }
    kube_resp_clear(&r);
    return ok;
}

static void wait_period(kube_leader *l, util_duration d)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += (time_t)(d / UTIL_SECOND);
    until.tv_nsec += (long)(d % UTIL_SECOND);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&l->mu);
    while (!atomic_load(&l->stop))
        if (pthread_cond_timedwait(&l->cv, &l->mu, &until) != 0)
            break;
    pthread_mutex_unlock(&l->mu);
}

static void release(kube_leader *l)
{
    kube_resp r = {0};
    if (kube_get(l->c, l->path, &r) == 0) {
        json_object *spec = kobj_obj(r.body, "spec");
        const char *holder = kobj_str(spec, "holderIdentity");
        if (holder && strcmp(holder, l->identity) == 0) {
            char now[48];
            micro_now(now, sizeof(now));
            json_object_object_add(spec, "holderIdentity", json_object_new_string(""));
            json_object_object_add(spec, "leaseDurationSeconds", json_object_new_int(1));
            json_object_object_add(spec, "renewTime", json_object_new_string(now));
            json_object_object_add(spec, "acquireTime", json_object_new_string(now));
            kube_resp u = {0};
            if (kube_update(l->c, l->path, r.body, &u) == 0)
                obs_info("released lease %s/%s", l->ns, l->name);
            kube_resp_clear(&u);
        }
    }
    kube_resp_clear(&r);
}

static void *run(void *arg)
{
    kube_leader *l = arg;
    util_thread_name("leader");
    obs_info("attempting to acquire leader lease %s/%s...", l->ns, l->name);
    while (!atomic_load(&l->stop)) {
        bool ok = try_acquire_or_renew(l);
        util_duration now = util_now_mono();
        if (ok) {
            __atomic_store_n(&l->last_renew, now, __ATOMIC_RELAXED);
            set_leading(l, true);
        } else if (atomic_load(&l->leading) &&
                   now - __atomic_load_n(&l->last_renew, __ATOMIC_RELAXED) > l->o.renew_deadline) {
            obs_error("failed to renew lease %s/%s: timed out", l->ns, l->name);
            set_leading(l, false);
        }
        wait_period(l, l->o.retry_period);
    }
    if (atomic_load(&l->leading) && l->o.release_on_stop)
        release(l);
    return NULL;
}

char *kube_leader_namespace(const char *flag)
{
    if (flag && *flag)
        return util_strdup(flag);
    const char *env = getenv("POD_NAMESPACE");
    if (env && *env)
        return util_strdup(env);
    FILE *f = fopen("/var/run/secrets/kubernetes.io/serviceaccount/namespace", "r");
    if (f) {
        char buf[256] = "";
        char *got = fgets(buf, sizeof(buf), f);
        fclose(f);
        if (got) {
            buf[strcspn(buf, "\r\n")] = '\0';
            if (*buf)
                return util_strdup(buf);
        }
    }
    return util_strdup("default");
}

int kube_leader_start(kube_client *c, const kube_leader_opts *opts, kube_leader **out)
{
    *out = NULL;
    if (!opts || !opts->lock_name || !*opts->lock_name)
        return util_err_set(-EINVAL, "leader election: no lock name");
    kube_leader *l = util_calloc(1, sizeof(*l));
    l->c = c;
    l->o = *opts;
    if (!l->o.lease_duration)
        l->o.lease_duration = 15 * UTIL_SECOND;
    if (!l->o.renew_deadline)
        l->o.renew_deadline = 10 * UTIL_SECOND;
    if (!l->o.retry_period)
        l->o.retry_period = 5 * UTIL_SECOND;
    if (l->o.lease_duration <= l->o.renew_deadline) {
        free(l);
        return util_err_set(-EINVAL, "--leader-election-lease-duration must be greater than "
                                     "--leader-election-renew-deadline");
    }
    l->name = kube_leader_lease_name(opts->lock_name);
    l->ns = kube_leader_namespace(opts->ns);
    if (opts->identity && *opts->identity) {
        l->identity = util_strdup(opts->identity);
    } else {
        char host[256] = "unknown";
        gethostname(host, sizeof(host) - 1);
        l->identity = kube_leader_lease_name(host);
    }
    l->path = kube_path(&KUBE_LEASE, l->ns, l->name, NULL);
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    if (opts->metrics) {
        static const char *const labels[] = {"name", NULL};
        l->status = obs_gauge_new(opts->metrics, "leader_election_master_status",
                                  "Gauge of if the reporting system is master of the relevant "
                                  "lease, 0 indicates backup, 1 indicates master. 'name' is the "
                                  "string used to identify the lease.",
                                  labels);
        const char *v[] = {opts->lock_name};
        if (l->status)
            obs_gauge_set(l->status, v, 0);
    }
    if (pthread_create(&l->th, NULL, run, l) != 0) {
        kube_leader_stop(l);
        return util_err_set(-EAGAIN, "cannot start leader election");
    }
    *out = l;
    return 0;
}

bool kube_leader_is_leader(kube_leader *l)
{
    return l && atomic_load(&l->leading);
}

bool kube_leader_healthy(kube_leader *l, util_duration slack)
{
    if (!l || !atomic_load(&l->leading))
        return true;
    return util_now_mono() - __atomic_load_n(&l->last_renew, __ATOMIC_RELAXED) <=
           l->o.lease_duration + slack;
}

void kube_leader_stop(kube_leader *l)
{
    if (!l)
        return;
    pthread_mutex_lock(&l->mu);
    atomic_store(&l->stop, true);
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (l->th)
        pthread_join(l->th, NULL);
    free(l->name);
    free(l->ns);
    free(l->identity);
    free(l->path);
    free(l->observed_holder);
    free(l->observed_renew);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}
