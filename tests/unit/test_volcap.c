/*
 * volcap: Kubernetes access modes as one CSI access mode, and a PV's
 * volume capability (the attacher's and the resizer's, the provisioner's
 * per mode). The PV-level rows of the access-mode rule are in
 * test_att_plan.c, the provisioner's wording of "none known" in
 * test_prov_plan.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <string.h>

#include "kobj/kobj.h"
#include "volcap/volcap.h"
#include "table.h"

#define MODE(m) CSI__V1__VOLUME_CAPABILITY__ACCESS_MODE__MODE__##m

static void test_access_mode_rule(void **state)
{
    (void)state;
    static const struct {
        const char *row;
        const char *modes[3];
        size_t n;
        bool snmw;
        int rc, mode;
    } rows[] = {
        {"RWO with SINGLE_NODE_MULTI_WRITER",
         {"ReadWriteOnce"},
         1,
         true,
         0,
         MODE(SINGLE_NODE_MULTI_WRITER)},
        {"RWO without it", {"ReadWriteOnce"}, 1, false, 0, MODE(SINGLE_NODE_WRITER)},
        {"RWOP with SINGLE_NODE_MULTI_WRITER",
         {"ReadWriteOncePod"},
         1,
         true,
         0,
         MODE(SINGLE_NODE_SINGLE_WRITER)},
        {"RWOP twice is RWOP",
         {"ReadWriteOncePod", "ReadWriteOncePod"},
         2,
         true,
         0,
         MODE(SINGLE_NODE_SINGLE_WRITER)},
        {"RWOP beside an unknown mode", {"ReadWriteOncePod", "Sometimes"}, 2, true, -EINVAL, 0},
        {"RWOP beside a NULL item", {"ReadWriteOncePod", NULL}, 2, true, -EINVAL, 0},
        {"RWX wins over RWO and ROX",
         {"ReadWriteOnce", "ReadOnlyMany", "ReadWriteMany"},
         3,
         false,
         0,
         MODE(MULTI_NODE_MULTI_WRITER)},
        {"ROX with RWO", {"ReadOnlyMany", "ReadWriteOnce"}, 2, false, -EINVAL, 0},
        {"ROX", {"ReadOnlyMany"}, 1, false, 0, MODE(MULTI_NODE_READER_ONLY)},
        {"an unknown mode beside RWO is ignored",
         {"Sometimes", "ReadWriteOnce"},
         2,
         false,
         0,
         MODE(SINGLE_NODE_WRITER)},
        {"none known: -ENOTSUP for the caller to word", {"Sometimes"}, 1, false, -ENOTSUP, 0},
        {"no mode at all", {NULL}, 0, false, -ENOTSUP, 0},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        volcap_mode m = MODE(MULTI_NODE_MULTI_WRITER);
        int rc = volcap_access_mode(rows[i].modes, rows[i].n, rows[i].snmw, &m);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        expect_int(rows[i].row, "mode", m, rc == 0 ? rows[i].mode : MODE(UNKNOWN));
    }
}

static void test_capability_of_a_pv(void **state)
{
    (void)state;
    static const struct {
        const char *row, *pv, *dflt;
        int rc;
        bool block;
        const char *fs;
        size_t flags;
    } rows[] = {
        {"block", "{`spec`:{`accessModes`:[`ReadWriteOnce`],`volumeMode`:`Block`}}", "ext4", 0,
         true, NULL, 0},
        {"mount with the PV's fsType and options",
         "{`spec`:{`accessModes`:[`ReadWriteOnce`],`mountOptions`:[`ro`,`noatime`],"
         "`csi`:{`fsType`:`xfs`}}}",
         "ext4", 0, false, "xfs", 2},
        {"mount without fsType takes the default", "{`spec`:{`accessModes`:[`ReadWriteOnce`]}}",
         "ext4", 0, false, "ext4", 0},
        {"no fsType and no default: none", "{`spec`:{`accessModes`:[`ReadWriteOnce`]}}", NULL, 0,
         false, NULL, 0},
        {"a mount option of the wrong type is left out",
         "{`spec`:{`accessModes`:[`ReadWriteOnce`],`mountOptions`:[1,`ro`]}}", NULL, 0, false, NULL,
         1},
        {"no known access mode names the PV",
         "{`metadata`:{`name`:`pv1`},`spec`:{`accessModes`:[]}}", NULL, -EINVAL, false, NULL, 0},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = J(rows[i].pv);
        Csi__V1__VolumeCapability *cap = NULL;
        int rc = volcap_of_pv(pv, false, rows[i].dflt, &cap);
        expect_int(rows[i].row, "rc", rc, rows[i].rc);
        if (rc < 0) {
            expect_str(rows[i].row, "message", util_err_last(),
                       "PersistentVolume pv1: unsupported access modes");
            expect_int(rows[i].row, "no capability", cap == NULL, 1);
        } else {
            expect_int(rows[i].row, "block",
                       cap->access_type_case == CSI__V1__VOLUME_CAPABILITY__ACCESS_TYPE_BLOCK,
                       rows[i].block);
            if (!rows[i].block) {
                expect_str(rows[i].row, "fsType",
                           cap->mount->fs_type && *cap->mount->fs_type ? cap->mount->fs_type : NULL,
                           rows[i].fs);
                expect_int(rows[i].row, "mount flags", (long long)cap->mount->n_mount_flags,
                           (long long)rows[i].flags);
            }
        }
        volcap_free(cap);
        json_object_put(pv);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_access_mode_rule),
        cmocka_unit_test(test_capability_of_a_pv),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
