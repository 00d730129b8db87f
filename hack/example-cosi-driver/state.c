/*
 * The driver's state: a JSON tree under one mutex, written whole to
 * <state-dir>/state.json (mode 0600: it holds the credentials the driver
 * handed out, as a backend's account database would) after every mutation,
 * and <state-dir>/status.json after every call: the same document with call
 * counters and every credential value replaced by its SHA-256, so that tests
 * can check what the driver holds without a secret reaching a file others
 * read.
 *
 * Calls are few and the document small, so a commit simply writes under the
 * lock (no group commit as in the CSI example driver).
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "cosid.h"
#include "kobj/kobj.h"
#include "obs/obs.h"

struct cosid_store {
    char *dir;
    char *state_path, *status_path;
    bool sync;
    pthread_mutex_t mu;
    json_object *root; /* {"version": 1, "buckets": [...]} */
    int64_t calls[COSID_N_METHODS];
    bool dirty; /* state.json is behind the model */
};

/* ---- helpers ------------------------------------------------------------------- */

static void random_bytes(void *buf, size_t n)
{
    if (getrandom(buf, n, 0) != (ssize_t)n)
        abort(); /* a driver that cannot make secrets must not make weak ones */
}

char *cosid_random_text(const char *alphabet, size_t n)
{
    size_t k = strlen(alphabet);
    unsigned char *rnd = util_calloc(n, 1);
    char *out = util_calloc(n + 1, 1);
    random_bytes(rnd, n);
    /* k divides 256 for the alphabets used (16, 32, 64): no modulo bias. */
    for (size_t i = 0; i < n; i++)
        out[i] = alphabet[rnd[i] % k];
    free(rnd);
    return out;
}

char *cosid_random_id(const char *prefix)
{
    char *hex = cosid_random_text("0123456789abcdef", 16);
    char *id = util_asprintf("%s-%s", prefix, hex);
    free(hex);
    return id;
}

char *cosid_sha256_hex(const char *s, size_t len)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int n = 0;
    if (EVP_Digest(s, len, md, &n, EVP_sha256(), NULL) != 1)
        abort();
    char *hex = util_calloc(2 * (size_t)n + 1, 1);
    for (unsigned i = 0; i < n; i++)
        snprintf(hex + 2 * (size_t)i, 3, "%02x", md[i]);
    return hex;
}

static json_object *find_by(json_object *buckets, const char *key, const char *value)
{
    for (size_t i = 0; i < kobj_len(buckets); i++) {
        json_object *b = kobj_at(buckets, i);
        const char *v = kobj_str(b, key);
        if (v && strcmp(v, value) == 0)
            return b;
    }
    return NULL;
}

json_object *cosid_bucket_by_id(json_object *buckets, const char *id)
{
    return find_by(buckets, "id", id);
}

json_object *cosid_bucket_by_name(json_object *buckets, const char *name)
{
    return find_by(buckets, "name", name);
}

/* ---- documents ------------------------------------------------------------------- */

/* status.json: counters first, then the model with credentials hashed. */
static char *status_text(const cosid_store *s, size_t *len)
{
    json_object *doc = json_object_new_object();
    json_object *calls = json_object_new_object();
    const char *const *names = cosid_method_names();
    for (int i = 0; i < COSID_N_METHODS; i++)
        if (s->calls[i])
            json_object_object_add(calls, names[i], json_object_new_int64(s->calls[i]));
    json_object_object_add(doc, "version", json_object_new_int(1));
    json_object_object_add(doc, "calls", calls);
    json_object *buckets = NULL;
    if (json_object_deep_copy(kobj_arr(s->root, "buckets"), &buckets, NULL) < 0)
        abort();
    for (size_t i = 0; i < kobj_len(buckets); i++) {
        json_object *grants = kobj_arr(kobj_at(buckets, i), "grants");
        for (size_t g = 0; g < kobj_len(grants); g++) {
            json_object *grant = kobj_at(grants, g);
            json_object *hashed = json_object_new_object();
            json_object *creds = kobj_obj(grant, "credentials");
            if (!creds)
                creds = hashed; /* empty: nothing to hash */
            json_object_object_foreach(creds, proto, vals)
            {
                json_object *h = json_object_new_object();
                json_object_object_foreach(vals, k, v)
                {
                    const char *text = json_object_get_string(v);
                    char *hex = cosid_sha256_hex(text, strlen(text));
                    json_object_object_add(h, k, json_object_new_string(hex));
                    free(hex);
                }
                json_object_object_add(hashed, proto, h);
            }
            json_object_object_del(grant, "credentials");
            json_object_object_add(grant, "credentials_sha256", hashed);
        }
    }
    json_object_object_add(doc, "buckets", buckets);
    char *text = kobj_to_text(doc, len);
    json_object_put(doc);
    return text;
}

static int write_state(cosid_store *s)
{
    size_t len = 0;
    char *text = kobj_to_text(s->root, &len);
    int r = drvkit_replace_file(s->state_path, text, len, 0600, s->sync);
    free(text);
    return r;
}

static int write_status(cosid_store *s)
{
    size_t len = 0;
    char *text = status_text(s, &len);
    int r = drvkit_replace_file(s->status_path, text, len, 0644, false);
    free(text);
    return r;
}

static int load_state(cosid_store *s)
{
    char *text = NULL;
    size_t len = 0;
    int r = drvkit_read_file(s->state_path, &text, &len);
    if (r == -ENOENT)
        return 0;
    if (r < 0)
        return r;
    json_object *root = kobj_parse_text(text, len);
    free(text);
    if (!kobj_typed(root, json_type_object) || !kobj_arr(root, "buckets")) {
        json_object_put(root);
        return util_err_set(-EINVAL, "%s is not a state document; move it away to start empty",
                            s->state_path);
    }
    json_object_put(s->root);
    s->root = root;
    return 0;
}

/* ---- the store -------------------------------------------------------------------- */

int cosid_store_new(const char *dir, bool sync, cosid_store **out)
{
    *out = NULL;
    cosid_store *s = util_calloc(1, sizeof(*s));
    s->dir = util_strdup(dir);
    s->state_path = util_asprintf("%s/state.json", dir);
    s->status_path = util_asprintf("%s/status.json", dir);
    s->sync = sync;
    pthread_mutex_init(&s->mu, NULL);
    s->root = json_object_new_object();
    json_object_object_add(s->root, "version", json_object_new_int(1));
    json_object_object_add(s->root, "buckets", json_object_new_array());
    char *buckets = util_asprintf("%s/buckets", dir);
    int r = drvkit_mkdir_p(buckets, 0755);
    if (r < 0)
        r = util_err_set(r, "cannot create %s: %s", buckets, strerror(-r));
    free(buckets);
    if (r == 0)
        r = load_state(s);
    if (r == 0)
        r = write_status(s); /* tests read it as soon as the socket is up */
    if (r < 0) {
        cosid_store_free(s);
        return r;
    }
    obs_info("state: %zu buckets from %s", kobj_len(kobj_arr(s->root, "buckets")), s->state_path);
    *out = s;
    return 0;
}

void cosid_store_free(cosid_store *s)
{
    if (!s)
        return;
    json_object_put(s->root);
    pthread_mutex_destroy(&s->mu);
    free(s->dir);
    free(s->state_path);
    free(s->status_path);
    free(s);
}

const char *cosid_store_dir(const cosid_store *s)
{
    return s->dir;
}

json_object *cosid_store_lock(cosid_store *s)
{
    pthread_mutex_lock(&s->mu);
    return kobj_arr(s->root, "buckets");
}

void cosid_store_unlock(cosid_store *s)
{
    pthread_mutex_unlock(&s->mu);
}

void cosid_store_changed(cosid_store *s)
{
    s->dirty = true;
}

void cosid_store_count_call(cosid_store *s, cosid_method m)
{
    pthread_mutex_lock(&s->mu);
    s->calls[m]++;
    pthread_mutex_unlock(&s->mu);
}

void cosid_store_commit(cosid_store *s)
{
    pthread_mutex_lock(&s->mu);
    if (s->dirty && write_state(s) < 0) {
        obs_error("cannot persist the driver state, exiting: %s", util_err_last());
        _exit(2);
    }
    s->dirty = false;
    if (write_status(s) < 0)
        obs_warn("cannot write status: %s", util_err_last());
    pthread_mutex_unlock(&s->mu);
}
