/*
 * Discovery and OpenAPI documents: /api, /apis, /apis/<group>/<version> (the
 * legacy discovery kubectl and client-go read) and the OpenAPI v3 root and
 * per-group-version documents (one patch path per kind with the
 * fieldValidation parameter, so kubectl leaves validation to the server).
 *
 * Built once for the built-in types plus the types CRDs serve; rest.c
 * rebuilds it when the CRD registry's generation moves and hands requests a
 * reference, so a rebuild never pulls a document from under a reader.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube-lite/kl.h"

static json_object *strings(const char *const *v, size_t n)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(a, json_object_new_string(v[i]));
    return a;
}

kl_discovery *kl_discovery_build(const kl_type **extra, size_t n_extra, uint64_t gen)
{
    kl_discovery *a = util_calloc(1, sizeof(*a));
    a->gen = gen;
    a->refs = 1;
    static const char *const verbs[] = {"create", "delete", "deletecollection", "get",
                                        "list",   "patch",  "update",           "watch"};
    static const char *const ns_verbs[] = {"create", "delete", "get",  "list",
                                           "patch",  "update", "watch"};
    static const char *const sub_verbs[] = {"get", "patch", "update"};
    size_t n_builtin = 0;
    const kl_type *types = kl_types(&n_builtin);
    size_t n = n_builtin + n_extra;
    a->gv_lists = json_object_new_object();
    a->gv_groups = json_object_new_object();
    a->openapi_gv = json_object_new_object();
    json_object *groups = json_object_new_array();
    json_object *root_paths = json_object_new_object();

    for (size_t i = 0; i < n; i++) {
        const kl_type *t = i < n_builtin ? &types[i] : extra[i - n_builtin];
        char gv_key[128];
        if (t->group[0])
            snprintf(gv_key, sizeof(gv_key), "apis/%s/%s", t->group, t->version);
        else
            snprintf(gv_key, sizeof(gv_key), "api/%s", t->version);
        json_object *list = NULL;
        if (!json_object_object_get_ex(a->gv_lists, gv_key, &list)) {
            list = json_object_new_object();
            json_object_object_add(list, "kind", json_object_new_string("APIResourceList"));
            json_object_object_add(list, "apiVersion", json_object_new_string("v1"));
            json_object_object_add(list, "groupVersion",
                                   json_object_new_string(kl_type_api_version(t)));
            json_object_object_add(list, "resources", json_object_new_array());
            json_object_object_add(a->gv_lists, gv_key, list);
            if (t->group[0]) {
                json_object *gvo = json_object_new_object();
                json_object_object_add(gvo, "groupVersion",
                                       json_object_new_string(kl_type_api_version(t)));
                json_object_object_add(gvo, "version", json_object_new_string(t->version));
                json_object *g = json_object_new_object();
                json_object_object_add(g, "kind", json_object_new_string("APIGroup"));
                json_object_object_add(g, "apiVersion", json_object_new_string("v1"));
                json_object_object_add(g, "name", json_object_new_string(t->group));
                json_object *vs = json_object_new_array();
                json_object_array_add(vs, json_object_get(gvo));
                json_object_object_add(g, "versions", vs);
                json_object_object_add(g, "preferredVersion", gvo);
                json_object_object_add(a->gv_groups, t->group, json_object_get(g));
                json_object_array_add(groups, g);
            }
            /* OpenAPI v3 per group-version: one patch path per kind, with the
             * fieldValidation parameter so kubectl leaves validation to us. */
            json_object *doc = json_object_new_object();
            json_object_object_add(doc, "openapi", json_object_new_string("3.0.0"));
            json_object *info = json_object_new_object();
            json_object_object_add(info, "title", json_object_new_string("Kubernetes"));
            json_object_object_add(info, "version", json_object_new_string("v1.32.0"));
            json_object_object_add(doc, "info", info);
            json_object *comp = json_object_new_object();
            json_object_object_add(comp, "schemas", json_object_new_object());
            json_object_object_add(doc, "components", comp);
            json_object_object_add(doc, "paths", json_object_new_object());
            json_object_object_add(a->openapi_gv, gv_key, doc);
            json_object *ref = json_object_new_object();
            char url[192];
            snprintf(url, sizeof(url), "/openapi/v3/%s?hash=kubelite%" PRIu64, gv_key, gen + 1);
            json_object_object_add(ref, "serverRelativeURL", json_object_new_string(url));
            json_object_object_add(root_paths, gv_key, ref);
        }
        json_object *res = json_object_new_object();
        json_object_object_add(res, "name", json_object_new_string(t->resource));
        json_object_object_add(res, "singularName", json_object_new_string(t->singular));
        json_object_object_add(res, "namespaced", json_object_new_boolean(t->namespaced));
        json_object_object_add(res, "kind", json_object_new_string(t->kind));
        bool is_ns = strcmp(t->resource, "namespaces") == 0 && !t->group[0];
        json_object_object_add(res, "verbs", is_ns ? strings(ns_verbs, 7) : strings(verbs, 8));
        size_t n_short = 0;
        while (n_short < 3 && t->short_names[n_short])
            n_short++;
        if (n_short)
            json_object_object_add(res, "shortNames", strings(t->short_names, n_short));
        json_object *resources = NULL;
        json_object_object_get_ex(list, "resources", &resources);
        json_object_array_add(resources, res);
        if (t->has_status) {
            json_object *sub = json_object_new_object();
            char name[128];
            snprintf(name, sizeof(name), "%s/status", t->resource);
            json_object_object_add(sub, "name", json_object_new_string(name));
            json_object_object_add(sub, "singularName", json_object_new_string(""));
            json_object_object_add(sub, "namespaced", json_object_new_boolean(t->namespaced));
            json_object_object_add(sub, "kind", json_object_new_string(t->kind));
            json_object_object_add(sub, "verbs", strings(sub_verbs, 3));
            json_object_array_add(resources, sub);
        }
        json_object *doc = NULL, *paths = NULL;
        json_object_object_get_ex(a->openapi_gv, gv_key, &doc);
        json_object_object_get_ex(doc, "paths", &paths);
        char path[256];
        snprintf(path, sizeof(path), "/%s%s/%s/{name}", gv_key,
                 t->namespaced ? "/namespaces/{namespace}" : "", t->resource);
        json_object *gvk = json_object_new_object();
        json_object_object_add(gvk, "group", json_object_new_string(t->group));
        json_object_object_add(gvk, "version", json_object_new_string(t->version));
        json_object_object_add(gvk, "kind", json_object_new_string(t->kind));
        json_object *param = json_object_new_object();
        json_object_object_add(param, "name", json_object_new_string("fieldValidation"));
        json_object_object_add(param, "in", json_object_new_string("query"));
        json_object *schema = json_object_new_object();
        json_object_object_add(schema, "type", json_object_new_string("string"));
        json_object_object_add(param, "schema", schema);
        json_object *params = json_object_new_array();
        json_object_array_add(params, param);
        json_object *patch = json_object_new_object();
        json_object_object_add(patch, "x-kubernetes-group-version-kind", gvk);
        json_object_object_add(patch, "parameters", params);
        json_object_object_add(patch, "responses", json_object_new_object());
        json_object *item = json_object_new_object();
        json_object_object_add(item, "patch", patch);
        json_object_object_add(paths, path, item);
    }

    json_object *api = json_object_new_object();
    json_object_object_add(api, "kind", json_object_new_string("APIVersions"));
    static const char *const v1[] = {"v1"};
    json_object_object_add(api, "versions", strings(v1, 1));
    json_object *addr = json_object_new_object();
    json_object_object_add(addr, "clientCIDR", json_object_new_string("0.0.0.0/0"));
    json_object_object_add(addr, "serverAddress", json_object_new_string("127.0.0.1:6443"));
    json_object *addrs = json_object_new_array();
    json_object_array_add(addrs, addr);
    json_object_object_add(api, "serverAddressByClientCIDRs", addrs);
    a->api = util_strdup(json_object_to_json_string_ext(api, JSON_C_TO_STRING_PLAIN |
                                                                 JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(api);

    json_object *apis = json_object_new_object();
    json_object_object_add(apis, "kind", json_object_new_string("APIGroupList"));
    json_object_object_add(apis, "apiVersion", json_object_new_string("v1"));
    json_object_object_add(apis, "groups", groups);
    a->apis = util_strdup(json_object_to_json_string_ext(apis, JSON_C_TO_STRING_PLAIN |
                                                                   JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(apis);

    json_object *root = json_object_new_object();
    json_object_object_add(root, "paths", root_paths);
    a->openapi_root = util_strdup(json_object_to_json_string_ext(
        root, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
    json_object_put(root);
    return a;
}

kl_discovery *kl_discovery_ref(kl_discovery *d)
{
    if (d)
        __atomic_add_fetch(&d->refs, 1, __ATOMIC_RELAXED);
    return d;
}

void kl_discovery_unref(kl_discovery *d)
{
    if (!d || __atomic_sub_fetch(&d->refs, 1, __ATOMIC_ACQ_REL) != 0)
        return;
    free(d->api);
    free(d->apis);
    free(d->openapi_root);
    json_object_put(d->gv_lists);
    json_object_put(d->gv_groups);
    json_object_put(d->openapi_gv);
    free(d);
}
