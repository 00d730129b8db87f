/*
 * The own-writes overlay (see kube.h): key -> the text and version of our
 * last write's answer, under one mutex.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "kobj/kobj.h"
#include "kube/kube.h"
#include "util/util.h"

struct written {
    char *json;
    char *rv;
};

struct kube_overlay {
    pthread_mutex_t mu;
    struct lh_table *t; /* key -> struct written */
};

static void free_written(struct lh_entry *e)
{
    struct written *w = lh_entry_v(e);
    free(lh_entry_k(e));
    if (w) {
        free(w->json);
        free(w->rv);
        free(w);
    }
}

kube_overlay *kube_overlay_new(void)
{
    kube_overlay *o = util_calloc(1, sizeof(*o));
    pthread_mutex_init(&o->mu, NULL);
    o->t = lh_kchar_table_new(64, free_written);
    return o;
}

void kube_overlay_free(kube_overlay *o)
{
    if (!o)
        return;
    lh_table_free(o->t);
    pthread_mutex_destroy(&o->mu);
    free(o);
}

void kube_overlay_put(kube_overlay *o, const char *key, const json_object *answer)
{
    const char *rv = kobj_rv(answer);
    if (!rv || !*rv)
        return;
    struct written *w = util_calloc(1, sizeof(*w));
    w->json = kobj_to_text(answer, NULL);
    w->rv = util_strdup(rv);
    pthread_mutex_lock(&o->mu);
    /* lh_table_insert keeps an existing key: replace it. */
    lh_table_delete(o->t, key);
    lh_table_insert(o->t, util_strdup(key), w);
    pthread_mutex_unlock(&o->mu);
}

json_object *kube_overlay_fresh(kube_overlay *o, const char *key, json_object *cached)
{
    if (!cached)
        return NULL;
    json_object *use = cached;
    pthread_mutex_lock(&o->mu);
    struct lh_entry *e = lh_table_lookup_entry(o->t, key);
    if (e) {
        const struct written *w = lh_entry_v(e);
        if (kobj_rv_cmp(w->rv, kobj_rv(cached)) > 0) {
            json_object *parsed = kobj_parse_text(w->json, strlen(w->json));
            if (parsed) {
                use = parsed;
                json_object_put(cached);
            }
        } else {
            lh_table_delete(o->t, key);
        }
    }
    pthread_mutex_unlock(&o->mu);
    return use;
}

void kube_overlay_forget(kube_overlay *o, const char *key)
{
    pthread_mutex_lock(&o->mu);
    lh_table_delete(o->t, key);
    pthread_mutex_unlock(&o->mu);
}
