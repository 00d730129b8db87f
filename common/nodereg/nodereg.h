/*
 * nodereg: what registering a CSI driver on a node writes to the API, as the
 * kubelet does it (pkg/volume/csi/nodeinfomanager): the driver's entry in the
 * Node annotation csi.volume.kubernetes.io/nodeid (a JSON map of driver name
 * to node id shared by every driver of the node), its topology segments as
 * Node labels, and its entry in CSINode spec.drivers[].
 *
 * Two programs write these: kubelet-sim (the kubelet's side of plugin
 * registration, for the local world) and csi-node-driver-registrar in direct
 * mode. Both link this one implementation.
 *
 * The planning half is pure: from the object as read it builds an RFC 6902
 * JSON patch whose `test` operations make it fail (422) when the object
 * changed in a way that matters since it was read: the exact old annotation
 * value or CSINode entry, or the resourceVersion where something absent is
 * added (two writers adding the same absent key would otherwise both
 * "succeed"). Other drivers' entries are never part of a patch, so writers
 * of different drivers only ever cost each other a retry.
 *
 * The I/O half (nodereg_install, nodereg_uninstall) reads, plans and patches
 * with retries on a failed test or conflict.
 */
#ifndef CSISIDECAR_NODEREG_H
#define CSISIDECAR_NODEREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

#include "csi/csi.h"
#include "kube/kube.h"

#define NODEREG_NODEID_ANNOTATION   "csi.volume.kubernetes.io/nodeid"
#define NODEREG_MIGRATED_ANNOTATION "storage.alpha.kubernetes.io/migrated-plugins"
/* The in-tree plugins a current kubelet (every CSI migration GA) lists. */
#define NODEREG_KUBELET_MIGRATED_PLUGINS                                                           \
    "kubernetes.io/aws-ebs,kubernetes.io/azure-disk,kubernetes.io/azure-file,"                     \
    "kubernetes.io/cinder,kubernetes.io/gce-pd,kubernetes.io/portworx-volume,"                     \
    "kubernetes.io/vsphere-volume"

typedef struct nodereg_segment {
    char *key;
    char *value;
} nodereg_segment;

/* One driver's registration on one node. */
typedef struct nodereg_driver {
    char *name;
    char *node_id;
    nodereg_segment *segments; /* sorted by key, keys unique */
    size_t n_segments;
    int64_t max_volumes; /* > 0: allocatable.count; else none */
} nodereg_driver;

/*
 * Fills `d` from a NodeGetInfo answer as the kubelet takes it: an empty node
 * id is -EINVAL; a negative max_volumes_per_node is ignored with a warning,
 * one above INT32_MAX is cut to it (allocatable.count is an int32).
 * Release with nodereg_driver_clear.
 */
int nodereg_driver_from_info(const char *driver, const Csi__V1__NodeGetInfoResponse *info,
                             nodereg_driver *d);
void nodereg_driver_clear(nodereg_driver *d);

/* ---- pure planning ------------------------------------------------------------ */

/*
 * The nodeid annotation `old` (NULL or "" for none) with `driver` set to
 * `node_id`, or removed when `node_id` is NULL. *out is malloc'ed compact
 * JSON with sorted keys, as the kubelet writes it, or NULL when no entry is
 * left. A value that is not a JSON object of strings is -EINVAL with a
 * message quoting it: it belongs to someone else and is not overwritten.
 */
int nodereg_nodeid_merge(const char *old, const char *driver, const char *node_id, char **out);

/*
 * The topology labels `d` needs on `node`: -EEXIST with the kubelet's
 * "detected topology value collision" message when one exists with another
 * value, else 0.
 */
int nodereg_labels_check(const json_object *node, const nodereg_driver *d);

/*
 * The patch that puts `d` on `node` (install: annotation entry and labels)
 * or takes its annotation entry off (uninstall; topology labels stay, as the
 * kubelet leaves them: other drivers may share them). *patch is NULL when
 * nothing needs to change. Errors: -EINVAL (malformed annotation or
 * metadata), -EEXIST (label collision).
 */
int nodereg_node_patch(const json_object *node, const nodereg_driver *d, bool install,
                       char **patch);

/* The spec.drivers[] entry of `d`: name, nodeID, topologyKeys (sorted),
 * allocatable.count when max_volumes > 0. */
json_object *nodereg_csinode_entry(const nodereg_driver *d);
/*
 * True when `have` (an entry as read) says the same as the entry of `d`
 * (null, missing and empty topologyKeys alike; keys compared as sets).
 */
bool nodereg_csinode_entry_matches(const json_object *have, const nodereg_driver *d);

/*
 * The patch that upserts (install) or removes the entry of `d` in `csinode`.
 * An entry that differs is removed first (entries are immutable in the API):
 * then *again is true and the caller plans once more on the patched object.
 * `migrated` (NULL: leave alone) is the migrated-plugins annotation the
 * kubelet keeps, compared as a set. *patch NULL: nothing to do. -EINVAL
 * when spec.drivers or metadata are malformed.
 */
int nodereg_csinode_patch(const json_object *csinode, const nodereg_driver *d, bool install,
                          const char *migrated, char **patch, bool *again);

/* A CSINode for `node` holding the entry of `d` (none when NULL: what the
 * kubelet creates at start), owned by the Node (the kubelet's
 * ownerReference), with the `migrated` annotation when given. */
json_object *nodereg_csinode_new(const json_object *node, const nodereg_driver *d,
                                 const char *migrated);

/* True when `node` (may be NULL) carries our annotation entry and labels. */
bool nodereg_node_has(const json_object *node, const nodereg_driver *d);
/* True when `csinode` (may be NULL) holds a matching entry of `d`. */
bool nodereg_csinode_has(const json_object *csinode, const nodereg_driver *d);

/* ---- API writes --------------------------------------------------------------- */

/*
 * Writes `d` for node `node_name`: Node first (annotation and labels in one
 * patch), then the CSINode (created when missing). Retries failed tests and
 * conflicts a few times. On error util_err_last() says what; with `node_out`
 * (may be NULL) the Node as last read is returned for an Event (or NULL).
 * -EEXIST: label collision; -EINVAL: malformed annotation; -ENOENT: no Node.
 */
int nodereg_install(kube_client *c, const char *node_name, const nodereg_driver *d,
                    const char *migrated, json_object **node_out);
/* Removes the CSINode entry and the annotation entry of `driver` only;
 * missing objects or entries are fine. */
int nodereg_uninstall(kube_client *c, const char *node_name, const char *driver);

#endif
