/*
 * ctrl_internal: what the controller files (controller.c, ctrl_claims.c,
 * ctrl_sources.c, ctrl_node.c, ctrl_volumes.c, intent.c) share and nobody else: the
 * controller's state and the steps one part takes for another.
 */
#ifndef CSISIDECAR_CTRL_INTERNAL_H
#define CSISIDECAR_CTRL_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>

#include <json-c/linkhash.h>

#include "provisioner.h"
#include "kobj/kobj.h"
#include "wq/wq.h"

#define PV_FINALIZER           "external-provisioner.volume.kubernetes.io/finalizer"
#define ANN_SELECTED_NODE      "volume.kubernetes.io/selected-node"
#define ANN_PROVISIONED_BY     "pv.kubernetes.io/provisioned-by"
#define ANN_DELETE_SECRET_NAME "volume.kubernetes.io/provisioner-deletion-secret-name"
#define ANN_DELETE_SECRET_NS   "volume.kubernetes.io/provisioner-deletion-secret-namespace"

#define CLONE_FINALIZER       PROV_CLONE_FINALIZER
#define SNAPSHOT_FINALIZER    "provisioner.storage.kubernetes.io/volumesnapshot-as-source-protection"
#define ANN_ALLOW_MODE_CHANGE "snapshot.storage.k8s.io/allow-volume-mode-change"

/* A worker beyond the first of its pool exits after this long idle. */
#define WORKER_IDLE_EXIT (30 * UTIL_SECOND)

/* Returned by a sync that must wait --retry-interval-max (infeasible). */
#define SYNC_SLOW 1

struct prov_ctrl {
    /* PVs whose volume DeleteVolume already removed: a stale cache must not
     * send DeleteVolume twice (upstream #1235). Memory only: after a crash
     * the repeat is one idempotent call. */
    pthread_mutex_t done_mu;
    struct lh_table *deleted;
    /* Claims (by uid) whose in-progress finalizer we removed: a cached copy
     * still showing it is stale (only we add it, and adding it again drops
     * the entry), so a sync must not patch again (a 422 and a GET). */
    struct lh_table *released;
    /* Claims (by uid) whose PV this process created: until the claim is
     * bound (and leaves the cache) it waits for the binder, even when the
     * PV is not cached (yet, or no longer: Bound volumes are not), instead
     * of getting the finalizer and a CreateVolume again. */
    struct lh_table *provisioned;
    /* Volumes (by name) deleted and whose finalizer we removed: cached
     * copies still showing it are stale, not a reason for another patch. */
    struct lh_table *finalized;
    /* Claims (uid -> resourceVersion of the copy) whose selected node we
     * gave back: that cached copy is stale, not a reason to provision. */
    struct lh_table *rescheduled;
    /* the snapshot orphan sweeper */
    pthread_t sweep_th;
    bool sweeping;
    pthread_mutex_t sweep_mu;
    pthread_cond_t sweep_cv;
    bool stopping;
    prov_ctrl_opts o;
    prov_config cfg;
    kube_informer *pvcs, *pvs, *classes, *nodes, *csinodes, *vas;
    /* --node-deployment: the static Node and CSINode of this node (built
     * from NodeGetInfo, as upstream, instead of watching every node), its
     * labels, and the Immediate claims this node waits to own (claim key ->
     * struct owning, under done_mu). All NULL outside node mode. */
    json_object *local_node, *local_csinode, *local_labels;
    struct lh_table *owning;
    wq *claims, *volumes;
    /* The intent record (intent.c). */
    struct ctrl_intents *intents;
    bool claims_pool, volumes_pool; /* their worker pools run */
    obs_metric *provision_total, *provision_failed, *provision_seconds;
    obs_metric *delete_total, *delete_failed, *delete_seconds;
};

/* ---- finalizers and uid sets (controller.c) ---- */
int ctrl_add_finalizer(prov_ctrl *c, const char *path, const json_object *obj, const char *fin);
int ctrl_add_finalizer_idempotent(prov_ctrl *c, const char *path, const json_object *obj,
                                  const char *fin);
int ctrl_remove_finalizer(prov_ctrl *c, const kube_resource *res, const char *path,
                          const json_object *obj, const char *fin);
void ctrl_uid_mark(prov_ctrl *c, struct lh_table *set, const char *uid, bool on);
bool ctrl_uid_marked(prov_ctrl *c, struct lh_table *set, const char *uid);
int ctrl_release_claim(prov_ctrl *c, const char *path, const json_object *pvc);
bool ctrl_released_already(prov_ctrl *c, const json_object *pvc);

/* ---- claims (ctrl_claims.c) ---- */
char *ctrl_pvc_path(const json_object *pvc);
bool ctrl_should_provision(prov_ctrl *c, const json_object *pvc);
void ctrl_event_failed(prov_ctrl *c, const json_object *pvc, int code, const char *msg);
int ctrl_plan_request(prov_ctrl *c, const json_object *pvc, const json_object *sc,
                      prov_source_kind kind, const char *source_id,
                      Csi__V1__CreateVolumeRequest **req, prov_secret_refs *refs,
                      prov_state *state);
int ctrl_add_secrets(prov_ctrl *c, Csi__V1__CreateVolumeRequest *req, const prov_secret_ref *ref);
void ctrl_class_label(const json_object *sc, const char **v);
int ctrl_cleanup_volume(prov_ctrl *c, const json_object *pvc);
int ctrl_cleanup_deleted_claim(prov_ctrl *c, const json_object *pvc, const char *path);
int ctrl_sync_claim(prov_ctrl *c, const char *key);

/* ---- data sources (ctrl_sources.c) ---- */
struct ctrl_source {
    prov_source_kind kind;
    char *id;
    char *path;       /* the source object's API path, for its finalizer */
    json_object *obj; /* the source object (PVC or VolumeSnapshot) */
};
void ctrl_source_clear(struct ctrl_source *src);
prov_source_kind ctrl_source_kind(const json_object *pvc);
/* 0 with *src filled (kind NONE without a source); 1: a populator's source. */
int ctrl_resolve_source(prov_ctrl *c, const json_object *pvc, struct ctrl_source *src);
int ctrl_release_source(prov_ctrl *c, const char *ns, const char *kind, const char *name,
                        const char *except);
void *ctrl_sweeper(void *arg);

/* ---- node deployment (ctrl_node.c) ---- */
bool ctrl_node_selected_here(prov_ctrl *c, const json_object *pvc);
void ctrl_node_forget(prov_ctrl *c, const char *key);
/* The free function of prov_ctrl.owning's entries. */
void ctrl_node_free_owning(struct lh_entry *e);
int ctrl_node_claim(prov_ctrl *c, const char *key, const json_object *pvc);

/* ---- the intent record (intent.c) ---- */
/* Reads (or creates) the record, keeps its entries for recovery, starts the
 * idle writer. A failed read is retried by the first write. */
int ctrl_intents_start(prov_ctrl *c);
/* The workers run: the claims to recover are queued now (so the pool grows
 * for them). */
void ctrl_intents_workers_started(prov_ctrl *c);
/* Stops waiting (joiners give up) and the idle writer; _free after the
 * workers are gone. */
void ctrl_intents_stop(prov_ctrl *c);
void ctrl_intents_free(prov_ctrl *c);
/* Blocks until the record holds the claim's entry (a group commit):
 * CreateVolume may go. -errno when the write failed (retry with backoff). */
int ctrl_intent_join(prov_ctrl *c, const json_object *pvc, const json_object *sc,
                     const char *volume);
/* The claim's volume is a PV now, or was cleaned up: the entry may go. */
void ctrl_intent_done(prov_ctrl *c, const char *uid);
bool ctrl_intent_has(prov_ctrl *c, const char *uid);
/* After a burst: the record's tables shrink to fit (prov_intent_set_trim). */
void ctrl_intent_trim(prov_ctrl *c);
/* Calls fn (without locks held) for each wanted entry of claim ns/name;
 * the first error fn returned. */
int ctrl_intent_each(prov_ctrl *c, const char *ns, const char *name,
                     int (*fn)(prov_ctrl *c, const prov_intent *in, void *ud), void *ud);
/* Test-only: SIGKILLs the process the n-th time `point` is reached when
 * CSI_PROVISIONER_CRASH_AT=<point>:<n> ("intent": the record holds the
 * entry, CreateVolume not sent; "create": CreateVolume answered, no PV). */
void ctrl_crash_point(prov_ctrl *c, const char *point);

/* ---- volumes (ctrl_volumes.c) ---- */
int ctrl_sync_volume(prov_ctrl *c, const char *name);

#endif
