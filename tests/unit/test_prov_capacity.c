/*
 * Unit tests for storage capacity planning (provisioner/capacity_plan.c),
 * checked against upstream external-provisioner's pkg/capacity and
 * pkg/owner (docs: upstream-behaviour.md A1.2, A1.9). Every table row is one
 * rule and names it; a failing row prints its name.
 *
 * JSON fixtures are written with ` for " so they stay readable; J() turns
 * them back.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "provisioner/provisioner.h"
#include "table.h"

#define DRIVER "cap.csi.example.com"

/* ---- helpers ------------------------------------------------------------- */

static const char *OWNER = "{`apiVersion`:`v1`,`kind`:`Pod`,`name`:`prov-0`,`uid`:`u-pod`,"
                           "`controller`:true}";

static prov_cap_config config(const json_object *owner, bool immediate)
{
    return (prov_cap_config){.driver_name = DRIVER,
                             .managed_by = PROV_CAP_MANAGED_BY,
                             .namespace = "kube-system",
                             .owner = owner,
                             .immediate_binding = immediate};
}

/* ---- which classes ---------------------------------------------------------- */

static void test_class_wanted_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *sc;
        bool immediate, want;
    } rows[] = {
        {"WaitForFirstConsumer class of the driver gets objects",
         "{`provisioner`:`" DRIVER "`,`volumeBindingMode`:`WaitForFirstConsumer`}", false, true},
        {"Immediate class gets none without --capacity-for-immediate-binding",
         "{`provisioner`:`" DRIVER "`,`volumeBindingMode`:`Immediate`}", false, false},
        {"Immediate class gets objects with --capacity-for-immediate-binding",
         "{`provisioner`:`" DRIVER "`,`volumeBindingMode`:`Immediate`}", true, true},
        {"an unset mode is Immediate", "{`provisioner`:`" DRIVER "`}", false, false},
        {"another driver's class never",
         "{`provisioner`:`x.example.com`,`volumeBindingMode`:"
         "`WaitForFirstConsumer`}",
         true, false},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *sc = J(rows[i].sc);
        prov_cap_config cc = config(NULL, rows[i].immediate);
        expect_int(rows[i].name, "wanted", prov_cap_class_wanted(&cc, sc), rows[i].want);
        json_object_put(sc);
    }
}

/* ---- segments ------------------------------------------------------------------ */

static void test_node_segment_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *csinode, *node;
        int rc;
        const char *want;
    } rows[] = {
        {"the driver's keys with the node's values, sorted by key",
         "{`metadata`:{`name`:`n1`},`spec`:{`drivers`:[{`name`:`other`,`topologyKeys`:[`x`]},"
         "{`name`:`" DRIVER "`,`topologyKeys`:[`zone`,`rack`]}]}}",
         "{`metadata`:{`name`:`n1`,`labels`:{`zone`:`z1`,`rack`:`r7`,`x`:`y`}}}", 0,
         "rack=r7,zone=z1"},
        {"a driver without keys gives the empty segment",
         "{`metadata`:{`name`:`n1`},`spec`:{`drivers`:[{`name`:`" DRIVER "`}]}}",
         "{`metadata`:{`name`:`n1`}}", 0, ""},
        {"a key listed twice counts once",
         "{`metadata`:{`name`:`n1`},`spec`:{`drivers`:[{`name`:`" DRIVER
         "`,`topologyKeys`:[`zone`,`zone`]}]}}",
         "{`metadata`:{`name`:`n1`,`labels`:{`zone`:`z1`}}}", 0, "zone=z1"},
        {"a node without the driver contributes none",
         "{`metadata`:{`name`:`n1`},`spec`:{`drivers`:[{`name`:`other`,`topologyKeys`:[`z`]}]}}",
         "{`metadata`:{`name`:`n1`,`labels`:{`z`:`1`}}}", -ENOENT, NULL},
        {"a key the node has no label for (yet) contributes none",
         "{`metadata`:{`name`:`n1`},`spec`:{`drivers`:[{`name`:`" DRIVER
         "`,`topologyKeys`:[`zone`,`rack`]}]}}",
         "{`metadata`:{`name`:`n1`,`labels`:{`zone`:`z1`}}}", -ENOENT, NULL},
        {"a CSINode without its Node contributes none",
         "{`metadata`:{`name`:`n1`},`spec`:{`drivers`:[{`name`:`" DRIVER
         "`,`topologyKeys`:[`zone`]}]}}",
         NULL, -ENOENT, NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *csinode = J(rows[i].csinode), *node = J(rows[i].node);
        char *seg = NULL;
        int rc = prov_cap_node_segment(DRIVER, csinode, node, &seg);
        expect_int(rows[i].name, "rc", rc, rows[i].rc);
        expect_str(rows[i].name, "segment", seg, rows[i].want);
        free(seg);
        json_object_put(csinode);
        json_object_put(node);
    }
}

/* ---- work items ---------------------------------------------------------------------- */

static char *joined(char **keys, size_t n)
{
    size_t len = 1;
    for (size_t i = 0; i < n; i++)
        len += strlen(keys[i]) + 1;
    char *s = calloc(1, len);
    assert_non_null(s);
    for (size_t i = 0; i < n; i++) {
        if (i)
            strcat(s, " ");
        strcat(s, keys[i]);
    }
    return s;
}

static void test_items_segments_times_classes_table(void **state)
{
    (void)state;
    static const char *const classes_json[] = {
        "{`metadata`:{`name`:`slow`},`provisioner`:`" DRIVER
        "`,`volumeBindingMode`:`WaitForFirstConsumer`}",
        "{`metadata`:{`name`:`imm`},`provisioner`:`" DRIVER "`,`volumeBindingMode`:`Immediate`}",
        "{`metadata`:{`name`:`fast`},`provisioner`:`" DRIVER
        "`,`volumeBindingMode`:`WaitForFirstConsumer`}",
        "{`metadata`:{`name`:`theirs`},`provisioner`:`x.example.com`,`volumeBindingMode`:"
        "`WaitForFirstConsumer`}",
    };
    static const struct {
        const char *name;
        const char *segments[3];
        size_t n_segments;
        bool immediate;
        const char *want;
    } rows[] = {
        {"every zone x every WaitForFirstConsumer class of the driver, sorted",
         {"zone=z2", "zone=z1"},
         2,
         false,
         "fast/zone=z1 fast/zone=z2 slow/zone=z1 slow/zone=z2"},
        {"Immediate classes join with the flag",
         {"zone=z1"},
         1,
         true,
         "fast/zone=z1 imm/zone=z1 slow/zone=z1"},
        {"a driver without topology has one empty segment", {""}, 1, false, "fast/ slow/"},
        {"no segment (no node runs the driver yet): nothing", {NULL}, 0, false, ""},
    };
    json_object *classes[N_ROWS(classes_json)];
    for (size_t i = 0; i < N_ROWS(classes_json); i++)
        classes[i] = J(classes_json[i]);
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        prov_cap_config cc = config(NULL, rows[i].immediate);
        char **keys = NULL;
        size_t n = 0;
        assert_int_equal(prov_cap_items(&cc, rows[i].segments, rows[i].n_segments,
                                        (const json_object *const *)classes, N_ROWS(classes), &keys,
                                        &n),
                         0);
        char *got = joined(keys, n);
        expect_str(rows[i].name, "items", got, rows[i].want);
        free(got);
        prov_cap_keys_free(keys, n);
    }
    for (size_t i = 0; i < N_ROWS(classes_json); i++)
        json_object_put(classes[i]);
}

static void test_object_key_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *obj, *want;
    } rows[] = {
        {"class and matchLabels, keys sorted",
         "{`metadata`:{`name`:`csisc-1`},`storageClassName`:`fast`,`nodeTopology`:{"
         "`matchLabels`:{`zone`:`z1`,`rack`:`r1`}}}",
         "fast/rack=r1,zone=z1"},
        {"an empty selector is the empty segment",
         "{`metadata`:{`name`:`csisc-1`},`storageClassName`:`fast`,`nodeTopology`:{}}", "fast/"},
        {"empty matchLabels are the empty segment too",
         "{`metadata`:{`name`:`csisc-1`},`storageClassName`:`fast`,`nodeTopology`:{"
         "`matchLabels`:{}}}",
         "fast/"},
        {"matchExpressions: no item can want it",
         "{`metadata`:{`name`:`csisc-1`},`storageClassName`:`fast`,`nodeTopology`:{"
         "`matchExpressions`:[{`key`:`zone`,`operator`:`In`,`values`:[`a`,`b`]}]}}",
         "!csisc-1"},
        {"no class: no item can want it", "{`metadata`:{`name`:`csisc-2`},`nodeTopology`:{}}",
         "!csisc-2"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *o = J(rows[i].obj);
        char *key = prov_cap_object_key(o);
        expect_str(rows[i].name, "key", key, rows[i].want);
        char *sc = NULL, *seg = NULL;
        int rc = prov_cap_key_split(key, &sc, &seg);
        expect_int(rows[i].name, "split", rc, rows[i].want[0] == '!' ? -EINVAL : 0);
        free(sc);
        free(seg);
        free(key);
        json_object_put(o);
    }
}

static void test_affinity_segments_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *pv, *want;
    } rows[] = {
        {"one term: its In expressions, sorted by key",
         "{`spec`:{`nodeAffinity`:{`required`:{`nodeSelectorTerms`:[{`matchExpressions`:["
         "{`key`:`zone`,`operator`:`In`,`values`:[`z1`]},{`key`:`rack`,`operator`:`In`,"
         "`values`:[`r1`]}]}]}}}}",
         "rack=r1,zone=z1"},
        {"several terms: several segments, sorted, distinct",
         "{`spec`:{`nodeAffinity`:{`required`:{`nodeSelectorTerms`:["
         "{`matchExpressions`:[{`key`:`zone`,`operator`:`In`,`values`:[`z2`]}]},"
         "{`matchExpressions`:[{`key`:`zone`,`operator`:`In`,`values`:[`z1`]}]},"
         "{`matchExpressions`:[{`key`:`zone`,`operator`:`In`,`values`:[`z2`]}]}]}}}}",
         "zone=z1 zone=z2"},
        {"a term with two values, another operator or matchFields is skipped",
         "{`spec`:{`nodeAffinity`:{`required`:{`nodeSelectorTerms`:["
         "{`matchExpressions`:[{`key`:`zone`,`operator`:`In`,`values`:[`z1`,`z2`]}]},"
         "{`matchExpressions`:[{`key`:`zone`,`operator`:`NotIn`,`values`:[`z1`]}]},"
         "{`matchFields`:[{`key`:`metadata.name`,`operator`:`In`,`values`:[`n`]}]},"
         "{`matchExpressions`:[{`key`:`zone`,`operator`:`In`,`values`:[`z3`]}]}]}}}}",
         "zone=z3"},
        {"no nodeAffinity: none", "{`spec`:{}}", ""},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = J(rows[i].pv);
        char **segs = NULL;
        size_t n = 0;
        assert_int_equal(prov_cap_affinity_segments(pv, &segs, &n), 0);
        char *got = joined(segs, n);
        expect_str(rows[i].name, "segments", got, rows[i].want);
        free(got);
        prov_cap_keys_free(segs, n);
        json_object_put(pv);
    }
}

static void test_segment_topology_for_get_capacity(void **state)
{
    (void)state;
    assert_null(prov_cap_segment_topology(""));
    Csi__V1__Topology *t = prov_cap_segment_topology("rack=r1,zone=z1");
    assert_non_null(t);
    assert_int_equal(t->n_segments, 2);
    assert_string_equal(t->segments[0]->key, "rack");
    assert_string_equal(t->segments[0]->value, "r1");
    assert_string_equal(t->segments[1]->key, "zone");
    assert_string_equal(t->segments[1]->value, "z1");
    prov_cap_topology_free(t);
}

/* ---- the object ------------------------------------------------------------------------ */

static void test_build_table(void **state)
{
    (void)state;
    static const int64_t gi10 = 10737418240;
    static const struct {
        const char *name, *key;
        bool owner;
        int64_t capacity;
        const int64_t *max;
        const char *want;
    } rows[] = {
        {"labels, generateName csisc-, owner, selector and BinarySI quantities", "fast/zone=z1",
         true, 7516192768, &gi10,
         "{`apiVersion`:`storage.k8s.io/v1`,`kind`:`CSIStorageCapacity`,`metadata`:{"
         "`generateName`:`csisc-`,`namespace`:`kube-system`,`labels`:{"
         "`csi.storage.k8s.io/drivername`:`" DRIVER "`,`csi.storage.k8s.io/managed-by`:"
         "`external-provisioner`},`ownerReferences`:[{`apiVersion`:`v1`,`kind`:`Pod`,`name`:"
         "`prov-0`,`uid`:`u-pod`,`controller`:true}]},`storageClassName`:`fast`,"
         "`nodeTopology`:{`matchLabels`:{`zone`:`z1`}},`capacity`:`7Gi`,"
         "`maximumVolumeSize`:`10Gi`}"},
        {"level -1: no owner; no maximum reported: no maximumVolumeSize; empty segment: {}",
         "fast/", false, 0, NULL,
         "{`apiVersion`:`storage.k8s.io/v1`,`kind`:`CSIStorageCapacity`,`metadata`:{"
         "`generateName`:`csisc-`,`namespace`:`kube-system`,`labels`:{"
         "`csi.storage.k8s.io/drivername`:`" DRIVER "`,`csi.storage.k8s.io/managed-by`:"
         "`external-provisioner`}},`storageClassName`:`fast`,`nodeTopology`:{},`capacity`:`0`}"},
    };
    json_object *owner = J(OWNER);
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        prov_cap_config cc = config(rows[i].owner ? owner : NULL, false);
        json_object *o = NULL;
        assert_int_equal(prov_cap_build(&cc, rows[i].key, rows[i].capacity, rows[i].max, &o), 0);
        expect_text(rows[i].name, "object",
                    json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN |
                                                          JSON_C_TO_STRING_NOSLASHESCAPE),
                    rows[i].want);
        json_object_put(o);
    }
    prov_cap_config cc = config(NULL, false);
    json_object *o = NULL;
    assert_int_equal(prov_cap_build(&cc, "!csisc-1", 1, NULL, &o), -EINVAL);
    assert_null(o);
    json_object_put(owner);
}

static void test_quantity_format_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        int64_t v;
        const char *want;
    } rows[] = {
        {"zero", 0, "0"},
        {"below 1024 in decimal form", 1000, "1k"},
        {"small odd number as is", 999, "999"},
        {"not a multiple of 1024", 1536, "1536"},
        {"whole Ki", 2048, "2Ki"},
        {"whole Gi", 7516192768, "7Gi"},
        {"Gi minus one byte stays bytes", 1073741823, "1073741823"},
        {"whole Ti", 1099511627776 * 3, "3Ti"},
    };
    prov_cap_config cc = config(NULL, false);
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *o = NULL;
        assert_int_equal(prov_cap_build(&cc, "c/", rows[i].v, &rows[i].v, &o), 0);
        json_object *q = NULL;
        json_object_object_get_ex(o, "capacity", &q);
        expect_str(rows[i].name, "capacity", json_object_get_string(q), rows[i].want);
        json_object_object_get_ex(o, "maximumVolumeSize", &q);
        expect_str(rows[i].name, "maximumVolumeSize", json_object_get_string(q), rows[i].want);
        json_object_put(o);
    }
}

/* ---- update decisions --------------------------------------------------------------------- */

static void test_decide_table(void **state)
{
    (void)state;
    static const int64_t gi1 = 1073741824, gi2 = 2147483648;
    static const struct {
        const char *name;
        const char *existing;
        bool owner;
        int64_t capacity;
        const int64_t *max;
        prov_cap_action want;
        const char *patch;
    } rows[] = {
        {"no object: create", NULL, true, gi1, &gi1, PROV_CAP_CREATE, NULL},
        {"same values (other spelling) and our owner: no write",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`5`,`ownerReferences`:[{`apiVersion`:`v1`,"
         "`kind`:`Pod`,`name`:`prov-0`,`uid`:`u-pod`,`controller`:true}]},"
         "`capacity`:`1073741824`,`maximumVolumeSize`:`1Gi`}",
         true, gi1, &gi1, PROV_CAP_NONE, NULL},
        {"no owner configured: the owner does not matter",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`5`},`capacity`:`1Gi`}", false, gi1, NULL,
         PROV_CAP_NONE, NULL},
        {"capacity changed: patch both sizes with the resourceVersion precondition",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`5`},`capacity`:`1Gi`,"
         "`maximumVolumeSize`:`1Gi`}",
         false, gi2, &gi2, PROV_CAP_UPDATE,
         "{`metadata`:{`resourceVersion`:`5`},`capacity`:`2Gi`,`maximumVolumeSize`:`2Gi`}"},
        {"the driver stopped reporting a maximum: remove it",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`6`},`capacity`:`1Gi`,"
         "`maximumVolumeSize`:`1Gi`}",
         false, gi1, NULL, PROV_CAP_UPDATE,
         "{`metadata`:{`resourceVersion`:`6`},`capacity`:`1Gi`,`maximumVolumeSize`:null}"},
        {"a maximum appeared: set it",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`6`},`capacity`:`1Gi`}", false, gi1, &gi1,
         PROV_CAP_UPDATE,
         "{`metadata`:{`resourceVersion`:`6`},`capacity`:`1Gi`,`maximumVolumeSize`:`1Gi`}"},
        {"our owner missing: added, other references kept",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`7`,`ownerReferences`:[{`apiVersion`:`v1`,"
         "`kind`:`ConfigMap`,`name`:`x`,`uid`:`u-x`}]},`capacity`:`1Gi`}",
         true, gi1, NULL, PROV_CAP_UPDATE,
         "{`metadata`:{`resourceVersion`:`7`,`ownerReferences`:[{`apiVersion`:`v1`,`kind`:"
         "`ConfigMap`,`name`:`x`,`uid`:`u-x`},{`apiVersion`:`v1`,`kind`:`Pod`,`name`:`prov-0`,"
         "`uid`:`u-pod`,`controller`:true}]},`capacity`:`1Gi`,`maximumVolumeSize`:null}"},
        {"a reference with our uid that is not the controller does not count",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`8`,`ownerReferences`:[{`apiVersion`:`v1`,"
         "`kind`:`Pod`,`name`:`prov-0`,`uid`:`u-pod`}]},`capacity`:`1Gi`}",
         true, gi1, NULL, PROV_CAP_UPDATE,
         "{`metadata`:{`resourceVersion`:`8`,`ownerReferences`:[{`apiVersion`:`v1`,`kind`:`Pod`,"
         "`name`:`prov-0`,`uid`:`u-pod`},{`apiVersion`:`v1`,`kind`:`Pod`,`name`:`prov-0`,"
         "`uid`:`u-pod`,`controller`:true}]},`capacity`:`1Gi`,`maximumVolumeSize`:null}"},
        {"an unparsable capacity is rewritten",
         "{`metadata`:{`name`:`a`,`resourceVersion`:`9`},`capacity`:`lots`}", false, gi1, NULL,
         PROV_CAP_UPDATE,
         "{`metadata`:{`resourceVersion`:`9`},`capacity`:`1Gi`,`maximumVolumeSize`:null}"},
    };
    json_object *owner = J(OWNER);
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        prov_cap_config cc = config(rows[i].owner ? owner : NULL, false);
        json_object *ex = J(rows[i].existing);
        prov_cap_action act = PROV_CAP_DELETE;
        char *patch = NULL;
        assert_int_equal(prov_cap_decide(&cc, ex, rows[i].capacity, rows[i].max, &act, &patch), 0);
        expect_str(rows[i].name, "action", prov_cap_action_name(act),
                   prov_cap_action_name(rows[i].want));
        expect_text(rows[i].name, "patch", patch, rows[i].patch);
        free(patch);
        json_object_put(ex);
    }
    json_object_put(owner);
}

/* ---- desired vs existing --------------------------------------------------------------------- */

#define OBJ(name, mgr, cls, zone, owner_uid)                                                       \
    "{`metadata`:{`name`:`" name "`,`labels`:{`csi.storage.k8s.io/drivername`:`" DRIVER            \
    "`,`csi.storage.k8s.io/managed-by`:`" mgr "`},`ownerReferences`:[{`uid`:`" owner_uid           \
    "`,`controller`:true}]},`storageClassName`:`" cls                                              \
    "`,`nodeTopology`:{`matchLabels`:{`zone`:`" zone "`}},`capacity`:`1Gi`}"

static char *steps_text(const prov_cap_step *s, size_t n)
{
    char *out = calloc(1, 4096);
    assert_non_null(out);
    for (size_t i = 0; i < n; i++) {
        char line[256];
        snprintf(line, sizeof(line), "%s%s %s%s%s", i ? "; " : "",
                 prov_cap_action_name(s[i].action), s[i].key, s[i].name ? " " : "",
                 s[i].name ? s[i].name : "");
        strcat(out, line);
    }
    return out;
}

static void test_diff_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *desired[3];
        size_t n_desired;
        const char *existing[4];
        size_t n_existing;
        const char *want;
    } rows[] = {
        {"nothing exists: create every item",
         {"fast/zone=z1", "fast/zone=z2"},
         2,
         {NULL},
         0,
         "create fast/zone=z1; create fast/zone=z2"},
        {"an object per item: keep them (GetCapacity decides on writes)",
         {"fast/zone=z1"},
         1,
         {OBJ("csisc-a", "external-provisioner", "fast", "z1", "u-pod")},
         1,
         "keep fast/zone=z1 csisc-a"},
        {"class gone: its objects are obsolete",
         {NULL},
         0,
         {OBJ("csisc-a", "external-provisioner", "gone", "z1", "u-pod")},
         1,
         "delete gone/zone=z1 csisc-a"},
        {"segment gone: its objects are obsolete, the rest kept or created",
         {"fast/zone=z1", "slow/zone=z1"},
         2,
         {OBJ("csisc-b", "external-provisioner", "fast", "z9", "u-pod"),
          OBJ("csisc-a", "external-provisioner", "fast", "z1", "u-pod")},
         2,
         "keep fast/zone=z1 csisc-a; create slow/zone=z1; delete fast/zone=z9 csisc-b"},
        {"duplicates: the one we own is kept, the others deleted",
         {"fast/zone=z1"},
         1,
         {OBJ("csisc-a", "external-provisioner", "fast", "z1", "u-other"),
          OBJ("csisc-c", "external-provisioner", "fast", "z1", "u-pod"),
          OBJ("csisc-b", "external-provisioner", "fast", "z1", "u-pod")},
         3,
         "keep fast/zone=z1 csisc-b; delete fast/zone=z1 csisc-a; delete fast/zone=z1 csisc-c"},
        {"objects of another manager are never touched",
         {"fast/zone=z1"},
         1,
         {OBJ("csisc-x", "external-provisioner-node-1", "fast", "z1", "u-pod")},
         1,
         "create fast/zone=z1"},
    };
    json_object *owner = J(OWNER);
    prov_cap_config cc = config(owner, false);
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *ex[4] = {NULL};
        for (size_t j = 0; j < rows[i].n_existing; j++)
            ex[j] = J(rows[i].existing[j]);
        prov_cap_step *steps = NULL;
        size_t n = 0;
        assert_int_equal(prov_cap_diff(&cc, rows[i].desired, rows[i].n_desired,
                                       (const json_object *const *)ex, rows[i].n_existing, &steps,
                                       &n),
                         0);
        char *got = steps_text(steps, n);
        expect_str(rows[i].name, "steps", got, rows[i].want);
        free(got);
        prov_cap_steps_free(steps, n);
        for (size_t j = 0; j < rows[i].n_existing; j++)
            json_object_put(ex[j]);
    }
    json_object_put(owner);
}

/* ---- node mode: managed-by and the fixed segment ------------------------------------------- */

#define A10 "aaaaaaaaaa"
#define A38 A10 A10 A10 "aaaaaaaa"
#define A39 A38 "a"
#define A48 A38 A10
#define A49 A48 "a"
#define A63 A10 A10 A10 A10 A10 A10 "aaa"

static void test_managed_by_table(void **state)
{
    (void)state;
    /* Expected values are upstream's (cmd/csi-provisioner util_test.go):
     * the labels must match so either implementation finds its objects. */
    static const struct {
        const char *name, *node, *want;
    } rows[] = {
        {"no node (central deployment): the plain value", NULL, "external-provisioner"},
        {"empty node: the plain value", "", "external-provisioner"},
        {"short node name: appended", "node01", "external-provisioner-node01"},
        {"a cloud node name fits as it is", "ip-10-0-1-23.eu-west-1.compute.internal",
         "external-provisioner-ip-10-0-1-23.eu-west-1.compute.internal"},
        {"exactly 63 characters: unchanged", "node" A38, "external-provisioner-node" A38},
        {"one over: base cut, hash of the base, whole node name", "node" A39,
         "external-p-53f40b57-node" A39},
        {"52-character node: one character of base left", "node" A48, "e-53f40b57-node" A48},
        {"53-character node: no room, base and hash of the whole name", "node" A49,
         "external-provisioner-a3607ff1"},
        {"very long node: base and hash of the whole name", "node" A63,
         "external-provisioner-df38e37f"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *got = prov_cap_managed_by(rows[i].node);
        expect_str(rows[i].name, "managed-by", got, rows[i].want);
        expect_int(rows[i].name, "length <= 63", strlen(got) <= PROV_CAP_LABEL_MAX, 1);
        expect_int(rows[i].name, "a valid label value", prov_cap_label_value_ok(got), 1);
        free(got);
    }
    /* Node names that differ only past the cut still get different values. */
    char *a = prov_cap_managed_by("node" A63 "x");
    char *b = prov_cap_managed_by("node" A63 "y");
    assert_string_not_equal(a, b);
    free(a);
    free(b);
}

static void test_label_value_ok_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *v;
        bool want;
    } rows[] = {
        {"empty is a valid value", "", true},
        {"the central value", "external-provisioner", true},
        {"dots, dashes and underscores inside", "a.b_c-d", true},
        {"63 characters", "x" A38 A10 A10 "aaaa", true},
        {"64 characters is one too many", "x" A63, false},
        {"may not start with a dash", "-node", false},
        {"may not end with a dot", "node.", false},
        {"no slash", "a/b", false},
        {"no space", "a b", false},
        {"upper case is alphanumeric too", "Node-1", true},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++)
        expect_int(rows[i].name, "valid", prov_cap_label_value_ok(rows[i].v), rows[i].want);
}

/* A NodeGetInfo accessible_topology from "k=v" pairs (NULL-terminated). */
static Csi__V1__Topology *topology_of(const char *const *pairs)
{
    size_t n = 0;
    while (pairs[n])
        n++;
    Csi__V1__Topology *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    csi__v1__topology__init(t);
    t->segments = calloc(n + 1, sizeof(void *));
    assert_non_null(t->segments);
    for (size_t i = 0; i < n; i++) {
        Csi__V1__Topology__SegmentsEntry *e = calloc(1, sizeof(*e));
        assert_non_null(e);
        csi__v1__topology__segments_entry__init(e);
        const char *eq = strrchr(pairs[i], '=');
        e->key = strndup(pairs[i], (size_t)(eq - pairs[i]));
        e->value = strdup(eq + 1);
        t->segments[t->n_segments++] = e;
    }
    return t;
}

static void test_fixed_segment_table(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *pairs[4];
        bool null_topology;
        int rc;
        const char *want;
    } rows[] = {
        {"no accessible_topology: the empty segment", {NULL}, true, 0, ""},
        {"a topology without segments: the empty segment", {NULL}, false, 0, ""},
        {"the node's one key",
         {"topology.example.com/node=node-2", NULL},
         false,
         0,
         "topology.example.com/node=node-2"},
        {"several keys: sorted by key", {"zone=z1", "rack=r7", NULL}, false, 0, "rack=r7,zone=z1"},
        {"a repeated key: the last entry wins, as in a protobuf map",
         {"zone=z1", "zone=z2", NULL},
         false,
         0,
         "zone=z2"},
        {"an empty key cannot be a segment", {"=v", NULL}, false, -EINVAL, NULL},
        {"a key with = cannot be a segment", {"a=b=c", NULL}, false, -EINVAL, NULL},
        {"a value with , cannot be a segment", {"zone=z1,z2", NULL}, false, -EINVAL, NULL},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        Csi__V1__Topology *t = rows[i].null_topology ? NULL : topology_of(rows[i].pairs);
        char *seg = NULL;
        expect_int(rows[i].name, "rc", prov_cap_fixed_segment(t, &seg), rows[i].rc);
        expect_str(rows[i].name, "segment", seg, rows[i].want);
        free(seg);
        if (t)
            protobuf_c_message_free_unpacked(&t->base, NULL);
    }
}

/* What one node's controller wants and writes: its segment x the wanted
 * classes, objects under its own managed-by; another node's objects for
 * the same items are neither kept nor deleted. */
static void test_fixed_segment_items_and_objects(void **state)
{
    (void)state;
    const char *pairs[] = {"zone=n2", NULL};
    Csi__V1__Topology *t = topology_of(pairs);
    char *seg = NULL;
    assert_int_equal(prov_cap_fixed_segment(t, &seg), 0);
    protobuf_c_message_free_unpacked(&t->base, NULL);
    char *mb = prov_cap_managed_by("node-2");
    json_object *owner = J(OWNER);
    prov_cap_config cc = config(owner, false);
    cc.managed_by = mb;

    json_object *classes[] = {
        J("{`metadata`:{`name`:`fast`},`provisioner`:`" DRIVER
          "`,`volumeBindingMode`:`WaitForFirstConsumer`}"),
        J("{`metadata`:{`name`:`imm`},`provisioner`:`" DRIVER "`}"),
        J("{`metadata`:{`name`:`slow`},`provisioner`:`" DRIVER
          "`,`volumeBindingMode`:`WaitForFirstConsumer`}"),
    };
    const char *const segs[] = {seg};
    char **keys = NULL;
    size_t n = 0;
    assert_int_equal(
        prov_cap_items(&cc, segs, 1, (const json_object *const *)classes, 3, &keys, &n), 0);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0], "fast/zone=n2");
    assert_string_equal(keys[1], "slow/zone=n2");

    json_object *ex[] = {
        J(OBJ("csisc-mine", "external-provisioner-node-2", "fast", "n2", "u-pod")),
        J(OBJ("csisc-n1", "external-provisioner-node-1", "fast", "n1", "u-pod")),
        J(OBJ("csisc-n1dup", "external-provisioner-node-1", "slow", "n2", "u-pod")),
        J(OBJ("csisc-old", "external-provisioner-node-2", "fast", "n9", "u-pod")),
    };
    prov_cap_step *steps = NULL;
    size_t ns = 0;
    assert_int_equal(prov_cap_diff(&cc, (const char *const *)keys, n,
                                   (const json_object *const *)ex, 4, &steps, &ns),
                     0);
    char *got = steps_text(steps, ns);
    expect_str(
        "node-2 keeps its object, creates the missing one, deletes only its own obsolete one",
        "steps", got,
        "keep fast/zone=n2 csisc-mine; create slow/zone=n2; delete fast/zone=n9 csisc-old");
    free(got);
    prov_cap_steps_free(steps, ns);

    json_object *obj = NULL;
    assert_int_equal(prov_cap_build(&cc, keys[1], 5, NULL, &obj), 0);
    char *want = Q("{`managed-by`:`external-provisioner-node-2`,`nodeTopology`:{`matchLabels`:{"
                   "`zone`:`n2`}}}");
    json_object *summary = json_object_new_object();
    json_object *labels = NULL, *meta = NULL, *topo = NULL;
    assert_true(json_object_object_get_ex(obj, "metadata", &meta));
    assert_true(json_object_object_get_ex(meta, "labels", &labels));
    json_object *mbv = NULL;
    assert_true(json_object_object_get_ex(labels, PROV_CAP_LABEL_MANAGED_BY, &mbv));
    assert_true(json_object_object_get_ex(obj, "nodeTopology", &topo));
    json_object_object_add(summary, "managed-by", json_object_get(mbv));
    json_object_object_add(summary, "nodeTopology", json_object_get(topo));
    expect_str("the object carries node-2's label and segment", "object",
               json_object_to_json_string_ext(summary, JSON_C_TO_STRING_PLAIN), want);
    free(want);
    json_object_put(summary);
    json_object_put(obj);

    for (size_t i = 0; i < 4; i++)
        json_object_put(ex[i]);
    for (size_t i = 0; i < 3; i++)
        json_object_put(classes[i]);
    prov_cap_keys_free(keys, n);
    json_object_put(owner);
    free(mb);
    free(seg);
}

/* ---- owner walk ------------------------------------------------------------------------------ */

static const char *POD = "{`metadata`:{`name`:`prov-0`,`namespace`:`kube-system`,`uid`:`u-pod`,"
                         "`ownerReferences`:[{`apiVersion`:`v1`,`kind`:`ConfigMap`,`name`:`c`,"
                         "`uid`:`u-c`},{`apiVersion`:`apps/v1`,`kind`:`ReplicaSet`,`name`:`prov-"
                         "7d9`,`uid`:`u-rs`,`controller`:true}]}}";

static void test_owner_step_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *obj, *api_version, *kind;
        int levels, rc;
        const char *ref, *next_path, *next_av, *next_kind, *err;
    } rows[] = {
        {"level 0: the pod itself", NULL, "v1", "Pod", 0, 0,
         "{`apiVersion`:`v1`,`kind`:`Pod`,`name`:`prov-0`,`uid`:`u-pod`,`controller`:true}", NULL,
         NULL, NULL, NULL},
        {"level 1: the pod's controller, without reading it", NULL, "v1", "Pod", 1, 0,
         "{`apiVersion`:`apps/v1`,`kind`:`ReplicaSet`,`name`:`prov-7d9`,`uid`:`u-rs`,"
         "`controller`:true}",
         NULL, NULL, NULL, NULL},
        {"level 2: read the ReplicaSet next", NULL, "v1", "Pod", 2, 0, NULL,
         "/apis/apps/v1/namespaces/kube-system/replicasets/prov-7d9", "apps/v1", "ReplicaSet",
         NULL},
        {"no controlling owner: upstream's error",
         "{`metadata`:{`name`:`lonely`,`namespace`:`ns`,`uid`:`u`}}", "v1", "Pod", 1, -ENOENT, NULL,
         NULL, NULL, NULL,
         "v1/Pod \"lonely\" in namespace \"ns\" has no controlling owner, cannot unwind the "
         "ownership further"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *obj = J(rows[i].obj ? rows[i].obj : POD);
        json_object *ref = NULL;
        char *path = NULL, *av = NULL, *kind = NULL;
        int rc = prov_cap_owner_step(obj, rows[i].api_version, rows[i].kind, rows[i].levels, &ref,
                                     &path, &av, &kind);
        expect_int(rows[i].name, "rc", rc, rows[i].rc);
        expect_text(rows[i].name, "ref",
                    ref ? json_object_to_json_string_ext(ref, JSON_C_TO_STRING_PLAIN |
                                                                  JSON_C_TO_STRING_NOSLASHESCAPE)
                        : NULL,
                    rows[i].ref);
        expect_str(rows[i].name, "next path", path, rows[i].next_path);
        expect_str(rows[i].name, "next apiVersion", av, rows[i].next_av);
        expect_str(rows[i].name, "next kind", kind, rows[i].next_kind);
        if (rows[i].err)
            expect_str(rows[i].name, "error", util_err_last(), rows[i].err);
        json_object_put(ref);
        free(path);
        free(av);
        free(kind);
        json_object_put(obj);
    }
}

static void test_owner_path_table(void **state)
{
    (void)state;
    static const struct {
        const char *name, *av, *kind, *want;
    } rows[] = {
        {"core group under /api", "v1", "Pod", "/api/v1/namespaces/ns/pods/o"},
        {"ReplicaSet", "apps/v1", "ReplicaSet", "/apis/apps/v1/namespaces/ns/replicasets/o"},
        {"Deployment", "apps/v1", "Deployment", "/apis/apps/v1/namespaces/ns/deployments/o"},
        {"StatefulSet", "apps/v1", "StatefulSet", "/apis/apps/v1/namespaces/ns/statefulsets/o"},
        {"DaemonSet", "apps/v1", "DaemonSet", "/apis/apps/v1/namespaces/ns/daemonsets/o"},
        {"-s gets -es", "example.com/v1", "Ingress",
         "/apis/example.com/v1/namespaces/ns/ingresses/o"},
        {"consonant + y gets -ies", "example.com/v1", "Policy",
         "/apis/example.com/v1/namespaces/ns/policies/o"},
        {"vowel + y gets -s", "example.com/v1", "Gateway",
         "/apis/example.com/v1/namespaces/ns/gateways/o"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *p = prov_cap_owner_path(rows[i].av, rows[i].kind, "ns", "o");
        expect_str(rows[i].name, "path", p, rows[i].want);
        free(p);
    }
}

/* --enable-capacity's start-up check reads the discovery of storage.k8s.io/v1:
 * Kubernetes 1.24 lists csistoragecapacities there, 1.20 does not (its alpha type
 * lives in v1alpha1 behind a gate). */
static void test_api_served_table(void **state)
{
    (void)state;
#define RL(gv, res) "{`kind`:`APIResourceList`,`groupVersion`:`" gv "`,`resources`:[" res "]}"
#define RES(n, k)   "{`name`:`" n "`,`namespaced`:true,`kind`:`" k "`,`verbs`:[`get`]}"
    static const struct {
        const char *name, *list;
        bool served;
    } rows[] = {
        {"1.24 and newer list it",
         RL("storage.k8s.io/v1",
            RES("csidrivers", "CSIDriver") "," RES("csistoragecapacities", "CSIStorageCapacity")),
         true},
        {"1.20 does not",
         RL("storage.k8s.io/v1",
            RES("csidrivers", "CSIDriver") "," RES("csinodes", "CSINode") "," RES(
                "storageclasses",
                "StorageClass") "," RES("volumeattachments",
                                        "VolumeAttachment") "," RES("volumeattachments/status",
                                                                    "VolumeAttachment")),
         false},
        {"only a status subresource is not the type",
         RL("storage.k8s.io/v1", RES("csistoragecapacities/status", "CSIStorageCapacity")), false},
        {"another kind under the name is not the type",
         RL("storage.k8s.io/v1", RES("csistoragecapacities", "Other")), false},
        {"the beta version is not v1",
         RL("storage.k8s.io/v1beta1", RES("csistoragecapacities", "CSIStorageCapacity")), false},
        {"no resources", RL("storage.k8s.io/v1", ""), false},
        {"resources of the wrong type", "{`groupVersion`:`storage.k8s.io/v1`,`resources`:{}}",
         false},
        {"not a resource list", "{`kind`:`Status`,`code`:404}", false},
    };
#undef RL
#undef RES
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *o = J(rows[i].list);
        if (prov_cap_api_served(o) != rows[i].served)
            fail_msg("[%s] want served=%d", rows[i].name, rows[i].served);
        json_object_put(o);
    }
    assert_false(prov_cap_api_served(NULL));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_served_table),
        cmocka_unit_test(test_class_wanted_table),
        cmocka_unit_test(test_node_segment_table),
        cmocka_unit_test(test_items_segments_times_classes_table),
        cmocka_unit_test(test_object_key_table),
        cmocka_unit_test(test_affinity_segments_table),
        cmocka_unit_test(test_segment_topology_for_get_capacity),
        cmocka_unit_test(test_build_table),
        cmocka_unit_test(test_quantity_format_table),
        cmocka_unit_test(test_decide_table),
        cmocka_unit_test(test_diff_table),
        cmocka_unit_test(test_managed_by_table),
        cmocka_unit_test(test_label_value_ok_table),
        cmocka_unit_test(test_fixed_segment_table),
        cmocka_unit_test(test_fixed_segment_items_and_objects),
        cmocka_unit_test(test_owner_step_table),
        cmocka_unit_test(test_owner_path_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
