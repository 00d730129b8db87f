/*
 * fuzz_secret_template: the secret name template expander (${pv.name},
 * ${pvc.namespace}, ${pvc.name}, ${pvc.annotations['<key>']}, Go os.Expand
 * rules) and the name checks after it. Input: the name template, a NUL, the
 * namespace template, a NUL, then the PVC as JSON (a fixed PVC with an
 * annotation when what follows is not JSON). Each template goes through the
 * provisioner keys and the default keys.
 */
#include <stdlib.h>

#include "provisioner/provisioner.h"

#include "fuzz.h"

#define P PROV_PARAM_PREFIX

static const char default_pvc[] =
    "{\"metadata\":{\"name\":\"data-0\",\"namespace\":\"team-a\","
    "\"annotations\":{\"owner\":\"alice\",\"a.b/c\":\"${pvc.name}\"}}}";

static void resolve(const prov_config *cfg, const char *name_key, const char *ns_key,
                    const char *name, const char *ns, const json_object *pvc)
{
    json_object *params = json_object_new_object();
    if (params == NULL)
        return;
    json_object_object_add(params, name_key, json_object_new_string(name));
    json_object_object_add(params, ns_key, json_object_new_string(ns));
    for (int k = 0; k < PROV_SECRET_KINDS; k++) {
        prov_secret_ref ref = {0};
        if (prov_secret_ref_resolve(cfg, (prov_secret_kind)k, params, "pvc-0a1b", pvc, &ref) == 0) {
            free(ref.name);
            free(ref.namespace);
        }
        prov_secret_ref none = {0};
        if (prov_secret_ref_resolve(cfg, (prov_secret_kind)k, params, "pvc-0a1b", NULL, &none) ==
            0) {
            free(none.name);
            free(none.namespace);
        }
    }
    prov_secret_refs all;
    if (prov_secret_refs_resolve(cfg, params, "pvc-0a1b", pvc, &all) == 0)
        prov_secret_refs_clear(&all);
    json_object_put(params);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    const uint8_t *rest = NULL;
    size_t rest_len = 0;
    char *name = fuzz_split(data, size, 0, &rest, &rest_len);
    const uint8_t *pvc_bytes = NULL;
    size_t pvc_len = 0;
    char *ns = fuzz_split(rest, rest_len, 0, &pvc_bytes, &pvc_len);
    json_object *pvc = fuzz_json(pvc_bytes, pvc_len);
    if (pvc == NULL)
        pvc = json_tokener_parse(default_pvc);
    if (name != NULL && ns != NULL) {
        prov_config cfg = {.driver_name = "csi.example.com", .volume_name_prefix = "pvc"};
        resolve(&cfg, P "provisioner-secret-name", P "provisioner-secret-namespace", name, ns, pvc);
        resolve(&cfg, P "secret-name", P "secret-namespace", name, ns, pvc);
        resolve(&cfg, "csiNodePublishSecretName", "csiNodePublishSecretNamespace", name, ns, pvc);
    }
    json_object_put(pvc);
    free(name);
    free(ns);
    return 0;
}
