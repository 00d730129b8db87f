/*
 * fuzz_kl_api: kube-lite's request handling (kl_api_handle), the entry the
 * HTTP server calls, fed arbitrary requests. Input: a method byte, then
 * NUL-separated path, query string ("k=v&k=v", already decoded), content
 * type and Accept header, then the body. Each input gets a fresh store
 * with the usual namespaces and one claim, so an input always means the
 * same thing; a watch answer is read a few times, then dropped.
 */
#include <stdlib.h>
#include <string.h>

#include "kube-lite/kl.h"

#include "fuzz.h"

#define MAX_QUERY 16

static const char claim[] =
    "{\"apiVersion\":\"v1\",\"kind\":\"PersistentVolumeClaim\",\"metadata\":{\"name\":\"c\","
    "\"namespace\":\"default\",\"labels\":{\"a\":\"b\"},\"finalizers\":[\"f\"]},\"spec\":{"
    "\"accessModes\":[\"ReadWriteOnce\"],\"resources\":{\"requests\":{\"storage\":\"1Gi\"}}}}";

typedef struct query {
    char *key[MAX_QUERY];
    const char *val[MAX_QUERY];
    size_t n;
} query;

static const char *query_get(void *ud, const char *key)
{
    const query *q = ud;
    for (size_t i = 0; i < q->n; i++)
        if (strcmp(q->key[i], key) == 0)
            return q->val[i];
    return NULL;
}

/* Splits "k=v&k2=v2" in place (a key without "=" has the value ""). */
static void query_parse(char *s, query *q)
{
    q->n = 0;
    for (char *p = s; p != NULL && *p != '\0' && q->n < MAX_QUERY;) {
        char *amp = strchr(p, '&');
        if (amp != NULL)
            *amp = '\0';
        char *eq = strchr(p, '=');
        if (eq != NULL)
            *eq = '\0';
        q->key[q->n] = p;
        q->val[q->n] = eq != NULL ? eq + 1 : "";
        q->n++;
        p = amp != NULL ? amp + 1 : NULL;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const char *const methods[] = {"GET",    "POST", "PUT",     "PATCH",
                                          "DELETE", "HEAD", "OPTIONS", "BREW"};
    if (size < 1 || size > 16384)
        return 0;
    const char *method = methods[data[0] % (sizeof(methods) / sizeof(methods[0]))];
    const uint8_t *r = NULL;
    size_t rn = 0;
    char *path = fuzz_split(data + 1, size - 1, 0, &r, &rn);
    char *qs = fuzz_split(r, rn, 0, &r, &rn);
    char *ctype = fuzz_split(r, rn, 0, &r, &rn);
    char *accept = fuzz_split(r, rn, 0, &r, &rn);
    char *body = fuzz_cstr(r, rn);
    kl_store *store = kl_store_new(64);
    kl_api_opts opts = {.version_minor = "32"};
    kl_api *api = store != NULL ? kl_api_new(store, &opts) : NULL;
    if (path == NULL || qs == NULL || ctype == NULL || accept == NULL || body == NULL ||
        api == NULL)
        goto out;
    kl_api_bootstrap(api);
    (void)kl_api_create_json(api, "/api/v1/namespaces/default/persistentvolumeclaims", claim);

    query q;
    query_parse(qs, &q);
    kl_request req = {
        .method = method,
        .path = path,
        .query = query_get,
        .query_ud = &q,
        .content_type = *ctype != '\0' ? ctype : NULL,
        .accept = *accept != '\0' ? accept : NULL,
        .body = body,
        .body_len = rn,
    };
    kl_response resp;
    kl_api_handle(api, &req, &resp);
    free(resp.body);
    if (resp.stream != NULL) {
        for (int i = 0; i < 4; i++) {
            char *buf = NULL;
            size_t len = 0;
            int more = kl_stream_next(resp.stream, &buf, &len);
            free(buf);
            if (more < 0)
                break;
        }
        kl_stream_free(resp.stream);
    }
out:
    kl_api_free(api);
    kl_store_free(store);
    free(path);
    free(qs);
    free(ctype);
    free(accept);
    free(body);
    return 0;
}
