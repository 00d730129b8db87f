/*
 * volcap: the CSI volume capability of a Kubernetes volume, by upstream's
 * rules. csi-provisioner maps a claim's access modes one by one,
 * csi-attacher publishes and csi-resizer expands a PersistentVolume with
 * the capability of its access modes, volume mode, fsType and mount
 * options; the rules are one, so they live here once.
 *
 * Pure: no I/O, no state. Errors are -EINVAL with util_err_last() saying
 * why, as upstream words it.
 */
#ifndef CSISIDECAR_VOLCAP_H
#define CSISIDECAR_VOLCAP_H

#include <stdbool.h>
#include <stddef.h>

#include <json-c/json.h>

#include "csi/csi.h"

typedef Csi__V1__VolumeCapability__AccessMode__Mode volcap_mode;

/*
 * CSI's access mode for Kubernetes access modes (NULL items read as ""):
 * ReadWriteOncePod alone (SINGLE_NODE_SINGLE_WRITER with snmw, else
 * SINGLE_NODE_WRITER), else ReadWriteMany (MULTI_NODE_MULTI_WRITER), else
 * ReadOnlyMany (MULTI_NODE_READER_ONLY) unless with ReadWriteOnce, else
 * ReadWriteOnce (SINGLE_NODE_MULTI_WRITER with snmw, else
 * SINGLE_NODE_WRITER). -EINVAL with upstream's message for
 * ReadWriteOncePod beside another mode or ReadOnlyMany with ReadWriteOnce;
 * -ENOTSUP with no message when no mode is known (each sidecar words that
 * one its own way). *out is UNKNOWN on error.
 */
int volcap_access_mode(const char *const *modes, size_t n, bool snmw, volcap_mode *out);

/* The access mode of a PersistentVolume's spec.accessModes, as above;
 * none known is -EINVAL "PersistentVolume <name>: unsupported access modes". */
int volcap_pv_access_mode(const json_object *pv, bool snmw, volcap_mode *out);

/*
 * The capability a PersistentVolume is published and expanded with: its
 * access mode (volcap_pv_access_mode), Block for spec.volumeMode Block,
 * else Mount with spec.csi.fsType (default_fstype when empty; none when
 * both are) and spec.mountOptions. Free with volcap_free.
 */
int volcap_of_pv(const json_object *pv, bool snmw, const char *default_fstype,
                 Csi__V1__VolumeCapability **out);

void volcap_free(Csi__V1__VolumeCapability *cap);

#endif
