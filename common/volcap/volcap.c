/*
 * volcap: Kubernetes access modes, volume modes and mount options as CSI
 * volume capabilities (volcap.h).
 */
#include "volcap/volcap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "util/util.h"

int volcap_access_mode(const char *const *modes, size_t n, bool snmw, volcap_mode *out)
{
    bool rwop = false, rwx = false, rox = false, rwo = false, other = false;
    *out = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__UNKNOWN;
    for (size_t i = 0; i < n; i++) {
        const char *m = modes[i] ? modes[i] : "";
        if (strcmp(m, "ReadWriteOncePod") == 0)
            rwop = true;
        else if (strcmp(m, "ReadWriteMany") == 0)
            rwx = true;
        else if (strcmp(m, "ReadOnlyMany") == 0)
            rox = true;
        else if (strcmp(m, "ReadWriteOnce") == 0)
            rwo = true;
        else
            other = true;
    }
    if (rwop) {
        if (rwx || rox || rwo || other)
            return util_err_set(-EINVAL, "Kubernetes does not support use of ReadWriteOncePod "
                                         "with other access modes on the same PersistentVolume");
        *out = snmw ? CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_SINGLE_WRITER
                    : CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
        return 0;
    }
    if (rwx) {
        *out = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_MULTI_WRITER;
        return 0;
    }
    if (rox && rwo)
        return util_err_set(-EINVAL, "CSI does not support ReadOnlyMany and ReadWriteOnce on the "
                                     "same PersistentVolume");
    if (rox) {
        *out = CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__MULTI_NODE_READER_ONLY;
        return 0;
    }
    if (rwo) {
        *out = snmw ? CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_MULTI_WRITER
                    : CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__SINGLE_NODE_WRITER;
        return 0;
    }
    return -ENOTSUP;
}

int volcap_pv_access_mode(const json_object *pv, bool snmw, volcap_mode *out)
{
    json_object *list = kobj_path(pv, "spec.accessModes");
    size_t n = kobj_len(list);
    const char **modes = util_calloc(n ? n : 1, sizeof(*modes));
    for (size_t i = 0; i < n; i++)
        modes[i] = kobj_str_at(list, i);
    int rc = volcap_access_mode(modes, n, snmw, out);
    free(modes);
    if (rc == -ENOTSUP)
        rc = util_err_set(-EINVAL, "PersistentVolume %s: unsupported access modes",
                          kobj_name(pv) ? kobj_name(pv) : "");
    return rc;
}

int volcap_of_pv(const json_object *pv, bool snmw, const char *default_fstype,
                 Csi__V1__VolumeCapability **out)
{
    *out = NULL;
    volcap_mode mode;
    int rc = volcap_pv_access_mode(pv, snmw, &mode);
    if (rc < 0)
        return rc;
    Csi__V1__VolumeCapability *cap = util_calloc(1, sizeof(*cap));
    csi__v1__volume_capability__init(cap);
    cap->access_mode = util_calloc(1, sizeof(*cap->access_mode));
    csi__v1__volume_capability__access_mode__init(cap->access_mode);
    cap->access_mode->mode = mode;
    const char *vm = kobj_path_str(pv, "spec.volumeMode");
    if (vm && strcmp(vm, "Block") == 0) {
        cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK;
        cap->block = util_calloc(1, sizeof(*cap->block));
        csi__v1__volume_capability__block_volume__init(cap->block);
        *out = cap;
        return 0;
    }
    cap->access_type_case = CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_MOUNT;
    Csi__V1__VolumeCapability__MountVolume *mv = util_calloc(1, sizeof(*mv));
    csi__v1__volume_capability__mount_volume__init(mv);
    cap->mount = mv;
    const char *fs = kobj_path_str(pv, "spec.csi.fsType");
    if (!fs || !*fs)
        fs = default_fstype;
    if (fs && *fs)
        mv->fs_type = util_strdup(fs);
    json_object *opts = kobj_path(pv, "spec.mountOptions");
    size_t n = kobj_len(opts);
    mv->mount_flags = util_calloc(n ? n : 1, sizeof(char *));
    for (size_t i = 0; i < n; i++) {
        const char *o = kobj_str_at(opts, i);
        if (o)
            mv->mount_flags[mv->n_mount_flags++] = util_strdup(o);
    }
    *out = cap;
    return 0;
}

void volcap_free(Csi__V1__VolumeCapability *cap)
{
    if (cap)
        protobuf_c_message_free_unpacked(&cap->base, NULL);
}
