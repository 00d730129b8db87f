/*
 * The intent record's pure core (no I/O, no clock, no locks): what one
 * entry holds and how it is written and read back, the in-memory set with
 * its group-commit bookkeeping, and what recovery does with an entry.
 *
 * An entry is the claim as the planning code reads it, cut down to what
 * repeating the same CreateVolume needs (metadata name, namespace, uid, the
 * annotations the plan or the class's secret templates read; the spec
 * fields of the request) plus the volume name. Parameters and secrets come
 * from the StorageClass at recovery time: no secret is ever stored.
 *
 * The record is read from the API and may have been edited by hand, so its
 * text is treated as hostile: every value is type-checked, lengths are
 * bounded, duplicates (by uid) are dropped, and an entry that cannot be
 * acted on is skipped and counted rather than failing the whole record.
 *
 * The set keeps, per entry: its text, whether it is wanted (not done),
 * whether the record is known to hold it (durable) or may hold it
 * (in_record: a failed write may still have landed), and the flush that is
 * writing it. A flush writes every wanted entry; an entry leaves memory only
 * once a successful write left it out, so a done entry is never forgotten
 * while the record may still name it.
 */
#include "plan_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/linkhash.h>

/* ---- entries ----------------------------------------------------------------------- */

/* The annotations the planning code reads from a claim. */
static const char *const kept_annotations[] = {
    PROV_ANN_SELECTED_NODE,       PROV_ANN_ALPHA_SELECTED_NODE,      PROV_ANN_BETA_STORAGE_CLASS,
    PROV_ANN_STORAGE_PROVISIONER, PROV_ANN_BETA_STORAGE_PROVISIONER, NULL};

/* The spec fields CreateVolume is built from (selector: never provisioned). */
static const char *const kept_spec[] = {
    "accessModes", "resources",     "storageClassName",          "volumeMode",
    "dataSource",  "dataSourceRef", "volumeAttributesClassName", NULL};

/* Whether a parameter of the class uses ${pvc.annotations['key']}. */
static bool class_uses_annotation(const json_object *sc, const char *key)
{
    json_object *params = kobj_obj(sc, "parameters");
    if (!params)
        return false;
    size_t kl = strlen(key);
    json_object_object_foreach(params, k, v)
    {
        (void)k;
        const char *s = kobj_typed(v, json_type_string) ? json_object_get_string(v) : NULL;
        for (const char *p = s; p && (p = strstr(p, "annotations['")) != NULL; p++) {
            const char *q = p + strlen("annotations['");
            if (strncmp(q, key, kl) == 0 && strncmp(q + kl, "']", 2) == 0)
                return true;
        }
    }
    return false;
}

static bool is_kept_annotation(const json_object *sc, const char *key)
{
    for (size_t i = 0; kept_annotations[i]; i++)
        if (strcmp(key, kept_annotations[i]) == 0)
            return true;
    return class_uses_annotation(sc, key);
}

/* A deep copy of `v` (NULL stays NULL). */
static json_object *copy(const json_object *v)
{
    json_object *out = NULL;
    if (v && json_object_deep_copy((json_object *)v, &out, NULL) != 0)
        out = NULL;
    return out;
}

static json_object *skeleton(const json_object *pvc, const json_object *sc, bool with_templates)
{
    json_object *claim = json_object_new_object(), *md = json_object_new_object();
    json_object_object_add(md, "name", json_object_new_string(kobj_name(pvc)));
    json_object_object_add(md, "namespace", json_object_new_string(kobj_namespace(pvc)));
    json_object_object_add(md, "uid", json_object_new_string(kobj_uid(pvc)));
    json_object *ann = kobj_obj(kobj_meta(pvc), "annotations"), *kept = NULL;
    if (ann) {
        json_object_object_foreach(ann, k, av)
        {
            if (!kobj_typed(av, json_type_string))
                continue;
            bool fixed = false;
            for (size_t i = 0; kept_annotations[i] && !fixed; i++)
                fixed = strcmp(k, kept_annotations[i]) == 0;
            if (!fixed && !(with_templates && is_kept_annotation(sc, k)))
                continue;
            if (!kept)
                kept = json_object_new_object();
            json_object_object_add(kept, k, json_object_get(av));
        }
    }
    if (kept)
        json_object_object_add(md, "annotations", kept);
    json_object_object_add(claim, "metadata", md);
    json_object *spec = kobj_obj(pvc, "spec"), *ks = json_object_new_object();
    for (size_t i = 0; kept_spec[i]; i++) {
        json_object *v = kobj_get(spec, kept_spec[i]);
        if (v)
            json_object_object_add(ks, kept_spec[i], copy(v));
    }
    json_object_object_add(claim, "spec", ks);
    return claim;
}

int prov_intent_encode(const json_object *pvc, const json_object *sc, const char *volume,
                       char **text)
{
    *text = NULL;
    const char *uid = kobj_uid(pvc), *ns = kobj_namespace(pvc), *name = kobj_name(pvc);
    if (!uid || !*uid || !ns || !*ns || !name || !*name || !volume || !*volume)
        return util_err_set(-EINVAL, "intent: the claim has no uid, namespace or name");
    /* With the annotations the class's templates read, unless that makes
     * the entry too big: then the repeat may fail to resolve a template,
     * which is better than no intent at all. */
    for (int pass = 0; pass < 2; pass++) {
        json_object *e = json_object_new_object();
        json_object_object_add(e, "claim", skeleton(pvc, sc, pass == 0));
        json_object_object_add(e, "volume", json_object_new_string(volume));
        size_t n = 0;
        char *s = kobj_to_text(e, &n);
        if (n <= PROV_INTENT_ENTRY_MAX || pass == 1) {
            *text = n <= PROV_INTENT_ENTRY_MAX ? s : NULL;
            s = n <= PROV_INTENT_ENTRY_MAX ? NULL : s;
        }
        free(s);
        json_object_put(e);
        if (*text)
            return 0;
    }
    return util_err_set(-E2BIG, "intent: the claim %s/%s needs more than %d bytes", ns, name,
                        PROV_INTENT_ENTRY_MAX);
}

/* A string member of bounded length, or NULL. */
static const char *bounded(const json_object *o, const char *key, size_t max)
{
    const char *s = kobj_str(o, key);
    return s && *s && strlen(s) <= max ? s : NULL;
}

int prov_intent_decode(const json_object *e, prov_intent *out)
{
    memset(out, 0, sizeof(*out));
    json_object *claim = kobj_obj(e, "claim");
    json_object *md = kobj_obj(claim, "metadata");
    out->uid = bounded(md, "uid", 128);
    out->ns = bounded(md, "namespace", 63);
    out->name = bounded(md, "name", 253);
    out->volume = bounded(e, "volume", 253);
    out->claim = claim;
    if (!out->uid || !out->ns || !out->name || !out->volume || !kobj_obj(claim, "spec"))
        return util_err_set(-EINVAL, "intent entry without claim uid, namespace, name, spec or "
                                     "volume");
    json_object *ann = kobj_get(md, "annotations");
    if (ann && !kobj_typed(ann, json_type_object))
        return util_err_set(-EINVAL, "intent entry %s: annotations are no object", out->uid);
    return 0;
}

json_object *prov_intent_claim(const prov_intent *in)
{
    return copy(in->claim);
}

/* ---- the set ------------------------------------------------------------------------ */

struct ent {
    char *uid, *ns, *name, *volume;
    char *text;
    size_t len;
    bool done;       /* PV exists or the cleanup ran: leaves with the next write */
    bool durable;    /* a successful write held it */
    bool in_record;  /* the record may hold it */
    bool recovered;  /* read from the record, not joined by this process */
    uint64_t flight; /* the flush writing it, 0: none */
    uint64_t err_seq;
    int err;
    struct ent *next;
};

struct prov_intent_set {
    size_t max_entries, max_bytes;
    struct ent *head;
    /* Every claim sync and every deleted claim asks about its own entries,
     * with up to max_entries of them held: uid -> entry (keys borrowed from
     * the entries), and "namespace/name" -> how many of its entries are
     * wanted (owned keys), so a claim with none is answered at once. */
    struct lh_table *by_uid;
    struct lh_table *wanted_by_claim;
    size_t wanted, wanted_bytes; /* entries not done, and their text */
    uint64_t seq;                /* last flush started */
    uint64_t flight;             /* the flush under way, 0: none */
};

/* One claim key's count of wanted entries; the table's key is `key`. */
struct claim_count {
    size_t n;
    char key[];
};

static void free_claim_key(struct lh_entry *le)
{
    free(lh_entry_v(le));
}

/* Adds `delta` (+1 or -1) to the wanted entries of e's claim. */
static void count_claim(prov_intent_set *s, const struct ent *e, int delta)
{
    char *key = util_asprintf("%s/%s", e->ns, e->name);
    struct claim_count *cc = NULL;
    if (lh_table_lookup_ex(s->wanted_by_claim, key, (void **)&cc)) {
        if (delta > 0)
            cc->n++;
        else if (--cc->n == 0)
            lh_table_delete(s->wanted_by_claim, key);
    } else if (delta > 0) {
        size_t len = strlen(key) + 1;
        cc = util_calloc(1, sizeof(*cc) + len);
        memcpy(cc->key, key, len);
        cc->n = 1;
        lh_table_insert(s->wanted_by_claim, cc->key, cc);
    }
    free(key);
}

prov_intent_set *prov_intent_set_new(size_t max_entries, size_t max_bytes)
{
    prov_intent_set *s = util_calloc(1, sizeof(*s));
    s->max_entries = max_entries ? max_entries : 1;
    s->max_bytes = max_bytes;
    s->by_uid = lh_kchar_table_new(64, NULL);
    s->wanted_by_claim = lh_kchar_table_new(64, free_claim_key);
    if (!s->by_uid || !s->wanted_by_claim)
        abort();
    return s;
}

static void ent_free(struct ent *e)
{
    free(e->uid);
    free(e->ns);
    free(e->name);
    free(e->volume);
    free(e->text);
    free(e);
}

void prov_intent_set_free(prov_intent_set *s)
{
    if (!s)
        return;
    for (struct ent *e = s->head, *n; e; e = n) {
        n = e->next;
        ent_free(e);
    }
    lh_table_free(s->by_uid);
    lh_table_free(s->wanted_by_claim);
    free(s);
}

static struct ent *find(const prov_intent_set *s, const char *uid)
{
    void *e = NULL;
    return lh_table_lookup_ex(s->by_uid, uid, &e) ? e : NULL;
}

static void set_done(prov_intent_set *s, struct ent *e, bool done)
{
    if (e->done == done)
        return;
    e->done = done;
    if (done) {
        s->wanted--;
        s->wanted_bytes -= e->len + 1;
    } else {
        s->wanted++;
        s->wanted_bytes += e->len + 1;
    }
    count_claim(s, e, done ? -1 : +1);
}

/* Drops entries that are done and that no write in flight or landed may hold. */
static void prune(prov_intent_set *s)
{
    for (struct ent **pp = &s->head; *pp;) {
        struct ent *e = *pp;
        if (e->done && !e->in_record && !e->flight) {
            *pp = e->next;
            lh_table_delete(s->by_uid, e->uid);
            ent_free(e);
        } else {
            pp = &e->next;
        }
    }
}

static struct ent *add(prov_intent_set *s, const prov_intent *in, const char *text)
{
    struct ent *e = util_calloc(1, sizeof(*e));
    e->uid = util_strdup(in->uid);
    e->ns = util_strdup(in->ns);
    e->name = util_strdup(in->name);
    e->volume = util_strdup(in->volume);
    e->text = util_strdup(text);
    e->len = strlen(text);
    e->done = true; /* set_done counts it */
    lh_table_insert(s->by_uid, e->uid, e);
    set_done(s, e, false);
    e->next = s->head;
    s->head = e;
    return e;
}

/* Whether the record holds `e` once the flush under way (if any) is done. */
static bool is_durable(const prov_intent_set *s, const struct ent *e)
{
    return e->durable && !e->done && (!s->flight || e->flight == s->flight);
}

prov_intent_status prov_intent_set_join(prov_intent_set *s, const char *text)
{
    json_object *o = text ? kobj_parse_text(text, strlen(text)) : NULL;
    prov_intent in;
    if (!o || prov_intent_decode(o, &in) < 0) {
        json_object_put(o);
        return PROV_INTENT_INVALID;
    }
    struct ent *e = find(s, in.uid);
    prov_intent_status st;
    if (e) {
        if (e->done) {
            /* Joined again (a failed create is retried): wanted once more,
             * with the newest request. */
            size_t n = strlen(text);
            if (s->wanted + 1 > s->max_entries || s->wanted_bytes + n + 1 > s->max_bytes) {
                json_object_put(o);
                return PROV_INTENT_FULL;
            }
            free(e->text);
            e->text = util_strdup(text);
            e->len = n;
            set_done(s, e, false);
        }
        st = is_durable(s, e) ? PROV_INTENT_DURABLE : PROV_INTENT_PENDING;
    } else if (s->wanted + 1 > s->max_entries ||
               s->wanted_bytes + strlen(text) + 1 > s->max_bytes) {
        st = PROV_INTENT_FULL;
    } else {
        add(s, &in, text);
        st = PROV_INTENT_PENDING;
    }
    json_object_put(o);
    return st;
}

prov_intent_status prov_intent_set_status(const prov_intent_set *s, const char *uid, uint64_t since,
                                          int *err)
{
    struct ent *e = find(s, uid);
    *err = 0;
    if (!e || e->done)
        return PROV_INTENT_INVALID;
    if (is_durable(s, e))
        return PROV_INTENT_DURABLE;
    if (e->err && e->err_seq > since) {
        *err = e->err;
        return PROV_INTENT_FAILED;
    }
    return PROV_INTENT_PENDING;
}

uint64_t prov_intent_set_seq(const prov_intent_set *s)
{
    return s->seq;
}

bool prov_intent_set_flushing(const prov_intent_set *s)
{
    return s->flight != 0;
}

void prov_intent_set_done(prov_intent_set *s, const char *uid)
{
    struct ent *e = uid ? find(s, uid) : NULL;
    if (!e)
        return;
    set_done(s, e, true);
    prune(s);
}

void prov_intent_set_trim(prov_intent_set *s)
{
    kobj_table_shrink(s->by_uid, 64);
    kobj_table_shrink(s->wanted_by_claim, 64);
}

bool prov_intent_set_has(const prov_intent_set *s, const char *uid)
{
    const struct ent *e = uid ? find(s, uid) : NULL;
    return e && !e->done;
}

void prov_intent_set_pending(const prov_intent_set *s, size_t *joiners, size_t *done)
{
    *joiners = *done = 0;
    for (const struct ent *e = s->head; e; e = e->next) {
        if (!e->done && !e->durable)
            (*joiners)++;
        if (e->done && e->in_record)
            (*done)++;
    }
}

size_t prov_intent_set_count(const prov_intent_set *s)
{
    return s->wanted;
}

int prov_intent_set_flush_text(prov_intent_set *s, char **text)
{
    *text = NULL;
    if (!s->flight)
        return -EINVAL;
    /* Oldest first, so the text reads in join order. */
    size_t n = 0;
    for (struct ent *e = s->head; e; e = e->next)
        n++;
    struct ent **all = util_calloc(n ? n : 1, sizeof(struct ent *));
    size_t i = n;
    for (struct ent *e = s->head; e; e = e->next)
        all[--i] = e;
    plan_buf b = {0};
    plan_buf_add(&b, "{\"entries\":[");
    bool first = true;
    for (i = 0; i < n; i++) {
        struct ent *e = all[i];
        if (e->done)
            continue;
        e->flight = s->flight;
        if (!first)
            plan_buf_add(&b, ",");
        plan_buf_addn(&b, e->text, e->len);
        first = false;
    }
    free(all);
    plan_buf_add(&b, "]}");
    *text = plan_buf_take(&b);
    return 0;
}

int prov_intent_set_flush_begin(prov_intent_set *s, char **text, uint64_t *seq)
{
    *text = NULL;
    *seq = 0;
    if (s->flight)
        return -EBUSY;
    s->flight = *seq = ++s->seq;
    return prov_intent_set_flush_text(s, text);
}

void prov_intent_set_flush_end(prov_intent_set *s, uint64_t seq, int err)
{
    if (!seq || seq != s->flight)
        return;
    for (struct ent *e = s->head; e; e = e->next) {
        bool included = e->flight == seq;
        if (err == 0) {
            e->durable = e->in_record = included;
        } else if (included) {
            /* It may have landed: never forget it unwritten. */
            e->in_record = true;
            if (!e->durable) {
                e->err = err;
                e->err_seq = seq;
            }
        }
        e->flight = 0;
    }
    s->flight = 0;
    prune(s);
}

size_t prov_intent_set_merge(prov_intent_set *s, const char *text, size_t *skipped,
                             void (*fn)(void *ud, const prov_intent *in), void *ud)
{
    *skipped = 0;
    if (!text || !*text)
        return 0;
    size_t len = strlen(text);
    if (len > PROV_INTENT_TEXT_MAX) {
        (*skipped)++;
        return 0;
    }
    json_object *o = kobj_parse_text(text, len);
    json_object *arr = kobj_arr(o, "entries");
    if (!arr) {
        (*skipped)++;
        json_object_put(o);
        return 0;
    }
    size_t added = 0;
    for (size_t i = 0; i < kobj_len(arr); i++) {
        json_object *item = kobj_at(arr, i);
        prov_intent in;
        if (prov_intent_decode(item, &in) < 0) {
            (*skipped)++;
            continue;
        }
        if (find(s, in.uid))
            continue; /* known here (a duplicate, or ours) */
        size_t tl = 0;
        char *t = kobj_to_text(item, &tl);
        if (tl > PROV_INTENT_ENTRY_MAX) {
            free(t);
            (*skipped)++;
            continue;
        }
        /* Already in the record: durable, whatever the bounds (an intent is
         * never dropped; the bounds only hold back new joiners). */
        struct ent *e = add(s, &in, t);
        free(t);
        e->durable = e->in_record = e->recovered = true;
        added++;
        if (fn)
            fn(ud, &in);
    }
    json_object_put(o);
    return added;
}

int prov_intent_set_each(const prov_intent_set *s, const char *ns, const char *name,
                         void (*fn)(void *ud, const prov_intent *in), void *ud)
{
    int n = 0;
    if (ns && name) {
        char *key = util_asprintf("%s/%s", ns, name);
        bool any = lh_table_lookup_entry(s->wanted_by_claim, key) != NULL;
        free(key);
        if (!any)
            return 0;
    }
    for (const struct ent *e = s->head; e; e = e->next) {
        if (e->done || (ns && strcmp(e->ns, ns) != 0) || (name && strcmp(e->name, name) != 0))
            continue;
        json_object *o = kobj_parse_text(e->text, strlen(e->text));
        prov_intent in;
        if (o && prov_intent_decode(o, &in) == 0) {
            fn(ud, &in);
            n++;
        }
        json_object_put(o);
    }
    return n;
}

/* ---- names -------------------------------------------------------------------------- */

/* Lower case, [a-z0-9-] kept, the rest "-"; no leading or trailing "-". */
static void sanitize(plan_buf *b, const char *s)
{
    size_t start = b->len;
    for (const char *p = s; p && *p; p++) {
        char ch = *p;
        if (ch >= 'A' && ch <= 'Z')
            ch = (char)(ch - 'A' + 'a');
        if (!((ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9')))
            ch = '-';
        if (ch == '-' && (b->len == start || b->s[b->len - 1] == '-'))
            continue;
        plan_buf_addn(b, &ch, 1);
    }
    while (b->len > start && b->s[b->len - 1] == '-')
        b->s[--b->len] = '\0';
    if (b->len == start)
        plan_buf_add(b, "x");
}

char *prov_intent_record_name(const char *driver, const char *node)
{
    plan_buf b = {0};
    sanitize(&b, driver);
    plan_buf_add(&b, "-provisioner-intents");
    if (node && *node) {
        plan_buf_add(&b, "-");
        sanitize(&b, node);
    }
    char *name = plan_buf_take(&b);
    if (strlen(name) <= PROV_INTENT_NAME_MAX)
        return name;
    /* Too long for an object name: cut, and keep names apart by a hash of
     * the whole. */
    char hash[9];
    plan_fnv32a_hex(name, hash);
    size_t keep = PROV_INTENT_NAME_MAX - 9;
    while (keep > 0 && name[keep - 1] == '-')
        keep--;
    char *out = util_asprintf("%.*s-%s", (int)keep, name, hash);
    free(name);
    return out;
}

/* ---- recovery -------------------------------------------------------------------------- */

prov_intent_action prov_intent_recover(const prov_intent_facts *f)
{
    if (f->pv_exists)
        return PROV_INTENT_DONE; /* the PV is the record now (a released PV is deleted) */
    if (f->claim_alive) {
        if (!f->claim_bound_to || !*f->claim_bound_to)
            return PROV_INTENT_SYNC;
        if (f->volume && strcmp(f->claim_bound_to, f->volume) == 0)
            return PROV_INTENT_DONE;
        /* Bound to another volume: ours may exist and nobody wants it. */
    }
    return f->class_exists ? PROV_INTENT_CLEANUP : PROV_INTENT_WAIT_CLASS;
}

const char *prov_intent_action_name(prov_intent_action a)
{
    switch (a) {
    case PROV_INTENT_SYNC:
        return "sync";
    case PROV_INTENT_DONE:
        return "done";
    case PROV_INTENT_CLEANUP:
        return "cleanup";
    case PROV_INTENT_WAIT_CLASS:
        return "wait-for-class";
    }
    return "?";
}
