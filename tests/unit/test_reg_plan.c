/*
 * Unit tests for the registrar's rules and for common/nodereg, the Node and
 * CSINode writes the kubelet makes on registration (docs:
 * upstream-behaviour.md A3/C, C.7-C.10): the nodeid annotation merge, the
 * topology label collision rule, the guarded JSON patches, the CSINode entry
 * upsert and removal, the registrar's flag rules, the /healthz verdict, and
 * the registration socket's answers. Every table row is one rule and names
 * it; a failing row prints its name.
 *
 * JSON fixtures are written with ` for " so they stay readable.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "nodereg/nodereg.h"
#include "registrar/registrar.h"
#include "table.h"

#define ANN "csi.volume.kubernetes.io/nodeid"

/* ---- helpers --------------------------------------------------------------------- */

/* A driver record: "k=v,k2=v2" segments, max volumes. */
static void drv(nodereg_driver *d, const char *name, const char *id, const char *segs, int64_t max)
{
    memset(d, 0, sizeof(*d));
    d->name = strdup(name);
    d->node_id = id ? strdup(id) : NULL;
    d->max_volumes = max;
    d->segments = calloc(8, sizeof(*d->segments));
    char *copy = strdup(segs ? segs : ""), *save = NULL;
    for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        assert_non_null(eq);
        *eq = '\0';
        d->segments[d->n_segments].key = strdup(kv);
        d->segments[d->n_segments].value = strdup(eq + 1);
        d->n_segments++;
    }
    free(copy);
}

/* ---- the nodeid annotation ------------------------------------------------------------- */

struct merge_row {
    const char *name, *old, *driver, *node_id; /* node_id NULL: remove */
    const char *want;                          /* NULL: no annotation left */
    int rc;
};

static const struct merge_row merge_rows[] = {
    {"no annotation yet: a map of our entry", NULL, "d.io", "n1", "{`d.io`:`n1`}", 0},
    {"an empty annotation counts as none", "", "d.io", "n1", "{`d.io`:`n1`}", 0},
    {"JSON null counts as none (Go's nil map)", "null", "d.io", "n1", "{`d.io`:`n1`}", 0},
    {"other drivers' entries are kept", "{`z.io`:`zz`,`a.io`:`aa`}", "d.io", "n1",
     "{`a.io`:`aa`,`d.io`:`n1`,`z.io`:`zz`}", 0},
    {"our entry is updated in place", "{`d.io`:`old`,`x.io`:`x`}", "d.io", "new",
     "{`d.io`:`new`,`x.io`:`x`}", 0},
    {"trailing blanks are fine", "{`x.io`:`x`} \n", "d.io", "n1", "{`d.io`:`n1`,`x.io`:`x`}", 0},
    {"removing ours keeps the others", "{`d.io`:`n1`,`x.io`:`x`}", "d.io", NULL, "{`x.io`:`x`}", 0},
    {"removing the last entry leaves no annotation", "{`d.io`:`n1`}", "d.io", NULL, NULL, 0},
    {"removing an absent entry changes nothing", "{`x.io`:`x`}", "d.io", NULL, "{`x.io`:`x`}", 0},
    {"malformed: not JSON", "not json", "d.io", "n1", NULL, -EINVAL},
    {"malformed: a list", "[`d.io`]", "d.io", "n1", NULL, -EINVAL},
    {"malformed: a value that is no string", "{`x.io`:1}", "d.io", "n1", NULL, -EINVAL},
    {"malformed: trailing garbage", "{`x.io`:`x`} x", "d.io", "n1", NULL, -EINVAL},
    {"malformed: a bare string", "`x`", "d.io", NULL, NULL, -EINVAL},
};

static void test_nodeid_annotation_merge_keeps_other_drivers_and_refuses_malformed(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(merge_rows); i++) {
        const struct merge_row *r = &merge_rows[i];
        char *old = Q(r->old);
        char *out = NULL;
        int rc = nodereg_nodeid_merge(old, r->driver, r->node_id, &out);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d (%s)", r->name, rc, r->rc, util_err_last());
        if (rc < 0 && !strstr(util_err_last(), ANN))
            fail_msg("[%s] the error does not name the annotation: %s", r->name, util_err_last());
        expect_json_text(r->name, out, r->want);
        /* Sorted keys, compact, as the kubelet (Go's json.Marshal) writes it. */
        if (out && r->want) {
            char *want = Q(r->want);
            if (strcmp(out, want) != 0)
                fail_msg("[%s] text %s, want exactly %s", r->name, out, want);
            free(want);
        }
        free(out);
        free(old);
    }
}

/* ---- Node patches -------------------------------------------------------------------------- */

struct node_row {
    const char *name;
    const char *node;
    const char *segs;
    bool install;
    const char *want; /* NULL: nothing to do */
    int rc;
};

#define N1   "`name`:`n`,`resourceVersion`:`7`"
#define RVT  "{`op`:`test`,`path`:`/metadata/resourceVersion`,`value`:`7`}"
#define ANNP "/metadata/annotations/csi.volume.kubernetes.io~1nodeid"

static const struct node_row node_rows[] = {
    {"a bare Node: annotations and labels maps added, guarded by resourceVersion",
     "{`metadata`:{" N1 "}}", "zone=z1", true,
     "[" RVT ",{`op`:`add`,`path`:`/metadata/annotations`,`value`:{`" ANN
     "`:`{\\`d.io\\`:\\`id\\`}`}},"
     "{`op`:`add`,`path`:`/metadata/labels`,`value`:{`zone`:`z1`}}]",
     0},
    {"maps present, our key absent: adds guarded by resourceVersion",
     "{`metadata`:{" N1 ",`annotations`:{`x`:`y`},`labels`:{`a`:`b`}}}", "zone=z1", true,
     "[" RVT ",{`op`:`add`,`path`:`" ANNP "`,`value`:`{\\`d.io\\`:\\`id\\`}`},"
     "{`op`:`add`,`path`:`/metadata/labels/zone`,`value`:`z1`}]",
     0},
    {"another driver's entry: test of the exact old value, then replace",
     "{`metadata`:{" N1 ",`annotations`:{`" ANN "`:`{\\`x.io\\`:\\`x\\`}`}}}", "", true,
     "[{`op`:`test`,`path`:`" ANNP "`,`value`:`{\\`x.io\\`:\\`x\\`}`},"
     "{`op`:`replace`,`path`:`" ANNP "`,`value`:`{\\`d.io\\`:\\`id\\`,\\`x.io\\`:\\`x\\`}`}]",
     0},
    {"everything in place: no patch",
     "{`metadata`:{" N1 ",`annotations`:{`" ANN
     "`:`{\\`d.io\\`:\\`id\\`}`},`labels`:{`zone`:`z1`}}}",
     "zone=z1", true, NULL, 0},
    {"a label with another value is a collision, nothing written",
     "{`metadata`:{" N1 ",`labels`:{`zone`:`z9`}}}", "zone=z1", true, NULL, -EEXIST},
    {"a label key with / is escaped in the path", "{`metadata`:{" N1 ",`labels`:{}}}",
     "topology.example.com/zone=z1", true,
     "[" RVT ",{`op`:`add`,`path`:`/metadata/annotations`,`value`:{`" ANN
     "`:`{\\`d.io\\`:\\`id\\`}`}},"
     "{`op`:`add`,`path`:`/metadata/labels/topology.example.com~1zone`,`value`:`z1`}]",
     0},
    {"a malformed annotation is refused, not overwritten",
     "{`metadata`:{" N1 ",`annotations`:{`" ANN "`:`oops`}}}", "", true, NULL, -EINVAL},
    {"labels that are no map are refused", "{`metadata`:{" N1 ",`labels`:`x`}}", "zone=z1", true,
     NULL, -EINVAL},
    {"an annotation that is no string is refused",
     "{`metadata`:{" N1 ",`annotations`:{`" ANN "`:5}}}", "", true, NULL, -EINVAL},
    {"no metadata at all is refused", "{}", "", true, NULL, -EINVAL},
    {"uninstall with others left: test and replace",
     "{`metadata`:{" N1 ",`annotations`:{`" ANN "`:`{\\`d.io\\`:\\`id\\`,\\`x.io\\`:\\`x\\`}`}}}",
     "", false,
     "[{`op`:`test`,`path`:`" ANNP "`,`value`:`{\\`d.io\\`:\\`id\\`,\\`x.io\\`:\\`x\\`}`},"
     "{`op`:`replace`,`path`:`" ANNP "`,`value`:`{\\`x.io\\`:\\`x\\`}`}]",
     0},
    {"uninstall of the last entry: test and remove the annotation",
     "{`metadata`:{" N1 ",`annotations`:{`" ANN
     "`:`{\\`d.io\\`:\\`id\\`}`},`labels`:{`zone`:`z1`}}}",
     "zone=z1", false,
     "[{`op`:`test`,`path`:`" ANNP "`,`value`:`{\\`d.io\\`:\\`id\\`}`},{`op`:`remove`,`path`:`" ANNP
     "`}]",
     0},
    {"uninstall when we are not there: no patch", "{`metadata`:{" N1 "}}", "", false, NULL, 0},
};

static void test_node_patch_is_guarded_and_never_touches_other_drivers(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(node_rows); i++) {
        const struct node_row *r = &node_rows[i];
        json_object *node = J(r->node);
        nodereg_driver d;
        drv(&d, "d.io", "id", r->segs, 0);
        char *patch = NULL;
        int rc = nodereg_node_patch(node, &d, r->install, &patch);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d (%s)", r->name, rc, r->rc, util_err_last());
        expect_json_text(r->name, patch, r->want);
        free(patch);
        nodereg_driver_clear(&d);
        json_object_put(node);
    }
}

struct label_row {
    const char *name, *node, *segs;
    int rc;
};

static const struct label_row label_rows[] = {
    {"no labels yet: fine", "{`metadata`:{}}", "zone=z1", 0},
    {"the same value already there: fine", "{`metadata`:{`labels`:{`zone`:`z1`}}}", "zone=z1", 0},
    {"another value: collision", "{`metadata`:{`labels`:{`zone`:`z2`}}}", "zone=z1", -EEXIST},
    {"an empty value differs from a set one", "{`metadata`:{`labels`:{`zone`:``}}}", "zone=z1",
     -EEXIST},
    {"unrelated labels do not matter", "{`metadata`:{`labels`:{`rack`:`r9`}}}", "zone=z1", 0},
    {"no segments: nothing to collide", "{`metadata`:{`labels`:{`zone`:`z2`}}}", "", 0},
};

static void test_topology_label_with_another_value_is_a_collision(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(label_rows); i++) {
        const struct label_row *r = &label_rows[i];
        json_object *node = J(r->node);
        nodereg_driver d;
        drv(&d, "d.io", "id", r->segs, 0);
        int rc = nodereg_labels_check(node, &d);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d", r->name, rc, r->rc);
        if (rc == -EEXIST && !strstr(util_err_last(), "detected topology value collision"))
            fail_msg("[%s] message: %s", r->name, util_err_last());
        nodereg_driver_clear(&d);
        json_object_put(node);
    }
}

/* ---- CSINode patches ----------------------------------------------------------------------------
 */

struct csinode_row {
    const char *name;
    const char *csinode;
    int64_t max;
    bool install;
    const char *migrated;
    const char *want;
    bool again;
    int rc;
};

#define CN    "`metadata`:{`name`:`n`,`resourceVersion`:`7`}"
#define ENTRY "{`name`:`d.io`,`nodeID`:`id`,`topologyKeys`:[`a`,`z`]}"
#define OTHER "{`name`:`x.io`,`nodeID`:`xx`}"

static const struct csinode_row csinode_rows[] = {
    {"no spec: the whole spec added, guarded", "{" CN "}", 0, true, NULL,
     "[" RVT ",{`op`:`add`,`path`:`/spec`,`value`:{`drivers`:[" ENTRY "]}}]", false, 0},
    {"drivers null: the list added", "{" CN ",`spec`:{`drivers`:null}}", 0, true, NULL,
     "[" RVT ",{`op`:`add`,`path`:`/spec/drivers`,`value`:[" ENTRY "]}]", false, 0},
    {"other drivers: our entry appended, theirs untouched",
     "{" CN ",`spec`:{`drivers`:[" OTHER "]}}", 0, true, NULL,
     "[" RVT ",{`op`:`add`,`path`:`/spec/drivers/-`,`value`:" ENTRY "}]", false, 0},
    {"allocatable.count from max volumes", "{" CN ",`spec`:{`drivers`:[]}}", 3, true, NULL,
     "[" RVT ",{`op`:`add`,`path`:`/spec/drivers/-`,`value`:{`name`:`d.io`,`nodeID`:`id`,"
     "`topologyKeys`:[`a`,`z`],`allocatable`:{`count`:3}}}]",
     false, 0},
    {"our entry in place (keys in another order): no patch",
     "{" CN ",`spec`:{`drivers`:[" OTHER
     ",{`name`:`d.io`,`nodeID`:`id`,`topologyKeys`:[`z`,`a`]}]}}",
     0, true, NULL, NULL, false, 0},
    {"our entry with another node id: exact test and remove first, then plan again",
     "{" CN ",`spec`:{`drivers`:[" OTHER ",{`name`:`d.io`,`nodeID`:`old`}]}}", 0, true, NULL,
     "[{`op`:`test`,`path`:`/spec/drivers/1`,`value`:{`name`:`d.io`,`nodeID`:`old`}},"
     "{`op`:`remove`,`path`:`/spec/drivers/1`}]",
     true, 0},
    {"a stale allocatable.count is replaced the same way",
     "{" CN ",`spec`:{`drivers`:[{`name`:`d.io`,`nodeID`:`id`,`topologyKeys`:[`a`,`z`],"
     "`allocatable`:{`count`:9}}]}}",
     0, true, NULL,
     "[{`op`:`test`,`path`:`/spec/drivers/0`,`value`:{`name`:`d.io`,`nodeID`:`id`,"
     "`topologyKeys`:[`a`,`z`],`allocatable`:{`count`:9}}},{`op`:`remove`,`path`:`/spec/drivers/"
     "0`}]",
     true, 0},
    {"drivers that are no list are refused", "{" CN ",`spec`:{`drivers`:{}}}", 0, true, NULL, NULL,
     false, -EINVAL},
    {"a spec that is no object is refused", "{" CN ",`spec`:1}", 0, true, NULL, NULL, false,
     -EINVAL},
    {"uninstall: exact test and remove of our entry only",
     "{" CN ",`spec`:{`drivers`:[" OTHER "," ENTRY "]}}", 0, false, NULL,
     "[{`op`:`test`,`path`:`/spec/drivers/1`,`value`:" ENTRY "},"
     "{`op`:`remove`,`path`:`/spec/drivers/1`}]",
     false, 0},
    {"uninstall when absent: no patch", "{" CN ",`spec`:{`drivers`:[" OTHER "]}}", 0, false, NULL,
     NULL, false, 0},
    {"the kubelet's migrated-plugins annotation is added when missing",
     "{" CN ",`spec`:{`drivers`:[" ENTRY "]}}", 0, true, "a/x,a/y",
     "[" RVT ",{`op`:`add`,`path`:`/metadata/annotations`,"
     "`value`:{`storage.alpha.kubernetes.io/migrated-plugins`:`a/x,a/y`}}]",
     false, 0},
    {"... and left alone when it holds the same set in another order",
     "{`metadata`:{`name`:`n`,`resourceVersion`:`7`,`annotations`:{"
     "`storage.alpha.kubernetes.io/migrated-plugins`:`a/y,a/x`}},`spec`:{`drivers`:[" ENTRY "]}}",
     0, true, "a/x,a/y", NULL, false, 0},
};

static void test_csinode_entry_upsert_and_removal(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(csinode_rows); i++) {
        const struct csinode_row *r = &csinode_rows[i];
        json_object *cn = J(r->csinode);
        nodereg_driver d;
        drv(&d, "d.io", "id", "z=1,a=2", r->max);
        /* drv() keeps the given order; the record from NodeGetInfo is sorted. */
        nodereg_segment t = d.segments[0];
        d.segments[0] = d.segments[1];
        d.segments[1] = t;
        char *patch = NULL;
        bool again = false;
        int rc = nodereg_csinode_patch(cn, &d, r->install, r->migrated, &patch, &again);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d (%s)", r->name, rc, r->rc, util_err_last());
        if (again != r->again)
            fail_msg("[%s] again %d, want %d", r->name, again, r->again);
        expect_json_text(r->name, patch, r->want);
        free(patch);
        nodereg_driver_clear(&d);
        json_object_put(cn);
    }
}

static void test_csinode_is_created_owned_by_its_node(void **state)
{
    (void)state;
    json_object *node = J("{`metadata`:{`name`:`n`,`uid`:`u-1`}}");
    nodereg_driver d;
    drv(&d, "d.io", "id", "", 4);
    json_object *cn = nodereg_csinode_new(node, &d, "a/x");
    char *want = Q("{`apiVersion`:`storage.k8s.io/v1`,`kind`:`CSINode`,`metadata`:{`name`:`n`,"
                   "`ownerReferences`:[{`apiVersion`:`v1`,`kind`:`Node`,`name`:`n`,`uid`:`u-1`}],"
                   "`annotations`:{`storage.alpha.kubernetes.io/migrated-plugins`:`a/x`}},"
                   "`spec`:{`drivers`:[{`name`:`d.io`,`nodeID`:`id`,`topologyKeys`:[],"
                   "`allocatable`:{`count`:4}}]}}");
    expect_json_text("created CSINode", json_object_to_json_string(cn), want);
    assert_true(nodereg_csinode_has(cn, &d));
    json_object_put(cn);
    cn = nodereg_csinode_new(node, NULL, NULL);
    expect_json_text(
        "the kubelet's empty CSINode", json_object_to_json_string(cn),
        "{`apiVersion`:`storage.k8s.io/v1`,`kind`:`CSINode`,`metadata`:{`name`:`n`,"
        "`ownerReferences`:[{`apiVersion`:`v1`,`kind`:`Node`,`name`:`n`,`uid`:`u-1`}]},"
        "`spec`:{`drivers`:[]}}");
    json_object_put(cn);
    free(want);
    nodereg_driver_clear(&d);
    json_object_put(node);
}

static void test_driver_record_from_node_get_info_follows_the_kubelet(void **state)
{
    (void)state;
    Csi__V1__NodeGetInfoResponse info = CSI__V1__NODE_GET_INFO_RESPONSE__INIT;
    nodereg_driver d;
    info.node_id = (char *)"";
    assert_int_equal(nodereg_driver_from_info("d.io", &info, &d), -EINVAL);
    assert_non_null(strstr(util_err_last(), "driverNodeID must not be empty"));

    Csi__V1__Topology topo = CSI__V1__TOPOLOGY__INIT;
    Csi__V1__Topology__SegmentsEntry s1 = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT,
                                     s2 = CSI__V1__TOPOLOGY__SEGMENTS_ENTRY__INIT;
    s1.key = (char *)"zone";
    s1.value = (char *)"z1";
    s2.key = (char *)"rack";
    s2.value = (char *)"r1";
    Csi__V1__Topology__SegmentsEntry *segs[] = {&s1, &s2};
    topo.segments = segs;
    topo.n_segments = 2;
    info.node_id = (char *)"id";
    info.accessible_topology = &topo;
    info.max_volumes_per_node = (int64_t)INT32_MAX + 5;
    assert_int_equal(nodereg_driver_from_info("d.io", &info, &d), 0);
    assert_int_equal(d.max_volumes, INT32_MAX); /* allocatable.count is an int32 */
    assert_int_equal(d.n_segments, 2);
    assert_string_equal(d.segments[0].key, "rack"); /* sorted, as topologyKeys */
    nodereg_driver_clear(&d);

    info.max_volumes_per_node = -3;
    assert_int_equal(nodereg_driver_from_info("d.io", &info, &d), 0);
    assert_int_equal(d.max_volumes, 0); /* negative: ignored, as the kubelet */
    nodereg_driver_clear(&d);
}

/* ---- flags
 * ---------------------------------------------------------------------------------------- */

struct flag_row {
    const char *name;
    const char *args[6];
    const char *env_node;
    int rc;
    const char *msg;  /* substring of the error */
    const char *addr; /* resolved HTTP address */
    bool direct;
    const char *node;
};

static const struct flag_row flag_rows[] = {
    {"--kubelet-registration-path is required",
     {NULL},
     NULL,
     -EINVAL,
     "kubelet-registration-path is a required parameter",
     NULL,
     false,
     NULL},
    {"the probe mode exits at once, even without the path",
     {"--mode=kubelet-registration-probe"},
     NULL,
     REG_EXIT_NOW,
     NULL,
     NULL,
     false,
     NULL},
    {"--mode=registration runs as usual",
     {"--mode=registration", "--kubelet-registration-path=/k"},
     NULL,
     0,
     NULL,
     NULL,
     false,
     NULL},
    {"both health flags are refused",
     {"--kubelet-registration-path=/k", "--http-endpoint=:1", "--health-port=2"},
     NULL,
     -EINVAL,
     "only one of `--health-port` and `--http-endpoint` can be set.",
     NULL,
     false,
     NULL},
    {"--health-port serves on :port",
     {"--kubelet-registration-path=/k", "--health-port=9809"},
     NULL,
     0,
     NULL,
     ":9809",
     false,
     NULL},
    {"--http-endpoint as given",
     {"--kubelet-registration-path=/k", "--http-endpoint=127.0.0.1:8"},
     NULL,
     0,
     NULL,
     "127.0.0.1:8",
     false,
     NULL},
    {"direct mode needs no registration path but a node name",
     {"--node-registration=direct"},
     NULL,
     -EINVAL,
     "NODE_NAME",
     NULL,
     true,
     NULL},
    {"direct mode takes $NODE_NAME",
     {"--node-registration=direct"},
     "env-node",
     0,
     NULL,
     NULL,
     true,
     "env-node"},
    {"--node-name wins over $NODE_NAME",
     {"--node-registration=direct", "--node-name=flag-node"},
     "env-node",
     0,
     NULL,
     NULL,
     true,
     "flag-node"},
    {"an unknown registration mode is refused",
     {"--node-registration=both"},
     NULL,
     -EINVAL,
     "--node-registration",
     NULL,
     false,
     NULL},
    {"--cleanup-on-exit only in direct mode",
     {"--kubelet-registration-path=/k", "--cleanup-on-exit"},
     NULL,
     -EINVAL,
     "--cleanup-on-exit",
     NULL,
     false,
     NULL},
};

static void test_flag_rules_as_upstream(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(flag_rows); i++) {
        const struct flag_row *r = &flag_rows[i];
        util_flags *f = util_flags_new("reg", "v");
        reg_flags fl;
        assert_int_equal(reg_flags_add(f, &fl), 0);
        char *argv[8] = {(char *)"reg"};
        int argc = 1;
        for (int k = 0; r->args[k]; k++)
            argv[argc++] = (char *)r->args[k];
        assert_int_equal(util_flags_parse(f, argc, argv, NULL), 0);
        reg_config cfg;
        int rc = reg_flags_check(&fl, r->env_node, &cfg);
        if (rc != r->rc)
            fail_msg("[%s] rc %d, want %d (%s)", r->name, rc, r->rc, util_err_last());
        if (r->msg && !strstr(util_err_last(), r->msg))
            fail_msg("[%s] message %s lacks %s", r->name, util_err_last(), r->msg);
        if (rc == 0) {
            if ((r->addr == NULL) != (cfg.http_addr == NULL) ||
                (r->addr && strcmp(r->addr, cfg.http_addr) != 0))
                fail_msg("[%s] address %s, want %s", r->name, cfg.http_addr ? cfg.http_addr : "-",
                         r->addr ? r->addr : "-");
            if (cfg.direct != r->direct || (r->node && strcmp(r->node, cfg.node_name) != 0))
                fail_msg("[%s] direct %d node %s", r->name, cfg.direct,
                         cfg.node_name ? cfg.node_name : "-");
        }
        reg_config_clear(&cfg);
        util_flags_free(f);
    }
}

static void test_flag_defaults_as_upstream(void **state)
{
    (void)state;
    util_flags *f = util_flags_new("reg", "v");
    reg_flags fl;
    reg_flags_add(f, &fl);
    assert_string_equal(fl.plugin_registration_path, "/registration");
    assert_int_equal(fl.timeout, UTIL_SECOND);
    assert_int_equal(fl.health_port, 0);
    assert_string_equal(fl.http_endpoint, "");
    assert_false(fl.cleanup_on_exit);
    assert_string_equal(fl.node_registration, "kubelet");
    char *p = reg_socket_path("/registration", "d.example.com");
    assert_string_equal(p, "/registration/d.example.com-reg.sock");
    free(p);
    util_flags_free(f);
}

/* ---- /healthz
 * ------------------------------------------------------------------------------------ */

struct health_row {
    const char *name;
    const char *sock;
    bool exists;
    const char *info_err, *info_name, *drv_err;
    int code;
    const char *body;
};

static const struct health_row health_rows[] = {
    {"all answer: 200 ok", "/r/d-reg.sock", true, NULL, "d", NULL, 200, "ok"},
    {"no socket: 404 as upstream", "/r/d-reg.sock", false, NULL, NULL, NULL, 404,
     "registration socket does not exist"},
    {"GetInfo fails: 500", "/r/d-reg.sock", true, "Unavailable: x", NULL, NULL, 500,
     "error getting info"},
    {"GetInfo names another driver: 500", "/r/d-reg.sock", true, NULL, "e", NULL, 500,
     "invalid driver name e"},
    {"the driver is gone: 500 (beyond upstream)", "/r/d-reg.sock", true, NULL, "d",
     "lost connection", 500, "lost connection"},
    {"direct mode: only the driver counts", NULL, false, NULL, NULL, NULL, 200, "ok"},
    {"direct mode, driver gone: 500", NULL, false, NULL, NULL, "lost connection", 500,
     "lost connection"},
};

static void test_healthz_is_red_without_socket_or_driver(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(health_rows); i++) {
        const struct health_row *r = &health_rows[i];
        int code = 0;
        char *body = NULL;
        reg_health_verdict(r->sock, r->exists, r->info_err, r->info_name, "d", r->drv_err, &code,
                           &body);
        if (code != r->code || !strstr(body, r->body))
            fail_msg("[%s] %d %s, want %d %s", r->name, code, body, r->code, r->body);
        free(body);
    }
}

/* ---- the registration socket
 * --------------------------------------------------------------------- */

static void rejected(void *ud, const char *error)
{
    atomic_int *n = ud;
    (void)error;
    atomic_fetch_add(n, 1);
}

static int call(const char *sock, const char *method, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **resp)
{
    csi_conn_opts co = {.connect_timeout = 5 * UTIL_SECOND};
    csi_conn *c = NULL;
    assert_int_equal(csi_conn_new(sock, &co, &c), 0);
    csi_status st;
    int rc = csi_call(c, method, req, desc, 5 * UTIL_SECOND, resp, &st);
    csi_conn_free(c);
    return rc;
}

static void test_registration_socket_answers_getinfo_and_reports_rejection(void **state)
{
    (void)state;
    char dir[] = "/tmp/reg-unit-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *sock = reg_socket_path(dir, "d.example.com");
    /* A stale socket file from an earlier run is replaced... */
    assert_int_equal(mknod(sock, S_IFSOCK | 0666, 0), 0);
    atomic_int rejections = 0;
    reg_kubelet_opts o = {.driver = "d.example.com",
                          .endpoint = "/var/lib/kubelet/plugins/d/csi.sock",
                          .socket_path = sock,
                          .on_rejected = rejected,
                          .ud = &rejections};
    reg_kubelet *k = NULL;
    assert_int_equal(reg_kubelet_start(&o, &k), 0);
    struct stat st;
    assert_int_equal(lstat(sock, &st), 0);
    assert_true(S_ISSOCK(st.st_mode));
    assert_int_equal(st.st_mode & 077, 0); /* owner-only */

    Pluginregistration__InfoRequest req = PLUGINREGISTRATION__INFO_REQUEST__INIT;
    ProtobufCMessage *resp = NULL;
    assert_int_equal(call(sock, "/pluginregistration.Registration/GetInfo", &req.base,
                          &pluginregistration__plugin_info__descriptor, &resp),
                     0);
    const Pluginregistration__PluginInfo *info = (const Pluginregistration__PluginInfo *)resp;
    assert_string_equal(info->type, "CSIPlugin");
    assert_string_equal(info->name, "d.example.com");
    assert_string_equal(info->endpoint, "/var/lib/kubelet/plugins/d/csi.sock");
    assert_int_equal(info->n_supported_versions, 1);
    assert_string_equal(info->supported_versions[0], "1.0.0");
    protobuf_c_message_free_unpacked(resp, NULL);

    Pluginregistration__RegistrationStatus ok = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
    ok.plugin_registered = true;
    assert_int_equal(call(sock, "/pluginregistration.Registration/NotifyRegistrationStatus",
                          &ok.base, &pluginregistration__registration_status_response__descriptor,
                          &resp),
                     0);
    protobuf_c_message_free_unpacked(resp, NULL);
    assert_int_equal(atomic_load(&rejections), 0);
    Pluginregistration__RegistrationStatus no = PLUGINREGISTRATION__REGISTRATION_STATUS__INIT;
    no.error = (char *)"label collision";
    assert_int_equal(call(sock, "/pluginregistration.Registration/NotifyRegistrationStatus",
                          &no.base, &pluginregistration__registration_status_response__descriptor,
                          &resp),
                     0);
    protobuf_c_message_free_unpacked(resp, NULL);
    assert_int_equal(atomic_load(&rejections), 1);

    reg_kubelet_free(k);
    assert_int_not_equal(lstat(sock, &st), 0); /* removed on stop */

    /* ...but any other file there is fatal. */
    FILE *fp = fopen(sock, "w");
    assert_non_null(fp);
    fclose(fp);
    assert_int_equal(reg_kubelet_start(&o, &k), -EEXIST);
    assert_non_null(strstr(util_err_last(), "not a socket"));
    unlink(sock);
    rmdir(dir);
    free(sock);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nodeid_annotation_merge_keeps_other_drivers_and_refuses_malformed),
        cmocka_unit_test(test_node_patch_is_guarded_and_never_touches_other_drivers),
        cmocka_unit_test(test_topology_label_with_another_value_is_a_collision),
        cmocka_unit_test(test_csinode_entry_upsert_and_removal),
        cmocka_unit_test(test_csinode_is_created_owned_by_its_node),
        cmocka_unit_test(test_driver_record_from_node_get_info_follows_the_kubelet),
        cmocka_unit_test(test_flag_rules_as_upstream),
        cmocka_unit_test(test_flag_defaults_as_upstream),
        cmocka_unit_test(test_healthz_is_red_without_socket_or_driver),
        cmocka_unit_test(test_registration_socket_answers_getinfo_and_reports_rejection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
