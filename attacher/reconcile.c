/*
 * reconcile: every --reconcile-sync, ask the driver which nodes each volume
 * is published to (ListVolumes, all pages of --max-entries, one --timeout
 * for the whole walk, as upstream) and force a sync of every VA whose
 * status.attached disagrees: a volume detached behind our back is
 * published again, one still published for an unattached VA unpublished.
 * Only with LIST_VOLUMES and LIST_VOLUMES_PUBLISHED_NODES.
 *
 * The published map is a hash table volume id -> node ids, built per pass
 * and dropped after it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include <json-c/linkhash.h>

#include "internal.h"
#include "kobj/kobj.h"

struct att_reconciler {
    att_ctrl *c;
    csi_conn *csi;
    util_duration period, timeout;
    int max_entries;
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stopping;
};

struct nodes {
    char **ids;
    size_t n;
};

static void free_nodes(struct lh_entry *e)
{
    struct nodes *n = lh_entry_v(e);
    free(lh_entry_k(e));
    if (n) {
        for (size_t i = 0; i < n->n; i++)
            free(n->ids[i]);
        free(n->ids);
        free(n);
    }
}

static int add_entry(void *ud, const Csi__V1__ListVolumesResponse__Entry *e)
{
    struct lh_table *map = ud;
    /* Entries without a volume or a status are skipped, as upstream. */
    if (!e || !e->volume || !e->volume->volume_id || !e->status)
        return 0;
    struct nodes *n = util_calloc(1, sizeof(*n));
    n->ids = util_calloc(e->status->n_published_node_ids + 1, sizeof(char *));
    for (size_t i = 0; i < e->status->n_published_node_ids; i++)
        if (e->status->published_node_ids[i])
            n->ids[n->n++] = util_strdup(e->status->published_node_ids[i]);
    lh_table_delete(map, e->volume->volume_id);
    lh_table_insert(map, util_strdup(e->volume->volume_id), n);
    return 0;
}

struct pass {
    att_ctrl *c;
    struct lh_table *map;
    size_t forced;
};

static void check_va(void *ud, json_object *va)
{
    struct pass *p = ud;
    char *handle = att_ctrl_volume_handle(p->c, va);
    char *node_id = handle ? att_ctrl_node_id(p->c, va) : NULL;
    if (!handle || !node_id) {
        /* Per-VA problems are the sync's to report; the pass goes on. */
        obs_v(4, "reconcile: VolumeAttachment %s: no volume handle or node id yet",
              kobj_name(va) ? kobj_name(va) : "");
        free(handle);
        free(node_id);
        return;
    }
    struct nodes *n = NULL;
    lh_table_lookup_ex(p->map, handle, (void **)&n);
    bool found = n && att_published_on((const char *const *)n->ids, n->n, node_id);
    bool attached = kobj_bool(kobj_obj(va, "status"), "attached", false);
    if (found != attached) {
        obs_info("reconcile: VolumeAttachment %s says attached=%s but the driver reports volume %s "
                 "%spublished on node %s: syncing it",
                 kobj_name(va), attached ? "true" : "false", handle, found ? "" : "not ", node_id);
        att_ctrl_force(p->c, va);
        p->forced++;
    }
    free(handle);
    free(node_id);
}

int att_reconcile_once(att_ctrl *c, csi_conn *csi, int max_entries, util_duration timeout)
{
    struct lh_table *map = lh_kchar_table_new(256, free_nodes);
    csi_status st = {0};
    int rc = csi_list_volumes_all(csi, max_entries, timeout, add_entry, map, &st);
    if (rc < 0) {
        obs_warn("reconcile: ListVolumes failed: %s: %s", csi_code_name(st.code), st.message);
        lh_table_free(map);
        return rc;
    }
    struct pass p = {c, map, 0};
    att_ctrl_each_va(c, check_va, &p);
    obs_v(4, "reconcile: %d volumes listed, %zu VolumeAttachments forced", map->count, p.forced);
    lh_table_free(map);
    return 0;
}

static void *loop(void *arg)
{
    att_reconciler *r = arg;
    util_thread_name("reconcile");
    pthread_mutex_lock(&r->mu);
    while (!r->stopping) {
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        int64_t ns = (int64_t)ts.tv_nsec + r->period;
        ts.tv_sec += (time_t)(ns / UTIL_SECOND);
        ts.tv_nsec = (long)(ns % UTIL_SECOND);
        while (!r->stopping && pthread_cond_timedwait(&r->cv, &r->mu, &ts) != ETIMEDOUT)
            ;
        if (r->stopping)
            break;
        pthread_mutex_unlock(&r->mu);
        att_reconcile_once(r->c, r->csi, r->max_entries, r->timeout);
        pthread_mutex_lock(&r->mu);
    }
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

int att_reconciler_start(att_ctrl *c, csi_conn *csi, util_duration period, int max_entries,
                         util_duration timeout, att_reconciler **out)
{
    *out = NULL;
    att_reconciler *r = util_calloc(1, sizeof(*r));
    *r = (att_reconciler){
        .c = c, .csi = csi, .period = period, .timeout = timeout, .max_entries = max_entries};
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&r->th, NULL, loop, r) != 0) {
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cv);
        free(r);
        return util_err_set(-EAGAIN, "cannot start the reconcile thread");
    }
    *out = r;
    return 0;
}

void att_reconciler_stop(att_reconciler *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    r->stopping = true;
    pthread_cond_broadcast(&r->cv);
    pthread_mutex_unlock(&r->mu);
    pthread_join(r->th, NULL);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}
