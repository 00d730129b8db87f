/*
 * Unit tests for --node-deployment's decisions (provisioner/nodedeploy.c),
 * checked against upstream external-provisioner's checkNode, becomeOwner's
 * rate limiter with jitter, VolumeIsAccessible and checkCapacity
 * (docs: upstream-behaviour.md A1.1, A1.5 step 2, A1.6, A1.8). Every table
 * row is one rule and names it; a failing row prints its name.
 *
 * JSON fixtures are written with ` for " so they stay readable.
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

/* ---- helpers ------------------------------------------------------------- */

/* A topology from "k=v,k2=v2" ("" gives no segments); free with topo_free. */
static Csi__V1__Topology *topo(const char *spec)
{
    Csi__V1__Topology *t = calloc(1, sizeof(*t));
    assert_non_null(t);
    csi__v1__topology__init(t);
    char *copy = strdup(spec), *save = NULL;
    for (char *kv = strtok_r(copy, ",", &save); kv; kv = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(kv, '=');
        assert_non_null(eq);
        *eq = '\0';
        Csi__V1__Topology__SegmentsEntry *e = calloc(1, sizeof(*e));
        csi__v1__topology__segments_entry__init(e);
        e->key = strdup(kv);
        e->value = strdup(eq + 1);
        t->segments =
            realloc(t->segments, (t->n_segments + 1) * sizeof(Csi__V1__Topology__SegmentsEntry *));
        t->segments[t->n_segments++] = e;
    }
    free(copy);
    return t;
}

static void topo_free(Csi__V1__Topology *t)
{
    if (t != NULL)
        csi__v1__topology__free_unpacked(t, NULL);
}

/* ---- eligibility ------------------------------------------------------------ */

static void test_claim_eligibility_follows_selected_node_and_binding_mode(void **state)
{
    (void)state;
    static const char *const imm = "{`volumeBindingMode`:`Immediate`}";
    static const char *const wffc = "{`volumeBindingMode`:`WaitForFirstConsumer`}";
    static const struct {
        const char *name;
        const char *pvc;
        const char *sc; /* NULL: the class does not exist */
        bool immediate_binding;
        prov_node_claim want;
    } rows[] = {
        {"selected node is this node: ours",
         "{`metadata`:{`annotations`:{`volume.kubernetes.io/selected-node`:`node-1`}}}", imm, true,
         PROV_NODE_OURS},
        {"this node selected on a WaitForFirstConsumer class: ours",
         "{`metadata`:{`annotations`:{`volume.kubernetes.io/selected-node`:`node-1`}}}", wffc,
         false, PROV_NODE_OURS},
        {"this node selected and the class is gone: still ours",
         "{`metadata`:{`annotations`:{`volume.kubernetes.io/selected-node`:`node-1`}}}", NULL, true,
         PROV_NODE_OURS},
        {"another node selected: not ours",
         "{`metadata`:{`annotations`:{`volume.kubernetes.io/selected-node`:`node-2`}}}", imm, true,
         PROV_NODE_OTHER},
        {"node names compare exactly (prefix is another node)",
         "{`metadata`:{`annotations`:{`volume.kubernetes.io/selected-node`:`node-10`}}}", imm, true,
         PROV_NODE_OTHER},
        {"Immediate, no node, immediate binding on: candidate", "{`metadata`:{}}", imm, true,
         PROV_NODE_CANDIDATE},
        {"an empty selected-node counts as none",
         "{`metadata`:{`annotations`:{`volume.kubernetes.io/selected-node`:``}}}", imm, true,
         PROV_NODE_CANDIDATE},
        {"only the alpha key is not read (upstream reads the GA key only)",
         "{`metadata`:{`annotations`:{`volume.alpha.kubernetes.io/selected-node`:`node-2`}}}", imm,
         true, PROV_NODE_CANDIDATE},
        {"Immediate, no node, immediate binding off: wait", "{`metadata`:{}}", imm, false,
         PROV_NODE_WAIT},
        {"WaitForFirstConsumer without a node: wait for the scheduler", "{`metadata`:{}}", wffc,
         true, PROV_NODE_WAIT},
        {"a class without volumeBindingMode is not taken (upstream: nil mode)", "{`metadata`:{}}",
         "{`provisioner`:`x`}", true, PROV_NODE_WAIT},
        {"no node and the class does not exist: wait", "{`metadata`:{}}", NULL, true,
         PROV_NODE_WAIT},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pvc = J(rows[i].pvc), *sc = J(rows[i].sc);
        prov_node_claim got = prov_node_eligibility(pvc, sc, "node-1", rows[i].immediate_binding);
        if (got != rows[i].want)
            fail_msg("[%s] got %s, want %s", rows[i].name, prov_node_claim_name(got),
                     prov_node_claim_name(rows[i].want));
        json_object_put(pvc);
        json_object_put(sc);
    }
}

/* ---- delay ------------------------------------------------------------------ */

static void test_owner_delay_is_exponential_minus_base_jitter(void **state)
{
    (void)state;
    const util_duration S = UTIL_SECOND, MS = UTIL_MS;
    static const struct {
        const char *name;
        util_duration base, max;
        int requeues;
        double rnd;
        util_duration want;
    } rows[] = {
        {"first attempt without jitter waits the base delay", 20 * S, 60 * S, 0, 0.0, 20 * S},
        {"first attempt: base minus base*rnd", 20 * S, 60 * S, 0, 0.25, 15 * S},
        {"first attempt with rnd near 1 waits almost nothing", 20 * S, 60 * S, 0, 0.999, 20 * MS},
        {"second attempt doubles before the jitter", 20 * S, 60 * S, 1, 0.5, 30 * S},
        {"third attempt: 80 s capped at max, then jitter", 20 * S, 60 * S, 2, 0.5, 50 * S},
        {"many attempts stay at max minus jitter", 20 * S, 60 * S, 40, 0.0, 60 * S},
        {"a count past int64 nanoseconds is the cap", 1 * S, 60 * S, 200, 0.0, 60 * S},
        {"jitter larger than a capped delay gives 0", 10 * S, 5 * S, 0, 0.75, 0},
        {"a zero base never waits", 0, 60 * S, 3, 0.5, 0},
        {"small delays (tests): 200 ms base, attempt 2", 200 * MS, S, 2, 0.5, 700 * MS},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        util_duration got =
            prov_node_delay(rows[i].base, rows[i].max, rows[i].requeues, rows[i].rnd);
        if (got != rows[i].want)
            fail_msg("[%s] got %lld ns, want %lld ns", rows[i].name, (long long)got,
                     (long long)rows[i].want);
    }
    /* Over the whole draw range the first wait stays within (0, base]. */
    for (int k = 0; k < 1000; k++) {
        util_duration d = prov_node_delay(20 * S, 60 * S, 0, k / 1000.0);
        if (d <= 0 || d > 20 * S)
            fail_msg("[first wait in (0, base]] rnd %.3f gave %lld ns", k / 1000.0, (long long)d);
    }
}

/* ---- PV ownership ----------------------------------------------------------- */

static void test_pv_is_deleted_only_by_the_node_its_affinity_selects(void **state)
{
    (void)state;
#define PV(terms)                                                                                  \
    "{`metadata`:{`name`:`pv-1`},`spec`:{`nodeAffinity`:{`required`:{`nodeSelectorTerms`:" terms   \
    "}}}}"
#define EXPR(k, op, vals) "{`key`:`" k "`,`operator`:`" op "`,`values`:" vals "}"
#define EXISTS(k, op)     "{`key`:`" k "`,`operator`:`" op "`}"
    static const char *const node1 = "{`topology.example.com/node`:`node-1`,`rack`:`7`}";
    static const struct {
        const char *name;
        const char *pv;
        const char *labels; /* NULL: the driver reports no topology */
        bool want;
        int want_rc;
    } rows[] = {
        {"driver without topology: every PV is ours (upstream)",
         PV("[{`matchExpressions`:[" EXPR("topology.example.com/node", "In", "[`node-2`]") "]}]"),
         NULL, true, 0},
        {"PV without nodeAffinity: ours", "{`metadata`:{`name`:`pv-1`},`spec`:{}}", node1, true, 0},
        {"nodeAffinity without required: ours",
         "{`metadata`:{`name`:`pv-1`},`spec`:{`nodeAffinity`:{}}}", node1, true, 0},
        {"In with this node's value: ours",
         PV("[{`matchExpressions`:[" EXPR("topology.example.com/node", "In", "[`node-1`]") "]}]"),
         node1, true, 0},
        {"In with another node's value: not ours",
         PV("[{`matchExpressions`:[" EXPR("topology.example.com/node", "In", "[`node-2`]") "]}]"),
         node1, false, 0},
        {"In over a key the node lacks: not ours",
         PV("[{`matchExpressions`:[" EXPR("zone", "In", "[`z1`]") "]}]"), node1, false, 0},
        {"terms are ORed: the second term matches",
         PV("[{`matchExpressions`:[" EXPR("topology.example.com/node", "In",
                                          "[`node-2`]") "]},"
                                                        "{`matchExpressions`:[" EXPR(
                                                            "topology.example.com/node", "In",
                                                            "[`node-1`]") "]}]"),
         node1, true, 0},
        {"expressions are ANDed: one fails, the term fails",
         PV("[{`matchExpressions`:[" EXPR("topology.example.com/node", "In",
                                          "[`node-1`]") "," EXPR("rack", "In", "[`8`]") "]}]"),
         node1, false, 0},
        {"NotIn over an absent key matches",
         PV("[{`matchExpressions`:[" EXPR("zone", "NotIn", "[`z1`]") "]}]"), node1, true, 0},
        {"NotIn over our value does not",
         PV("[{`matchExpressions`:[" EXPR("rack", "NotIn", "[`6`,`7`]") "]}]"), node1, false, 0},
        {"Exists", PV("[{`matchExpressions`:[" EXISTS("rack", "Exists") "]}]"), node1, true, 0},
        {"DoesNotExist over a present key",
         PV("[{`matchExpressions`:[" EXISTS("rack", "DoesNotExist") "]}]"), node1, false, 0},
        {"Gt compares integers", PV("[{`matchExpressions`:[" EXPR("rack", "Gt", "[`6`]") "]}]"),
         node1, true, 0},
        {"Lt compares integers", PV("[{`matchExpressions`:[" EXPR("rack", "Lt", "[`7`]") "]}]"),
         node1, false, 0},
        {"Gt over a non-integer label does not match",
         PV("[{`matchExpressions`:[" EXPR("topology.example.com/node", "Gt", "[`1`]") "]}]"), node1,
         false, 0},
        {"an empty term matches nothing", PV("[{}]"), node1, false, 0},
        {"no terms at all match nothing", PV("[]"), node1, false, 0},
        {"matchFields on metadata.name: upstream's node has no name",
         PV("[{`matchFields`:[" EXPR("metadata.name", "In", "[`node-1`]") "]}]"), node1, false, 0},
        {"matchFields NotIn matches the nameless node",
         PV("[{`matchFields`:[" EXPR("metadata.name", "NotIn", "[`node-2`]") "]}]"), node1, true,
         0},
        {"an unknown operator alone is an error",
         PV("[{`matchExpressions`:[" EXPR("rack", "Near", "[`7`]") "]}]"), node1, false, -EINVAL},
        {"In without values is an error",
         PV("[{`matchExpressions`:[" EXPR("rack", "In", "[]") "]}]"), node1, false, -EINVAL},
        {"a bad term does not hide a matching one",
         PV("[{`matchExpressions`:[" EXPR("rack", "Near", "[`7`]") "]},{`matchExpressions`:[" EXPR(
             "rack", "In", "[`7`]") "]}]"),
         node1, true, 0},
    };
#undef PV
#undef EXPR
#undef EXISTS
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        json_object *pv = J(rows[i].pv), *labels = J(rows[i].labels);
        bool got = !rows[i].want;
        int rc = prov_node_pv_accessible(pv, labels, &got);
        if (rc != rows[i].want_rc)
            fail_msg("[%s] rc %d, want %d (%s)", rows[i].name, rc, rows[i].want_rc,
                     util_err_last());
        if (got != rows[i].want)
            fail_msg("[%s] got %s, want %s", rows[i].name, got ? "ours" : "not ours",
                     rows[i].want ? "ours" : "not ours");
        json_object_put(pv);
        json_object_put(labels);
    }
}

/* A PV built by the planning core for this node's volume is this node's,
 * and not another node's: the round trip the deletion relies on. */
static void test_pv_affinity_built_for_a_node_round_trips(void **state)
{
    (void)state;
    Csi__V1__Topology *mine = topo("topology.example.com/node=node-1,zone=z1");
    Csi__V1__Topology *other = topo("topology.example.com/node=node-2,zone=z1");
    json_object *aff = prov_node_affinity(&mine, 1);
    assert_non_null(aff);
    json_object *pv = json_object_new_object(), *spec = json_object_new_object();
    json_object_object_add(spec, "nodeAffinity", aff);
    json_object_object_add(pv, "spec", spec);
    json_object *l1 = prov_node_labels(mine), *l2 = prov_node_labels(other);
    bool ours = false;
    assert_int_equal(prov_node_pv_accessible(pv, l1, &ours), 0);
    assert_true(ours);
    assert_int_equal(prov_node_pv_accessible(pv, l2, &ours), 0);
    assert_false(ours);
    json_object_put(l1);
    json_object_put(l2);
    json_object_put(pv);
    topo_free(mine);
    topo_free(other);
}

/* ---- local Node / CSINode and the topology they give CreateVolume ----------------- */

static void test_local_objects_come_from_node_get_info(void **state)
{
    (void)state;
    Csi__V1__Topology *t = topo("zone=z1,topology.example.com/node=node-1");
    json_object *node = NULL, *csinode = NULL;
    prov_node_local_objects("node-1", "hostpath.csi.example.com", "id-1", t, &node, &csinode);
    expect_json("Node carries the segments as labels", node,
                "{`metadata`:{`name`:`node-1`,`labels`:{`zone`:`z1`,"
                "`topology.example.com/node`:`node-1`}}}");
    expect_json("CSINode lists the driver with sorted keys", csinode,
                "{`metadata`:{`name`:`node-1`},`spec`:{`drivers`:[{`name`:"
                "`hostpath.csi.example.com`,`nodeID`:`id-1`,`topologyKeys`:["
                "`topology.example.com/node`,`zone`]}]}}");
    json_object *labels = prov_node_labels(t);
    expect_json("labels", labels, "{`zone`:`z1`,`topology.example.com/node`:`node-1`}");
    json_object_put(labels);
    json_object_put(node);
    json_object_put(csinode);
    topo_free(t);

    prov_node_local_objects("node-2", "d", "id-2", NULL, &node, &csinode);
    expect_json("no topology: a Node without labels", node, "{`metadata`:{`name`:`node-2`}}");
    expect_json("no topology: a CSINode without keys", csinode,
                "{`metadata`:{`name`:`node-2`},`spec`:{`drivers`:[{`name`:`d`,`nodeID`:`id-2`}]}}");
    assert_null(prov_node_labels(NULL));
    json_object_put(node);
    json_object_put(csinode);
}

/* Requisite/preferred the first segment of each term as "k=v,k=v". */
static void terms_text(Csi__V1__Topology **ts, size_t n, char *buf, size_t len)
{
    buf[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        if (i > 0)
            strncat(buf, "|", len - strlen(buf) - 1);
        for (size_t j = 0; j < ts[i]->n_segments; j++) {
            char seg[256];
            snprintf(seg, sizeof(seg), "%s%s=%s", j > 0 ? "," : "", ts[i]->segments[j]->key,
                     ts[i]->segments[j]->value);
            strncat(buf, seg, len - strlen(buf) - 1);
        }
    }
}

static void test_create_volume_topology_is_this_nodes_segment(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *segments;
        bool strict;
        const char *allowed; /* StorageClass allowedTopologies */
        const char *want_requisite, *want_preferred, *want_err;
    } rows[] = {
        {"selected node: requisite and preferred are the node's segment",
         "topology.example.com/node=node-1", false, NULL, "topology.example.com/node=node-1",
         "topology.example.com/node=node-1", NULL},
        {"strict topology: the same single term", "topology.example.com/node=node-1", true, NULL,
         "topology.example.com/node=node-1", "topology.example.com/node=node-1", NULL},
        {"several keys stay one term", "zone=z1,topology.example.com/node=node-1", false, NULL,
         "topology.example.com/node=node-1,zone=z1", "topology.example.com/node=node-1,zone=z1",
         NULL},
        {"allowedTopologies that include the node keep it preferred",
         "topology.example.com/node=node-1", false,
         "[{`matchLabelExpressions`:[{`key`:`topology.example.com/node`,`values`:[`node-1`,"
         "`node-2`]}]}]",
         "topology.example.com/node=node-1|topology.example.com/node=node-2",
         "topology.example.com/node=node-1|topology.example.com/node=node-2", NULL},
        {"allowedTopologies without this node: not for this node",
         "topology.example.com/node=node-1", false,
         "[{`matchLabelExpressions`:[{`key`:`topology.example.com/node`,`values`:[`node-2`]}]}]",
         NULL, NULL,
         "topology [{topology.example.com/node node-1}] from selected node \"node-1\" is not in "
         "requisite: [[{topology.example.com/node node-2}]]"},
        {"a driver that reports no topology has no keys", "", false, NULL, NULL, NULL,
         "no topology key found for node node-1"},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        prov_config cfg = {.driver_name = "d",
                           .topology = true,
                           .immediate_topology = true,
                           .strict_topology = rows[i].strict};
        Csi__V1__Topology *t = *rows[i].segments ? topo(rows[i].segments) : NULL;
        json_object *node = NULL, *csinode = NULL;
        prov_node_local_objects("node-1", "d", "id-1", t, &node, &csinode);
        json_object *nodes = json_object_new_array(), *allowed = J(rows[i].allowed);
        json_object_array_add(nodes, json_object_get(node));
        prov_topology_in in = {.selected_node = "node-1",
                               .node = node,
                               .csinode = csinode,
                               .nodes = nodes,
                               .allowed_topologies = allowed,
                               .pvc_name = "claim"};
        Csi__V1__TopologyRequirement *req = NULL;
        int rc = prov_topology(&cfg, &in, &req);
        if (rows[i].want_err) {
            if (rc == 0)
                fail_msg("[%s] succeeded, want \"%s\"", rows[i].name, rows[i].want_err);
            if (strcmp(util_err_last(), rows[i].want_err) != 0)
                fail_msg("[%s] error\n  got  %s\n  want %s", rows[i].name, util_err_last(),
                         rows[i].want_err);
        } else if (rc != 0 || req == NULL) {
            fail_msg("[%s] rc %d: %s", rows[i].name, rc, util_err_last());
        } else {
            char got[512];
            terms_text(req->requisite, req->n_requisite, got, sizeof(got));
            if (strcmp(got, rows[i].want_requisite) != 0)
                fail_msg("[%s] requisite %s, want %s", rows[i].name, got, rows[i].want_requisite);
            terms_text(req->preferred, req->n_preferred, got, sizeof(got));
            if (strcmp(got, rows[i].want_preferred) != 0)
                fail_msg("[%s] preferred %s, want %s", rows[i].name, got, rows[i].want_preferred);
        }
        prov_topology_free(req);
        json_object_put(allowed);
        json_object_put(nodes);
        json_object_put(node);
        json_object_put(csinode);
        topo_free(t);
    }
}

/* ---- capacity check requests --------------------------------------------------- */

static void test_capacity_check_asks_per_requisite_topology(void **state)
{
    (void)state;
    Csi__V1__CreateVolumeRequest req = CSI__V1__CREATE_VOLUME_REQUEST__INIT;
    Csi__V1__CreateVolumeRequest__ParametersEntry p =
        CSI__V1__CREATE_VOLUME_REQUEST__PARAMETERS_ENTRY__INIT;
    Csi__V1__CreateVolumeRequest__ParametersEntry *pp = &p;
    p.key = "color";
    p.value = "blue";
    req.parameters = &pp;
    req.n_parameters = 1;
    Csi__V1__VolumeCapability cap = CSI__V1__VOLUME_CAPABILITY__INIT;
    Csi__V1__VolumeCapability *capp = &cap;
    req.volume_capabilities = &capp;
    req.n_volume_capabilities = 1;

    /* No topology: one call without it. */
    assert_int_equal(prov_node_capacity_count(&req), 1);
    Csi__V1__GetCapacityRequest gc;
    prov_node_capacity_request(&req, 0, &gc);
    assert_null(gc.accessible_topology);
    assert_int_equal(gc.n_parameters, 1);
    assert_string_equal(gc.parameters[0]->key, "color");
    assert_string_equal(gc.parameters[0]->value, "blue");
    assert_int_equal(gc.n_volume_capabilities, 1);
    assert_ptr_equal(gc.volume_capabilities[0], &cap);

    /* The parameters pack as GetCapacityRequest.parameters would. */
    size_t len = csi__v1__get_capacity_request__get_packed_size(&gc);
    uint8_t *buf = malloc(len);
    csi__v1__get_capacity_request__pack(&gc, buf);
    Csi__V1__GetCapacityRequest *back = csi__v1__get_capacity_request__unpack(NULL, len, buf);
    assert_non_null(back);
    assert_int_equal(back->n_parameters, 1);
    assert_string_equal(back->parameters[0]->key, "color");
    assert_string_equal(back->parameters[0]->value, "blue");
    csi__v1__get_capacity_request__free_unpacked(back, NULL);
    free(buf);

    /* Requisite topologies: one call each, in order. */
    Csi__V1__Topology *a = topo("n=node-1"), *b = topo("n=node-2");
    Csi__V1__Topology *reqs[] = {a, b};
    Csi__V1__TopologyRequirement tr = CSI__V1__TOPOLOGY_REQUIREMENT__INIT;
    tr.requisite = reqs;
    tr.n_requisite = 2;
    req.accessibility_requirements = &tr;
    assert_int_equal(prov_node_capacity_count(&req), 2);
    prov_node_capacity_request(&req, 0, &gc);
    assert_ptr_equal(gc.accessible_topology, a);
    prov_node_capacity_request(&req, 1, &gc);
    assert_ptr_equal(gc.accessible_topology, b);

    /* Requirements with preferred only: one call without topology. */
    tr.n_requisite = 0;
    tr.requisite = NULL;
    tr.preferred = reqs;
    tr.n_preferred = 2;
    assert_int_equal(prov_node_capacity_count(&req), 1);
    prov_node_capacity_request(&req, 0, &gc);
    assert_null(gc.accessible_topology);
    topo_free(a);
    topo_free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_claim_eligibility_follows_selected_node_and_binding_mode),
        cmocka_unit_test(test_owner_delay_is_exponential_minus_base_jitter),
        cmocka_unit_test(test_pv_is_deleted_only_by_the_node_its_affinity_selects),
        cmocka_unit_test(test_pv_affinity_built_for_a_node_round_trips),
        cmocka_unit_test(test_local_objects_come_from_node_get_info),
        cmocka_unit_test(test_create_volume_topology_is_this_nodes_segment),
        cmocka_unit_test(test_capacity_check_asks_per_requisite_topology),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
