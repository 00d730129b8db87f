/*
 * fuzz_names: the name and label helpers fed arbitrary text: label value
 * checks (the provisioner's and kube-lite's must agree), the names built
 * from a driver or node name (finalizer, lock, managed-by label, identity),
 * capacity work-item keys and segments, and the --csi-address parser.
 * Properties checked: a managed-by value for a node name (a DNS subdomain)
 * is a valid label value; a
 * key built from a class without "/" splits back into its parts.
 */
#include <stdlib.h>
#include <string.h>

#include "attacher/attacher.h"
#include "kube-lite/kl.h"
#include "provisioner/provisioner.h"

#include "fuzz.h"

static void check(bool ok, const char *what, const char *s)
{
    if (!ok) {
        fprintf(stderr, "%s: %s\n", what, s);
        abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 512)
        return 0;
    const uint8_t *rest = NULL;
    size_t rest_len = 0;
    char *a = fuzz_split(data, size, 0, &rest, &rest_len);
    char *b = fuzz_cstr(rest, rest_len);
    if (a == NULL || b == NULL)
        goto out;

    check(prov_cap_label_value_ok(a) == kl_is_label_value(a), "label value checks disagree", a);
    /* Node names are DNS subdomains: for those the label must be valid. */
    char *mb = prov_cap_managed_by(a);
    check(mb != NULL && (!kl_is_dns1123_subdomain(a) || kl_is_label_value(mb)),
          "managed-by is no label value", a);
    free(mb);
    free(att_finalizer(a));
    free(att_lock_name(a));
    free(att_message_fit(a));
    free(prov_identity(1700000000000, 42, a, b));
    (void)kl_is_dns1123_subdomain(a);
    (void)kl_is_qualified_name(a);

    char *key = prov_cap_key(a, b);
    char *cls = NULL;
    char *seg = NULL;
    if (key != NULL && prov_cap_key_split(key, &cls, &seg) == 0 && strchr(a, '/') == NULL &&
        *a != '\0')
        check(strcmp(cls, a) == 0 && strcmp(seg, b) == 0, "key does not split back", key);
    free(cls);
    free(seg);
    free(key);
    cls = NULL;
    seg = NULL;
    if (prov_cap_key_split(a, &cls, &seg) == 0) {
        json_object_put(prov_cap_node_topology(seg));
        prov_cap_topology_free(prov_cap_segment_topology(seg));
    }
    free(cls);
    free(seg);
    free(prov_cap_owner_path(a, b, "default", "x"));

    char *target = NULL;
    char *path = NULL;
    if (csi_endpoint_parse("csi-address", a, &target, &path) == 0) {
        free(target);
        free(path);
    }
out:
    free(a);
    free(b);
    return 0;
}
