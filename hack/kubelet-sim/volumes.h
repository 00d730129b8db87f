/*
 * What volumes.c (pods, queue, informers) and volume_ops.c (one volume's
 * CSI calls and records) share: the volume manager's state. Private to
 * kubelet-sim.
 */
#ifndef KUBELET_SIM_VOLUMES_H
#define KUBELET_SIM_VOLUMES_H

#include <pthread.h>

#include "kubelet-sim/ksim.h"
#include "wq/wq.h"

/* The attachable volumes a pod (by "ns/name") wants: volumesInUse lists
 * them from the moment they are known until the pod lets them go. */
struct ksim_want {
    char *key;
    char **unique;
    size_t n;
    struct ksim_want *next;
};

/* A volume a worker is calling the driver about: one at a time. */
struct ksim_busy {
    char *unique;
    struct ksim_busy *next;
};

/* A connection to a driver endpoint, shared by the workers: dialling per
 * call would cost each operation the connection's teardown (its monitor
 * thread's poll). Replaced once it saw the driver go away. */
struct ksim_conn {
    char *endpoint;
    csi_conn *conn;
    int refs;
    bool stale;
    struct ksim_conn *next;
};

struct ksim_volumes {
    kube_client *kube;
    ksim_plugins *plugins;
    ksim_node *node;
    ksim_volumes_opts o;
    kube_informer *pods, *vas, *drivers;
    wq *q;
    bool pool_started;

    pthread_mutex_t mu;  /* guards everything below */
    pthread_cond_t idle; /* a volume stopped being busy */
    ksim_pub *pubs;
    ksim_stage *stages;
    struct ksim_want *wants;
    struct ksim_busy *busy;
    struct ksim_conn *conns;
};

/* Drives one volume of `pod` to published: 0 when it is, 1 while it waits
 * (driver, attachment), -errno on a failure (logged by the caller). */
int ksim_vm_setup_volume(ksim_volumes *vm, const json_object *pod, const ksim_vol *v,
                         const ksim_driver_info *di);
/* Undoes the publication of volume `vol_name` for pod `uid` and, when no
 * other pod uses the volume, its staging; the records go last. */
int ksim_vm_teardown_pub(ksim_volumes *vm, const char *uid, const char *vol_name);
/* GET of one object: NULL with *rc 0 when it does not exist, NULL with
 * *rc < 0 (message set) when the API failed. */
json_object *ksim_vm_get_obj(ksim_volumes *vm, const kube_resource *res, const char *ns,
                             const char *name, int *rc);
/* Closes every shared connection (at shutdown, no worker left). */
void ksim_vm_close_conns(ksim_volumes *vm);

#endif
