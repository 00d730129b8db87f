/*
 * Prometheus metrics registry rendered in text exposition format 0.0.4,
 * byte-for-byte like client_golang so dashboards and alerts written for the
 * Go sidecars keep working: families sorted by name, labels in label-name
 * order, series sorted by label values, numbers as Go's strconv 'g' -1.
 *
 * One mutex per registry guards everything; series live in a chained hash
 * table per family, keyed by the tuple of label values.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "obs/obs.h"

typedef enum { KIND_COUNTER, KIND_GAUGE, KIND_HISTOGRAM } metric_kind;

static const char *const kind_names[] = {"counter", "gauge", "histogram"};

/* client_golang's DefBuckets, used when a histogram is given none. */
static const double default_buckets[] = {.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10};

/* One allocation: the struct, then counts, values and the values' text. */
struct series {
    struct series *next; /* hash chain */
    uint64_t hash;
    char **values; /* one per label, in declaration order */
    double value;  /* counter, gauge */
    double sum;    /* histogram */
    uint64_t count;
    uint64_t *counts; /* histogram: per bucket, not cumulative */
};

struct obs_metric {
    obs_registry *reg;
    metric_kind kind;
    char *name;
    char *help;
    size_t n_labels;
    char **labels;
    size_t *order; /* label indices sorted by name: Go's output order */
    size_t n_bounds;
    double *bounds;
    struct series **slots;
    size_t n_slots; /* power of two */
    size_t n_series;
};

struct collector {
    void (*fn)(void *ud);
    void *ud;
};

struct obs_registry {
    pthread_mutex_t mu;
    /* Held while collectors run, so removing one waits for a render in flight. */
    pthread_mutex_t collect_mu;
    obs_metric **fams; /* sorted by name */
    size_t n_fams, cap_fams;
    struct collector *coll;
    size_t n_coll, cap_coll;
};

static void *xrealloc(void *p, size_t n, size_t size)
{
    /* Out of memory is not an error a sidecar can report; same policy as
     * util_calloc. */
    void *q = reallocarray(p, n ? n : 1, size ? size : 1);
    if (q == NULL) {
        fputs("obs: out of memory\n", stderr);
        abort();
    }
    return q;
}

/* ---- text buffer ----------------------------------------------------------- */

struct buf {
    char *p;
    size_t len, cap;
};

static void buf_put(struct buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1)
            cap *= 2;
        b->p = xrealloc(b->p, cap, 1);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_puts(struct buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* Escapes backslash and newline, plus the double quote in label values. */
static void buf_escaped(struct buf *b, const char *s, bool quote)
{
    const char *run = s;
    for (; *s; s++) {
        const char *rep = NULL;
        if (*s == '\\')
            rep = "\\\\";
        else if (*s == '\n')
            rep = "\\n";
        else if (*s == '"' && quote)
            rep = "\\\"";
        if (rep) {
            buf_put(b, run, (size_t)(s - run));
            buf_puts(b, rep);
            run = s + 1;
        }
    }
    buf_put(b, run, (size_t)(s - run));
}

/*
 * Go's expfmt writeFloat: strconv.FormatFloat(v, 'g', -1, 64), i.e. the
 * shortest digits that read back as v, in exponent form when the decimal
 * exponent is < -4 or >= 6 ("1e+06", "1.5e-05"), else plain ("123456",
 * "0.0001"); "+Inf", "-Inf", "NaN"; negative zero prints as "0".
 */
static void fmt_num(double v, char out[32])
{
    if (isnan(v)) {
        strcpy(out, "NaN");
        return;
    }
    if (isinf(v)) {
        strcpy(out, v > 0 ? "+Inf" : "-Inf");
        return;
    }
    if (v == 0) {
        strcpy(out, "0");
        return;
    }
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, v);
        if (strtod(e, NULL) == v)
            break;
    }
    /* e is "[-]d[.ddd]e(+|-)xx": pull out the digits and the exponent. */
    char digits[24] = "0";
    size_t nd = 0;
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    for (; *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int e10 = (int)strtol(p + 1, NULL, 10);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;

    char *o = out;
    if (neg)
        *o++ = '-';
    if (e10 < -4 || e10 >= 6) {
        *o++ = digits[0];
        if (nd > 1) {
            *o++ = '.';
            memcpy(o, digits + 1, nd - 1);
            o += nd - 1;
        }
        strcpy(o, p); /* C's "e+06" is Go's exponent form too */
        return;
    }
    if (e10 < 0) {
        *o++ = '0';
        *o++ = '.';
        for (int i = -1; i > e10; i--)
            *o++ = '0';
        memcpy(o, digits, nd);
        o += nd;
    } else {
        size_t int_digits = (size_t)e10 + 1;
        for (size_t i = 0; i < int_digits; i++)
            *o++ = i < nd ? digits[i] : '0';
        if (nd > int_digits) {
            *o++ = '.';
            memcpy(o, digits + int_digits, nd - int_digits);
            o += nd - int_digits;
        }
    }
    *o = '\0';
}

static void buf_num(struct buf *b, double v)
{
    char n[32];
    fmt_num(v, n);
    buf_puts(b, n);
}

/* ---- validation ------------------------------------------------------------ */

static bool valid_name(const char *s, bool colon)
{
    if (s == NULL || *s == '\0' || (*s >= '0' && *s <= '9'))
        return false;
    for (; *s; s++) {
        char c = *s;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || (colon && c == ':');
        if (!ok)
            return false;
    }
    return true;
}

static bool valid_labels(const char *const *labels, size_t n, metric_kind kind)
{
    for (size_t i = 0; i < n; i++) {
        /* "__" is reserved for Prometheus itself, "le" for bucket bounds. */
        if (!valid_name(labels[i], false) || util_has_prefix(labels[i], "__") ||
            (kind == KIND_HISTOGRAM && strcmp(labels[i], "le") == 0))
            return false;
        for (size_t j = 0; j < i; j++)
            if (strcmp(labels[i], labels[j]) == 0)
                return false;
    }
    return true;
}

/* ---- families ---------------------------------------------------------------- */

/* Index of `name` in r->fams, or where it would be inserted (*found false). */
static size_t fam_find(const obs_registry *r, const char *name, bool *found)
{
    size_t lo = 0, hi = r->n_fams;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int c = strcmp(r->fams[mid]->name, name);
        if (c == 0) {
            *found = true;
            return mid;
        }
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = false;
    return lo;
}

static obs_metric *fam_get(const obs_registry *r, const char *name)
{
    bool found;
    size_t i = fam_find(r, name, &found);
    return found ? r->fams[i] : NULL;
}

static const char *const hist_suffixes[] = {"_bucket", "_sum", "_count"};

/* A histogram "x" writes x_bucket, x_sum and x_count: no other family may
 * use those names, or the exposition would be ambiguous. */
static bool collides(const obs_registry *r, const char *name, metric_kind kind)
{
    size_t len = strlen(name);
    for (size_t i = 0; i < 3; i++) {
        size_t sl = strlen(hist_suffixes[i]);
        if (kind == KIND_HISTOGRAM) {
            char *n = util_asprintf("%s%s", name, hist_suffixes[i]);
            bool taken = fam_get(r, n) != NULL;
            free(n);
            if (taken)
                return true;
        }
        if (len > sl && strcmp(name + len - sl, hist_suffixes[i]) == 0) {
            char *base = util_strdup(name);
            base[len - sl] = '\0';
            const obs_metric *m = fam_get(r, base);
            free(base);
            if (m && m->kind == KIND_HISTOGRAM)
                return true;
        }
    }
    return false;
}

static bool same_shape(const obs_metric *m, metric_kind kind, const char *const *labels,
                       size_t n_labels, const double *bounds, size_t n_bounds)
{
    if (m->kind != kind || m->n_labels != n_labels)
        return false;
    for (size_t i = 0; i < n_labels; i++)
        if (strcmp(m->labels[i], labels[i]) != 0)
            return false;
    if (kind != KIND_HISTOGRAM)
        return true;
    if (m->n_bounds != n_bounds)
        return false;
    return n_bounds == 0 || memcmp(m->bounds, bounds, n_bounds * sizeof(*bounds)) == 0;
}

static struct series *series_lookup(obs_metric *m, const char *const *values, bool create);

static obs_metric *metric_new(obs_registry *r, metric_kind kind, const char *name, const char *help,
                              const char *const *labels, const double *bounds, size_t n_bounds)
{
    if (r == NULL || !valid_name(name, true))
        return NULL;
    size_t n_labels = 0;
    while (labels && labels[n_labels])
        n_labels++;
    if (!valid_labels(labels, n_labels, kind))
        return NULL;
    if (kind == KIND_HISTOGRAM) {
        if (bounds == NULL || n_bounds == 0) {
            bounds = default_buckets;
            n_bounds = sizeof(default_buckets) / sizeof(default_buckets[0]);
        }
        /* +Inf is implicit (client_golang drops an explicit one). */
        if (isinf(bounds[n_bounds - 1]) && bounds[n_bounds - 1] > 0)
            n_bounds--;
        for (size_t i = 0; i < n_bounds; i++)
            if (isnan(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
                return NULL;
    }

    pthread_mutex_lock(&r->mu);
    bool found;
    size_t at = fam_find(r, name, &found);
    if (found) {
        obs_metric *m = r->fams[at];
        pthread_mutex_unlock(&r->mu);
        return same_shape(m, kind, labels, n_labels, bounds, n_bounds) ? m : NULL;
    }
    if (collides(r, name, kind)) {
        pthread_mutex_unlock(&r->mu);
        return NULL;
    }

    obs_metric *m = util_calloc(1, sizeof(*m));
    m->reg = r;
    m->kind = kind;
    m->name = util_strdup(name);
    m->help = util_strdup(help ? help : "");
    m->n_labels = n_labels;
    m->labels = util_calloc(n_labels, sizeof(*m->labels));
    m->order = util_calloc(n_labels, sizeof(*m->order));
    for (size_t i = 0; i < n_labels; i++) {
        m->labels[i] = util_strdup(labels[i]);
        /* Insertion sort: label lists are short. */
        size_t j = i;
        while (j > 0 && strcmp(labels[m->order[j - 1]], labels[i]) > 0) {
            m->order[j] = m->order[j - 1];
            j--;
        }
        m->order[j] = i;
    }
    if (kind == KIND_HISTOGRAM) {
        m->n_bounds = n_bounds;
        m->bounds = util_calloc(n_bounds, sizeof(*m->bounds));
        if (n_bounds)
            memcpy(m->bounds, bounds, n_bounds * sizeof(*bounds));
    }
    m->n_slots = 8;
    m->slots = util_calloc(m->n_slots, sizeof(void *));
    /* Like client_golang, a metric without labels shows 0 from the start. */
    if (n_labels == 0)
        series_lookup(m, NULL, true);

    if (r->n_fams == r->cap_fams) {
        r->cap_fams = r->cap_fams ? 2 * r->cap_fams : 16;
        r->fams = xrealloc(r->fams, r->cap_fams, sizeof(void *));
    }
    memmove(r->fams + at + 1, r->fams + at, (r->n_fams - at) * sizeof(void *));
    r->fams[at] = m;
    r->n_fams++;
    pthread_mutex_unlock(&r->mu);
    return m;
}

obs_metric *obs_counter_new(obs_registry *r, const char *name, const char *help,
                            const char *const *labels)
{
    return metric_new(r, KIND_COUNTER, name, help, labels, NULL, 0);
}

obs_metric *obs_gauge_new(obs_registry *r, const char *name, const char *help,
                          const char *const *labels)
{
    return metric_new(r, KIND_GAUGE, name, help, labels, NULL, 0);
}

obs_metric *obs_histogram_new(obs_registry *r, const char *name, const char *help,
                              const char *const *labels, const double *buckets, size_t n_buckets)
{
    return metric_new(r, KIND_HISTOGRAM, name, help, labels, buckets, n_buckets);
}

/* ---- series ------------------------------------------------------------------ */

static const char *value_at(const char *const *values, size_t i)
{
    /* A missing tuple or entry reads as the empty label value. */
    return values && values[i] ? values[i] : "";
}

static uint64_t hash_values(const obs_metric *m, const char *const *values)
{
    uint64_t h = UTIL_HASH_INIT;
    for (size_t i = 0; i < m->n_labels; i++)
        h = util_hash_byte(util_hash_str(h, value_at(values, i)), 0xff);
    return h;
}

static bool same_values(const obs_metric *m, const struct series *s, const char *const *values)
{
    for (size_t i = 0; i < m->n_labels; i++)
        if (strcmp(s->values[i], value_at(values, i)) != 0)
            return false;
    return true;
}

static void grow_slots(obs_metric *m)
{
    size_t n = m->n_slots * 2;
    struct series **slots = util_calloc(n, sizeof(void *));
    for (size_t i = 0; i < m->n_slots; i++) {
        struct series *s = m->slots[i];
        while (s) {
            struct series *next = s->next;
            size_t at = (size_t)(s->hash & (n - 1));
            s->next = slots[at];
            slots[at] = s;
            s = next;
        }
    }
    free(m->slots);
    m->slots = slots;
    m->n_slots = n;
}

/* Called with the registry lock held. */
static struct series *series_lookup(obs_metric *m, const char *const *values, bool create)
{
    uint64_t h = hash_values(m, values);
    struct series *s = m->slots[h & (m->n_slots - 1)];
    for (; s; s = s->next)
        if (s->hash == h && same_values(m, s, values))
            return s;
    if (!create)
        return NULL;
    if (m->n_series >= m->n_slots)
        grow_slots(m);
    /* One allocation holds the series, its bucket counts, its label values
     * and their text: series appear during a burst and live on, and each
     * allocation left among the burst's freed ones pins a page. */
    size_t n_counts = m->kind == KIND_HISTOGRAM ? m->n_bounds : 0;
    size_t size = sizeof(*s) + n_counts * sizeof(uint64_t) + m->n_labels * sizeof(char *);
    for (size_t i = 0; i < m->n_labels; i++)
        size += strlen(value_at(values, i)) + 1;
    s = util_calloc(1, size);
    s->hash = h;
    s->counts = n_counts ? (uint64_t *)(s + 1) : NULL;
    s->values = (char **)((uint64_t *)(s + 1) + n_counts);
    char *text = (char *)(s->values + m->n_labels);
    for (size_t i = 0; i < m->n_labels; i++) {
        size_t len = strlen(value_at(values, i)) + 1;
        memcpy(text, value_at(values, i), len);
        s->values[i] = text;
        text += len;
    }
    size_t at = (size_t)(h & (m->n_slots - 1));
    s->next = m->slots[at];
    m->slots[at] = s;
    m->n_series++;
    return s;
}

static void update(obs_metric *m, metric_kind kind, const char *const *values, double v, bool set)
{
    if (m == NULL || m->kind != kind)
        return;
    pthread_mutex_lock(&m->reg->mu);
    struct series *s = series_lookup(m, values, true);
    if (set)
        s->value = v;
    else
        s->value += v;
    pthread_mutex_unlock(&m->reg->mu);
}

void obs_counter_add(obs_metric *m, const char *const *values, double v)
{
    if (v < 0) {
        /* A counter only goes up; client_golang panics here. */
        obs_warn("metrics: ignoring negative increment %g of counter %s", v,
                 m ? m->name : "(null)");
        return;
    }
    update(m, KIND_COUNTER, values, v, false);
}

void obs_gauge_set(obs_metric *m, const char *const *values, double v)
{
    update(m, KIND_GAUGE, values, v, true);
}

void obs_gauge_add(obs_metric *m, const char *const *values, double v)
{
    update(m, KIND_GAUGE, values, v, false);
}

void obs_histogram_observe(obs_metric *m, const char *const *values, double v)
{
    if (m == NULL || m->kind != KIND_HISTOGRAM)
        return;
    /* First bucket with v <= bound; NaN and values above all bounds only
     * count towards +Inf, as in client_golang. */
    size_t lo = 0, hi = m->n_bounds;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->bounds[mid] >= v)
            hi = mid;
        else
            lo = mid + 1;
    }
    pthread_mutex_lock(&m->reg->mu);
    struct series *s = series_lookup(m, values, true);
    if (lo < m->n_bounds)
        s->counts[lo]++;
    s->count++;
    s->sum += v;
    pthread_mutex_unlock(&m->reg->mu);
}

void obs_metric_remove(obs_metric *m, const char *const *values)
{
    if (m == NULL)
        return;
    pthread_mutex_lock(&m->reg->mu);
    uint64_t h = hash_values(m, values);
    for (struct series **pp = &m->slots[h & (m->n_slots - 1)]; *pp; pp = &(*pp)->next) {
        struct series *s = *pp;
        if (s->hash == h && same_values(m, s, values)) {
            *pp = s->next;
            free(s);
            m->n_series--;
            break;
        }
    }
    pthread_mutex_unlock(&m->reg->mu);
}

double obs_metric_value(obs_metric *m, const char *const *values)
{
    if (m == NULL)
        return 0;
    pthread_mutex_lock(&m->reg->mu);
    const struct series *s = series_lookup(m, values, false);
    /* For a histogram, the number of observations. */
    double v = s == NULL ? 0 : m->kind == KIND_HISTOGRAM ? (double)s->count : s->value;
    pthread_mutex_unlock(&m->reg->mu);
    return v;
}

/* ---- registry ---------------------------------------------------------------- */

obs_registry *obs_registry_new(void)
{
    obs_registry *r = util_calloc(1, sizeof(*r));
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_init(&r->collect_mu, NULL);
    return r;
}

static void metric_free(obs_metric *m)
{
    for (size_t i = 0; i < m->n_slots; i++) {
        struct series *s = m->slots[i];
        while (s) {
            struct series *next = s->next;
            free(s);
            s = next;
        }
    }
    free(m->slots);
    for (size_t i = 0; i < m->n_labels; i++)
        free(m->labels[i]);
    free(m->labels);
    free(m->order);
    free(m->bounds);
    free(m->name);
    free(m->help);
    free(m);
}

void obs_registry_free(obs_registry *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->n_fams; i++)
        metric_free(r->fams[i]);
    free(r->fams);
    free(r->coll);
    pthread_mutex_destroy(&r->collect_mu);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

void obs_registry_on_render(obs_registry *r, void (*fn)(void *ud), void *ud)
{
    if (r == NULL || fn == NULL)
        return;
    pthread_mutex_lock(&r->mu);
    if (r->n_coll == r->cap_coll) {
        r->cap_coll = r->cap_coll ? 2 * r->cap_coll : 4;
        r->coll = xrealloc(r->coll, r->cap_coll, sizeof(*r->coll));
    }
    r->coll[r->n_coll++] = (struct collector){fn, ud};
    pthread_mutex_unlock(&r->mu);
}

void obs_registry_off_render(obs_registry *r, void (*fn)(void *ud), void *ud)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->collect_mu);
    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->n_coll; i++) {
        if (r->coll[i].fn == fn && r->coll[i].ud == ud) {
            memmove(&r->coll[i], &r->coll[i + 1], (r->n_coll - i - 1) * sizeof(*r->coll));
            r->n_coll--;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    pthread_mutex_unlock(&r->collect_mu);
}

/* client_golang's order: label values compared in label-name order. */
static int series_cmp(const void *a, const void *b, void *arg)
{
    const obs_metric *m = arg;
    const struct series *x = *(struct series *const *)a;
    const struct series *y = *(struct series *const *)b;
    for (size_t i = 0; i < m->n_labels; i++) {
        int c = strcmp(x->values[m->order[i]], y->values[m->order[i]]);
        if (c)
            return c;
    }
    return 0;
}

/* name{labels[,le="bound"]} value */
static void put_sample(struct buf *b, const obs_metric *m, const char *suffix,
                       const struct series *s, const double *le, double v)
{
    buf_puts(b, m->name);
    buf_puts(b, suffix);
    if (m->n_labels || le) {
        buf_puts(b, "{");
        for (size_t i = 0; i < m->n_labels; i++) {
            size_t k = m->order[i];
            if (i)
                buf_puts(b, ",");
            buf_puts(b, m->labels[k]);
            buf_puts(b, "=\"");
            buf_escaped(b, s->values[k], true);
            buf_puts(b, "\"");
        }
        if (le) {
            buf_puts(b, m->n_labels ? ",le=\"" : "le=\"");
            buf_num(b, *le);
            buf_puts(b, "\"");
        }
        buf_puts(b, "}");
    }
    buf_puts(b, " ");
    buf_num(b, v);
    buf_puts(b, "\n");
}

static void render_family(struct buf *b, obs_metric *m)
{
    struct series **all = util_calloc(m->n_series, sizeof(void *));
    size_t n = 0;
    for (size_t i = 0; i < m->n_slots; i++)
        for (struct series *s = m->slots[i]; s; s = s->next)
            all[n++] = s;
    qsort_r(all, n, sizeof(void *), series_cmp, m);

    buf_puts(b, "# HELP ");
    buf_puts(b, m->name);
    buf_puts(b, " ");
    buf_escaped(b, m->help, false);
    buf_puts(b, "\n# TYPE ");
    buf_puts(b, m->name);
    buf_puts(b, " ");
    buf_puts(b, kind_names[m->kind]);
    buf_puts(b, "\n");
    static const double inf = INFINITY;
    for (size_t i = 0; i < n; i++) {
        const struct series *s = all[i];
        if (m->kind != KIND_HISTOGRAM) {
            put_sample(b, m, "", s, NULL, s->value);
            continue;
        }
        uint64_t cum = 0;
        for (size_t k = 0; k < m->n_bounds; k++) {
            cum += s->counts[k];
            put_sample(b, m, "_bucket", s, &m->bounds[k], (double)cum);
        }
        put_sample(b, m, "_bucket", s, &inf, (double)s->count);
        put_sample(b, m, "_sum", s, NULL, s->sum);
        put_sample(b, m, "_count", s, NULL, (double)s->count);
    }
    free(all);
}

char *obs_registry_render(obs_registry *r, size_t *len)
{
    struct buf b = {0};
    buf_put(&b, "", 0);
    if (r == NULL) {
        if (len)
            *len = 0;
        return b.p;
    }
    /* Collectors set gauges, which takes the lock: run them without it, on
     * a copy so that one registering another cannot invalidate the loop. */
    pthread_mutex_lock(&r->collect_mu);
    pthread_mutex_lock(&r->mu);
    size_t n = r->n_coll;
    struct collector *coll = util_calloc(n, sizeof(*coll));
    if (n)
        memcpy(coll, r->coll, n * sizeof(*coll));
    pthread_mutex_unlock(&r->mu);
    for (size_t i = 0; i < n; i++)
        coll[i].fn(coll[i].ud);
    pthread_mutex_unlock(&r->collect_mu);
    free(coll);

    pthread_mutex_lock(&r->mu);
    for (size_t i = 0; i < r->n_fams; i++)
        /* client_golang leaves out a family with no series at all. */
        if (r->fams[i]->n_series)
            render_family(&b, r->fams[i]);
    pthread_mutex_unlock(&r->mu);
    if (len)
        *len = b.len;
    return b.p;
}
