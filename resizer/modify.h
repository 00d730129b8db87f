/*
 * modify: the VolumeAttributesClass modify controller (modify.c), started by
 * the resize controller (controller.c), whose claim and PV informers it
 * shares: controller.c hands every claim event on.
 */
#ifndef CSISIDECAR_RESIZER_MODIFY_H
#define CSISIDECAR_RESIZER_MODIFY_H

#include "resizer.h"

typedef struct rsz_modify rsz_modify;

/* Creates the queue and starts the VolumeAttributesClass informer. */
int rsz_modify_new(const rsz_ctrl_opts *opts, const rsz_config *cfg, kube_informer *pvcs,
                   kube_informer *pvs, rsz_modify **out);
/* After the claim and PV caches synced: waits for the class cache, marks
 * InProgress claims uncertain, starts the workers. */
int rsz_modify_start(rsz_modify *m);
/* Stops and frees (NULL: no-op). */
void rsz_modify_free(rsz_modify *m);

/* Claim events; m NULL: no-op. */
void rsz_modify_pvc_added(rsz_modify *m, const json_object *pvc);
void rsz_modify_pvc_updated(rsz_modify *m, const json_object *old, const json_object *pvc);
void rsz_modify_pvc_deleted(rsz_modify *m, const json_object *pvc);

#endif
