/*
 * Validation of the kinds the sidecars write besides the storage objects:
 * Leases (leader election), core/v1 Events (event recorders) and Secrets,
 * with kube-apiserver's field paths and messages (pkg/apis/coordination,
 * pkg/apis/core validation). validate.c calls in here for these kinds.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

static bool is(const kl_type *t, const char *group, const char *resource)
{
    return strcmp(t->group, group) == 0 && strcmp(t->resource, resource) == 0;
}

static void lease_rules(const json_object *obj, kl_errs *e)
{
    int64_t v = 0;
    json_object *spec = kobj_obj(obj, "spec");
    if (kobj_get(spec, "leaseDurationSeconds") &&
        kobj_int64(spec, "leaseDurationSeconds", &v) == 0 && v <= 0)
        kl_errs_add(e, KL_INVALID, "spec.leaseDurationSeconds",
                    "Invalid value: %" PRId64 ": must be greater than 0", v);
    if (kobj_get(spec, "leaseTransitions") && kobj_int64(spec, "leaseTransitions", &v) == 0 &&
        v < 0)
        kl_errs_add(e, KL_INVALID, "spec.leaseTransitions",
                    "Invalid value: %" PRId64 ": must be greater than or equal to 0", v);
}

/* The core/v1 rules for an Event without eventTime (legacyValidateEvent):
 * an involved object named in another namespace is refused, and so is one
 * named in none unless the Event is in "default" (where client-go records
 * the events of cluster-scoped objects). */
static void event_rules(const json_object *obj, kl_errs *e)
{
    if (kobj_str(obj, "eventTime"))
        return;
    const char *ns = kobj_path_str(obj, "metadata.namespace");
    const char *ins = kobj_path_str(obj, "involvedObject.namespace");
    ns = ns ? ns : "";
    ins = ins ? ins : "";
    bool bad = *ins ? strcmp(ns, ins) != 0 : *ns && strcmp(ns, "default") != 0;
    if (bad) {
        char *q = kl_quote(ins);
        kl_errs_add(e, KL_INVALID, "involvedObject.namespace",
                    "Invalid value: %s: does not match event.namespace", q);
        free(q);
    }
}

static bool config_key_ok(const char *k)
{
    if (!*k || strlen(k) > 253 || strcmp(k, ".") == 0 || strcmp(k, "..") == 0 ||
        strncmp(k, "..", 2) == 0)
        return false;
    for (const char *p = k; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
              *p == '-' || *p == '_' || *p == '.'))
            return false;
    return true;
}

static void secret_rules(const json_object *obj, kl_errs *e)
{
    json_object *data = kobj_obj(obj, "data");
    if (data) {
        json_object_object_foreach(data, k, v)
        {
            (void)v;
            if (config_key_ok(k))
                continue;
            char *f = util_asprintf("data[%s]", k);
            char *q = kl_quote(k);
            kl_errs_add(e, KL_INVALID, f,
                        "Invalid value: %s: a valid config key must consist of alphanumeric "
                        "characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or "
                        "'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                        q);
            free(q);
            free(f);
        }
    }
    const char *type = kobj_str(obj, "type");
    if (type && strcmp(type, "kubernetes.io/tls") == 0) {
        static const char *const keys[] = {"tls.crt", "tls.key"};
        for (size_t i = 0; i < 2; i++) {
            if (json_object_object_get_ex(data, keys[i], NULL))
                continue;
            char *f = util_asprintf("data[%s]", keys[i]);
            kl_errs_add(e, KL_REQUIRED, f, "Required value");
            free(f);
        }
    }
}

void kl_validate_core(const kl_type *t, const json_object *old, const json_object *obj, kl_errs *e)
{
    if (is(t, "coordination.k8s.io", "leases")) {
        lease_rules(obj, e);
    } else if (is(t, "", "events")) {
        event_rules(obj, e);
    } else if (is(t, "", "secrets")) {
        /* ValidateSecretUpdate: the type first, then the secret itself. */
        const char *nt = kobj_str(obj, "type"), *ot = old ? kobj_str(old, "type") : NULL;
        if (old && strcmp(nt ? nt : "", ot ? ot : "") != 0) {
            char *q = kl_quote(nt ? nt : "");
            kl_errs_add(e, KL_INVALID, "type", "Invalid value: %s: field is immutable", q);
            free(q);
        }
        secret_rules(obj, e);
    }
}
