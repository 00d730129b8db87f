/*
 * Metrics registry and diagnostics HTTP server: exact exposition text
 * (golden strings), Go-compatible number formatting, concurrency, collectors,
 * registration rules; the server over real sockets with libcurl. A small
 * Prometheus text parser checks the structural rules on every render.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <curl/curl.h>

#include "obs/obs.h"

/* ---- a small Prometheus text parser ------------------------------------------ */

/* Reads a label value with its escapes into out; returns the char after the
 * closing quote. */
static const char *parse_label_value(const char *p, char *out, size_t cap)
{
    size_t n = 0;
    assert_true(*p == '"');
    for (p++; *p != '"'; p++) {
        assert_true(*p != '\0' && *p != '\n');
        char c = *p;
        if (c == '\\') {
            p++;
            assert_true(*p == '\\' || *p == '"' || *p == 'n');
            c = *p == 'n' ? '\n' : *p;
        }
        assert_true(n + 1 < cap);
        out[n++] = c;
    }
    out[n] = '\0';
    return p + 1;
}

struct hist_state {
    char key[1024]; /* labels without le, of the series being read */
    double last_le;
    double last_cum;
    bool inf_seen;
    double inf_count;
    bool sum_seen;
};

/*
 * Checks that every family has HELP then TYPE before its samples, families
 * are unique and sorted, every sample belongs to the current family, label
 * syntax is valid, and histogram buckets are cumulative, increasing in le,
 * end with +Inf and +Inf equals _count. Returns the number of families.
 */
static int prom_check(const char *text)
{
    char fam[256] = "", type[32] = "", help_for[256] = "";
    int n_fams = 0;
    struct hist_state hs = {0};
    bool in_series = false;

    assert_true(text[0] == '\0' || text[strlen(text) - 1] == '\n');
    for (const char *line = text; *line;) {
        const char *eol = strchr(line, '\n');
        assert_non_null(eol);
        char buf[4096];
        size_t len = (size_t)(eol - line);
        assert_true(len < sizeof(buf));
        memcpy(buf, line, len);
        buf[len] = '\0';
        line = eol + 1;

        if (strncmp(buf, "# HELP ", 7) == 0) {
            assert_false(in_series); /* previous histogram series finished */
            char name[256];
            assert_int_equal(sscanf(buf + 7, "%255s", name), 1);
            assert_true(fam[0] == '\0' || strcmp(fam, name) < 0); /* sorted, unique */
            strcpy(help_for, name);
            continue;
        }
        if (strncmp(buf, "# TYPE ", 7) == 0) {
            char name[256];
            assert_int_equal(sscanf(buf + 7, "%255s %31s", name, type), 2);
            assert_string_equal(name, help_for); /* HELP came first */
            assert_true(strcmp(type, "counter") == 0 || strcmp(type, "gauge") == 0 ||
                        strcmp(type, "histogram") == 0);
            strcpy(fam, name);
            n_fams++;
            continue;
        }
        assert_true(buf[0] != '#' && buf[0] != '\0');
        assert_true(fam[0] != '\0');

        /* name{labels} value */
        char *p = buf;
        size_t nl = strcspn(p, "{ ");
        char name[256];
        assert_true(nl > 0 && nl < sizeof(name));
        memcpy(name, p, nl);
        name[nl] = '\0';
        p += nl;
        char key[1024] = "";
        double le = NAN;
        if (*p == '{') {
            p++;
            while (*p != '}') {
                size_t kl = strcspn(p, "=");
                char lname[128];
                assert_true(kl > 0 && kl < sizeof(lname));
                memcpy(lname, p, kl);
                lname[kl] = '\0';
                char val[512];
                p = (char *)parse_label_value(p + kl + 1, val, sizeof(val));
                if (strcmp(lname, "le") == 0) {
                    char *end;
                    le = strtod(val, &end);
                    assert_true(*end == '\0');
                } else {
                    assert_true(strlen(key) + kl + strlen(val) + 4 < sizeof(key));
                    strcat(key, lname);
                    strcat(key, "=");
                    strcat(key, val);
                    strcat(key, ";");
                }
                if (*p == ',')
                    p++;
                else
                    assert_true(*p == '}');
            }
            p++;
        }
        assert_true(*p == ' ');
        char *end;
        double v = strtod(p + 1, &end);
        assert_true(*end == '\0');

        if (strcmp(type, "histogram") != 0) {
            assert_string_equal(name, fam);
            continue;
        }
        size_t fl = strlen(fam);
        assert_memory_equal(name, fam, fl);
        const char *suffix = name + fl;
        if (strcmp(suffix, "_bucket") == 0) {
            assert_false(isnan(le));
            if (!in_series || strcmp(key, hs.key) != 0) {
                assert_false(in_series);
                memset(&hs, 0, sizeof(hs));
                strcpy(hs.key, key);
                hs.last_le = -INFINITY;
                in_series = true;
            }
            assert_false(hs.inf_seen);
            assert_true(le > hs.last_le);
            assert_true(v >= hs.last_cum); /* cumulative */
            hs.last_le = le;
            hs.last_cum = v;
            if (isinf(le)) {
                hs.inf_seen = true;
                hs.inf_count = v;
            }
        } else if (strcmp(suffix, "_sum") == 0) {
            assert_true(in_series && hs.inf_seen && strcmp(key, hs.key) == 0);
            hs.sum_seen = true;
        } else if (strcmp(suffix, "_count") == 0) {
            assert_true(in_series && hs.inf_seen && hs.sum_seen && strcmp(key, hs.key) == 0);
            assert_true(v == hs.inf_count); /* +Inf bucket == _count */
            in_series = false;
        } else {
            fail_msg("sample %s does not belong to histogram %s", name, fam);
        }
    }
    assert_false(in_series);
    return n_fams;
}

/* Renders, checks the structure and returns the text (caller frees). */
static char *render(obs_registry *r)
{
    size_t len = 0;
    char *s = obs_registry_render(r, &len);
    assert_non_null(s);
    assert_int_equal(len, strlen(s));
    prom_check(s);
    return s;
}

static void assert_render(obs_registry *r, const char *want)
{
    char *got = render(r);
    assert_string_equal(got, want);
    free(got);
}

/* ---- exposition text --------------------------------------------------------- */

static void test_counter_plain(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    obs_metric *c = obs_counter_new(r, "requests_total", "Requests served.", NULL);
    assert_non_null(c);
    /* A metric without labels shows 0 before first use, as in Go. */
    assert_render(r, "# HELP requests_total Requests served.\n"
                     "# TYPE requests_total counter\n"
                     "requests_total 0\n");
    obs_counter_add(c, NULL, 1);
    obs_counter_add(c, NULL, 0.5);
    assert_render(r, "# HELP requests_total Requests served.\n"
                     "# TYPE requests_total counter\n"
                     "requests_total 1.5\n");
    obs_counter_add(c, NULL, -1); /* ignored: counters only go up */
    assert_true(obs_metric_value(c, NULL) == 1.5);
    obs_registry_free(r);
}

static void test_counter_labels(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    /* Declared out of name order: output is in label-name order like Go. */
    const char *labels[] = {"method", "code", NULL};
    obs_metric *c = obs_counter_new(r, "http_requests_total", "HTTP requests.", labels);
    assert_non_null(c);
    /* A labelled family with no series yet is left out. */
    assert_render(r, "");

    obs_counter_add(c, (const char *[]){"POST", "500"}, 1);
    obs_counter_add(c, (const char *[]){"GET", "404"}, 2);
    obs_counter_add(c, (const char *[]){"GET", "200"}, 3);
    obs_counter_add(c, (const char *[]){"GET", "200"}, 4);
    assert_render(r, "# HELP http_requests_total HTTP requests.\n"
                     "# TYPE http_requests_total counter\n"
                     "http_requests_total{code=\"200\",method=\"GET\"} 7\n"
                     "http_requests_total{code=\"404\",method=\"GET\"} 2\n"
                     "http_requests_total{code=\"500\",method=\"POST\"} 1\n");
    assert_true(obs_metric_value(c, (const char *[]){"GET", "200"}) == 7);
    assert_true(obs_metric_value(c, (const char *[]){"PUT", "200"}) == 0);
    obs_registry_free(r);
}

static void test_gauge(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    obs_metric *g = obs_gauge_new(r, "queue_depth", "Items waiting.", (const char *[]){NULL});
    const char *ql[] = {"name", NULL};
    obs_metric *gl = obs_gauge_new(r, "a_gauge", "", ql);
    assert_non_null(g);
    assert_non_null(gl);
    obs_gauge_set(g, NULL, 5);
    obs_gauge_add(g, NULL, -7.25);
    obs_gauge_set(gl, (const char *[]){"b"}, 1);
    obs_gauge_set(gl, (const char *[]){"a"}, -1);
    obs_gauge_add(gl, (const char *[]){"c"}, 3);
    assert_render(r, "# HELP a_gauge \n"
                     "# TYPE a_gauge gauge\n"
                     "a_gauge{name=\"a\"} -1\n"
                     "a_gauge{name=\"b\"} 1\n"
                     "a_gauge{name=\"c\"} 3\n"
                     "# HELP queue_depth Items waiting.\n"
                     "# TYPE queue_depth gauge\n"
                     "queue_depth -2.25\n");
    /* Operations of another type are ignored. */
    obs_counter_add(g, NULL, 1);
    obs_histogram_observe(g, NULL, 1);
    assert_true(obs_metric_value(g, NULL) == -2.25);
    obs_registry_free(r);
}

static void test_histogram(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    const double b[] = {0.1, 0.5, 1};
    obs_metric *h = obs_histogram_new(r, "op_seconds", "Operation time.", NULL, b, 3);
    const char *ml[] = {"method", NULL};
    obs_metric *hl = obs_histogram_new(r, "call_seconds", "Call time.", ml, b, 3);
    assert_non_null(h);
    assert_non_null(hl);
    assert_render(r, "# HELP op_seconds Operation time.\n"
                     "# TYPE op_seconds histogram\n"
                     "op_seconds_bucket{le=\"0.1\"} 0\n"
                     "op_seconds_bucket{le=\"0.5\"} 0\n"
                     "op_seconds_bucket{le=\"1\"} 0\n"
                     "op_seconds_bucket{le=\"+Inf\"} 0\n"
                     "op_seconds_sum 0\n"
                     "op_seconds_count 0\n");
    obs_histogram_observe(h, NULL, 0.25);
    obs_histogram_observe(h, NULL, 0.5); /* le is inclusive */
    obs_histogram_observe(h, NULL, 0.5);
    obs_histogram_observe(h, NULL, 2);
    obs_histogram_observe(hl, (const char *[]){"Probe"}, 0.01);
    obs_histogram_observe(hl, (const char *[]){"Attach"}, 7);
    assert_render(r, "# HELP call_seconds Call time.\n"
                     "# TYPE call_seconds histogram\n"
                     "call_seconds_bucket{method=\"Attach\",le=\"0.1\"} 0\n"
                     "call_seconds_bucket{method=\"Attach\",le=\"0.5\"} 0\n"
                     "call_seconds_bucket{method=\"Attach\",le=\"1\"} 0\n"
                     "call_seconds_bucket{method=\"Attach\",le=\"+Inf\"} 1\n"
                     "call_seconds_sum{method=\"Attach\"} 7\n"
                     "call_seconds_count{method=\"Attach\"} 1\n"
                     "call_seconds_bucket{method=\"Probe\",le=\"0.1\"} 1\n"
                     "call_seconds_bucket{method=\"Probe\",le=\"0.5\"} 1\n"
                     "call_seconds_bucket{method=\"Probe\",le=\"1\"} 1\n"
                     "call_seconds_bucket{method=\"Probe\",le=\"+Inf\"} 1\n"
                     "call_seconds_sum{method=\"Probe\"} 0.01\n"
                     "call_seconds_count{method=\"Probe\"} 1\n"
                     "# HELP op_seconds Operation time.\n"
                     "# TYPE op_seconds histogram\n"
                     "op_seconds_bucket{le=\"0.1\"} 0\n"
                     "op_seconds_bucket{le=\"0.5\"} 3\n"
                     "op_seconds_bucket{le=\"1\"} 3\n"
                     "op_seconds_bucket{le=\"+Inf\"} 4\n"
                     "op_seconds_sum 3.25\n"
                     "op_seconds_count 4\n");
    assert_true(obs_metric_value(h, NULL) == 4); /* a histogram's value is its count */
    obs_registry_free(r);
}

static void test_histogram_buckets(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    /* No buckets: client_golang's DefBuckets. */
    obs_metric *d = obs_histogram_new(r, "d", "h", NULL, NULL, 0);
    assert_non_null(d);
    /* An explicit +Inf bound is implicit anyway and dropped. */
    const double b[] = {1, INFINITY};
    obs_metric *e = obs_histogram_new(r, "e", "h", NULL, b, 2);
    assert_non_null(e);
    obs_histogram_observe(e, NULL, NAN); /* counts only towards +Inf */
    obs_histogram_observe(e, NULL, 1e6);
    assert_true(obs_metric_value(e, NULL) == 2); /* the count */
    assert_render(r, "# HELP d h\n"
                     "# TYPE d histogram\n"
                     "d_bucket{le=\"0.005\"} 0\n"
                     "d_bucket{le=\"0.01\"} 0\n"
                     "d_bucket{le=\"0.025\"} 0\n"
                     "d_bucket{le=\"0.05\"} 0\n"
                     "d_bucket{le=\"0.1\"} 0\n"
                     "d_bucket{le=\"0.25\"} 0\n"
                     "d_bucket{le=\"0.5\"} 0\n"
                     "d_bucket{le=\"1\"} 0\n"
                     "d_bucket{le=\"2.5\"} 0\n"
                     "d_bucket{le=\"5\"} 0\n"
                     "d_bucket{le=\"10\"} 0\n"
                     "d_bucket{le=\"+Inf\"} 0\n"
                     "d_sum 0\n"
                     "d_count 0\n"
                     "# HELP e h\n"
                     "# TYPE e histogram\n"
                     "e_bucket{le=\"1\"} 0\n"
                     "e_bucket{le=\"+Inf\"} 2\n"
                     "e_sum NaN\n"
                     "e_count 2\n");
    obs_registry_free(r);
}

static void test_escaping(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    const char *l[] = {"path", NULL};
    obs_metric *g = obs_gauge_new(r, "esc", "Back\\slash, \"quotes\" and\nnewline.", l);
    obs_gauge_set(g, (const char *[]){"C:\\dir \"x\"\nnext"}, 1);
    obs_gauge_set(g, (const char *[]){""}, 2);
    obs_gauge_set(g, (const char *[]){"ünïcode"}, 3);
    assert_render(r, "# HELP esc Back\\\\slash, \"quotes\" and\\nnewline.\n"
                     "# TYPE esc gauge\n"
                     "esc{path=\"\"} 2\n"
                     "esc{path=\"C:\\\\dir \\\"x\\\"\\nnext\"} 1\n"
                     "esc{path=\"ünïcode\"} 3\n");
    obs_registry_free(r);
}

/* Expected strings are Go's strconv.FormatFloat(v, 'g', -1, 64). */
static void test_number_format(void **state)
{
    (void)state;
    static const struct {
        double v;
        const char *want;
    } cases[] = {
        {0, "0"},
        {-0.0, "0"},
        {1, "1"},
        {-1, "-1"},
        {42, "42"},
        {100, "100"},
        {100000, "100000"},
        {123456, "123456"},
        {999999, "999999"},
        {999999.9, "999999.9"},
        {1e6, "1e+06"},
        {1234567, "1.234567e+06"},
        {3e6, "3e+06"},
        {1e21, "1e+21"},
        {1e100, "1e+100"},
        {4503599627370496.0, "4.503599627370496e+15"},
        {0.5, "0.5"},
        {0.1, "0.1"},
        {0.3, "0.3"},
        {0.1 + 0.2, "0.30000000000000004"},
        {1.0 / 3, "0.3333333333333333"},
        {-2.5, "-2.5"},
        {12345.678, "12345.678"},
        {123456.7, "123456.7"},
        {0.0001, "0.0001"},
        {0.000123, "0.000123"},
        {0.00001, "1e-05"},
        {1.5e-5, "1.5e-05"},
        {2.5e-7, "2.5e-07"},
        {-1e-300, "-1e-300"},
        {DBL_MAX, "1.7976931348623157e+308"},
        {5e-324, "5e-324"},
        {INFINITY, "+Inf"},
        {-INFINITY, "-Inf"},
        {NAN, "NaN"},
    };
    obs_registry *r = obs_registry_new();
    obs_metric *g = obs_gauge_new(r, "g", "h", NULL);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        obs_gauge_set(g, NULL, cases[i].v);
        char *got = obs_registry_render(r, NULL);
        char want[128];
        snprintf(want, sizeof(want), "# HELP g h\n# TYPE g gauge\ng %s\n", cases[i].want);
        if (strcmp(got, want) != 0)
            fail_msg("case %zu: %.17g rendered as %s, want %s", i, cases[i].v, got, want);
        free(got);
    }
    obs_registry_free(r);
}

static void test_many_series(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    const char *l[] = {"id", NULL};
    obs_metric *c = obs_counter_new(r, "many_total", "h", l);
    enum { N = 2000 };
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof(id), "%05d", (i * 7919) % N); /* scrambled insertion */
        obs_counter_add(c, (const char *[]){id}, i % 3 + 1);
    }
    for (int i = 0; i < N; i++) {
        char id[16];
        snprintf(id, sizeof(id), "%05d", (i * 7919) % N);
        assert_true(obs_metric_value(c, (const char *[]){id}) == i % 3 + 1);
    }
    char *text = render(r);
    /* Sorted by label value. */
    const char *p = text;
    for (int i = 0; i < N; i++) {
        char want[64];
        snprintf(want, sizeof(want), "many_total{id=\"%05d\"} ", i);
        p = strstr(p, want);
        assert_non_null(p);
    }
    free(text);
    for (int i = 0; i < N; i += 2) {
        char id[16];
        snprintf(id, sizeof(id), "%05d", i);
        obs_metric_remove(c, (const char *[]){id});
    }
    text = render(r);
    assert_null(strstr(text, "{id=\"00000\"}"));
    assert_non_null(strstr(text, "{id=\"00001\"}"));
    free(text);
    obs_registry_free(r);
}

/* ---- concurrency ------------------------------------------------------------- */

struct worker {
    obs_registry *r;
    obs_metric *c, *g, *h;
    int id;
};

enum { THREADS = 8, ITERS = 20000 };

static void *worker_main(void *arg)
{
    const struct worker *w = arg;
    char id[8];
    snprintf(id, sizeof(id), "w%d", w->id % 2);
    for (int i = 0; i < ITERS; i++) {
        obs_counter_add(w->c, (const char *[]){"shared"}, 1);
        obs_counter_add(w->c, (const char *[]){id}, 0.25); /* exact in binary */
        obs_gauge_add(w->g, NULL, (i & 1) ? -1 : 2);
        obs_histogram_observe(w->h, NULL, (double)(i % 4));
        if (i % 5000 == 0)
            free(obs_registry_render(w->r, NULL));
    }
    return NULL;
}

static void test_concurrent_updates(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    const char *l[] = {"who", NULL};
    const double b[] = {0.5, 1.5, 2.5};
    struct worker w[THREADS];
    pthread_t t[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){r, obs_counter_new(r, "c_total", "h", l),
                               obs_gauge_new(r, "g", "h", NULL),
                               obs_histogram_new(r, "h", "h", NULL, b, 3), i};
        assert_non_null(w[i].c);
        assert_non_null(w[i].h);
        assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    assert_true(obs_metric_value(w[0].c, (const char *[]){"shared"}) == THREADS * ITERS);
    assert_true(obs_metric_value(w[0].c, (const char *[]){"w0"}) == THREADS * ITERS * 0.25 / 2);
    assert_true(obs_metric_value(w[0].c, (const char *[]){"w1"}) == THREADS * ITERS * 0.25 / 2);
    assert_true(obs_metric_value(w[0].g, NULL) == THREADS * ITERS / 2.0);
    assert_true(obs_metric_value(w[0].h, NULL) == THREADS * ITERS);
    char *text = render(r);
    char want[256];
    /* Observations 0,1,2,3 in equal shares: 1/4 per bucket, sum 1.5 per op. */
    snprintf(want, sizeof(want),
             "h_bucket{le=\"0.5\"} %d\nh_bucket{le=\"1.5\"} %d\nh_bucket{le=\"2.5\"} %d\n"
             "h_bucket{le=\"+Inf\"} %d\nh_sum %d\nh_count %d\n",
             THREADS * ITERS / 4, THREADS * ITERS / 2, THREADS * ITERS / 4 * 3, THREADS * ITERS,
             THREADS * ITERS / 2 * 3, THREADS * ITERS);
    assert_non_null(strstr(text, want));
    free(text);
    obs_registry_free(r);
}

/* ---- collectors ----------------------------------------------------------------- */

struct collect_ctx {
    obs_metric *depth;
    obs_metric *calls;
    int n;
};

static void collect(void *ud)
{
    struct collect_ctx *c = ud;
    c->n++;
    /* Runs outside the registry lock: reading and setting is fine. */
    obs_gauge_set(c->depth, NULL, obs_metric_value(c->calls, NULL) * 10);
    obs_counter_add(c->calls, NULL, 1);
}

static void test_on_render(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    struct collect_ctx c = {obs_gauge_new(r, "depth", "Depth.", NULL),
                            obs_counter_new(r, "collects_total", "Collector runs.", NULL), 0};
    obs_registry_on_render(r, collect, &c);
    obs_registry_on_render(r, NULL, NULL); /* ignored */
    assert_render(r, "# HELP collects_total Collector runs.\n"
                     "# TYPE collects_total counter\n"
                     "collects_total 1\n"
                     "# HELP depth Depth.\n"
                     "# TYPE depth gauge\n"
                     "depth 0\n");
    assert_render(r, "# HELP collects_total Collector runs.\n"
                     "# TYPE collects_total counter\n"
                     "collects_total 2\n"
                     "# HELP depth Depth.\n"
                     "# TYPE depth gauge\n"
                     "depth 10\n");
    assert_int_equal(c.n, 2);
    obs_registry_free(r);
}

/* ---- remove ---------------------------------------------------------------------- */

static void test_remove(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    const char *l[] = {"pv", NULL};
    obs_metric *g = obs_gauge_new(r, "pv_bytes", "PV size.", l);
    obs_gauge_set(g, (const char *[]){"pv-a"}, 1);
    obs_gauge_set(g, (const char *[]){"pv-b"}, 2);
    obs_metric_remove(g, (const char *[]){"pv-a"});
    obs_metric_remove(g, (const char *[]){"pv-zzz"}); /* absent: no-op */
    assert_true(obs_metric_value(g, (const char *[]){"pv-a"}) == 0);
    assert_render(r, "# HELP pv_bytes PV size.\n"
                     "# TYPE pv_bytes gauge\n"
                     "pv_bytes{pv=\"pv-b\"} 2\n");
    obs_metric_remove(g, (const char *[]){"pv-b"});
    assert_render(r, "");                          /* no series left: the family goes too */
    obs_gauge_add(g, (const char *[]){"pv-a"}, 5); /* a new series starts at 0 */
    assert_render(r, "# HELP pv_bytes PV size.\n"
                     "# TYPE pv_bytes gauge\n"
                     "pv_bytes{pv=\"pv-a\"} 5\n");
    obs_registry_free(r);
}

/* ---- registration rules ------------------------------------------------------- */

static void test_registration(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    const char *ab[] = {"a", "b", NULL};
    const char *ba[] = {"b", "a", NULL};
    const char *a[] = {"a", NULL};
    const double b1[] = {1, 2};
    const double b2[] = {1, 3};

    obs_metric *c = obs_counter_new(r, "x_total", "X.", ab);
    assert_non_null(c);
    /* Same type and labels: the same metric, whatever the help. */
    assert_ptr_equal(obs_counter_new(r, "x_total", "Other help.", ab), c);
    assert_null(obs_gauge_new(r, "x_total", "X.", ab));
    assert_null(obs_counter_new(r, "x_total", "X.", a));
    assert_null(obs_counter_new(r, "x_total", "X.", ba));
    assert_null(obs_counter_new(r, "x_total", "X.", NULL));

    obs_metric *h = obs_histogram_new(r, "lat", "L.", NULL, b1, 2);
    assert_non_null(h);
    assert_ptr_equal(obs_histogram_new(r, "lat", "L.", NULL, b1, 2), h);
    assert_null(obs_histogram_new(r, "lat", "L.", NULL, b2, 2));
    assert_null(obs_histogram_new(r, "lat", "L.", NULL, b1, 1));
    /* The names a histogram writes are taken, both ways round. */
    assert_null(obs_counter_new(r, "lat_count", "C.", NULL));
    assert_null(obs_gauge_new(r, "lat_sum", "S.", NULL));
    assert_null(obs_gauge_new(r, "lat_bucket", "B.", NULL));
    assert_non_null(obs_gauge_new(r, "y_sum", "S.", NULL));
    assert_null(obs_histogram_new(r, "y", "Y.", NULL, b1, 2));

    /* Invalid names and labels. */
    assert_null(obs_counter_new(r, "", "h", NULL));
    assert_null(obs_counter_new(r, NULL, "h", NULL));
    assert_null(obs_counter_new(r, "1abc", "h", NULL));
    assert_null(obs_counter_new(r, "a-b", "h", NULL));
    assert_non_null(obs_counter_new(r, "ns:sub_total", "h", NULL)); /* colons allowed */
    assert_null(obs_counter_new(r, "l1", "h", (const char *[]){"a:b", NULL}));
    assert_null(obs_counter_new(r, "l2", "h", (const char *[]){"__name", NULL}));
    assert_null(obs_counter_new(r, "l3", "h", (const char *[]){"a", "a", NULL}));
    assert_null(obs_counter_new(r, "l4", "h", (const char *[]){"", NULL}));
    assert_null(obs_histogram_new(r, "l5", "h", (const char *[]){"le", NULL}, b1, 2));
    assert_non_null(obs_counter_new(r, "l6", "h", (const char *[]){"le", NULL}));
    /* Buckets must increase. */
    assert_null(obs_histogram_new(r, "bk1", "h", NULL, (const double[]){2, 1}, 2));
    assert_null(obs_histogram_new(r, "bk2", "h", NULL, (const double[]){1, 1}, 2));
    assert_null(obs_histogram_new(r, "bk3", "h", NULL, (const double[]){NAN}, 1));
    assert_null(obs_counter_new(NULL, "n", "h", NULL));

    /* NULL metrics (failed registrations) are safe to use. */
    obs_counter_add(NULL, NULL, 1);
    obs_gauge_set(NULL, NULL, 1);
    obs_gauge_add(NULL, NULL, 1);
    obs_histogram_observe(NULL, NULL, 1);
    obs_metric_remove(NULL, NULL);
    assert_true(obs_metric_value(NULL, NULL) == 0);

    char *text = render(r);
    /* lat, ns:sub_total and y_sum; the labelled ones have no series yet. */
    assert_int_equal(prom_check(text), 3);
    free(text);
    size_t len = 99;
    char *empty = obs_registry_render(NULL, &len);
    assert_string_equal(empty, "");
    assert_int_equal(len, 0);
    free(empty);
    obs_registry_free(r);
    obs_registry_free(NULL);
}

/* ---- HTTP ---------------------------------------------------------------------- */

struct http_resp {
    long code;
    char ctype[128];
    char allow[64];
    char *body;
    size_t len;
};

static size_t on_body(char *data, size_t size, size_t n, void *ud)
{
    struct http_resp *r = ud;
    r->body = realloc(r->body, r->len + size * n + 1);
    memcpy(r->body + r->len, data, size * n);
    r->len += size * n;
    r->body[r->len] = '\0';
    return size * n;
}

static size_t on_header(char *data, size_t size, size_t n, void *ud)
{
    struct http_resp *r = ud;
    if (size * n > 7 && strncasecmp(data, "Allow: ", 7) == 0) {
        size_t l = strcspn(data + 7, "\r\n");
        if (l >= sizeof(r->allow))
            l = sizeof(r->allow) - 1;
        memcpy(r->allow, data + 7, l);
        r->allow[l] = '\0';
    }
    return size * n;
}

static void http_do(const char *method, const char *host, int port, const char *path,
                    struct http_resp *out)
{
    memset(out, 0, sizeof(*out));
    out->body = calloc(1, 1);
    char url[256];
    snprintf(url, sizeof(url), "http://%s:%d%s", host, port, path);
    CURL *c = curl_easy_init();
    assert_non_null(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, out);
    if (strcmp(method, "HEAD") == 0) {
        curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    } else if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, "x=1");
    } else if (strcmp(method, "GET") != 0) {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    }
    CURLcode rc = curl_easy_perform(c);
    if (rc != CURLE_OK)
        fail_msg("%s %s: %s", method, url, curl_easy_strerror(rc));
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->code);
    const char *ct = NULL;
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ct);
    if (ct)
        snprintf(out->ctype, sizeof(out->ctype), "%s", ct);
    curl_easy_cleanup(c);
}

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    assert_non_null(d);
    while (readdir(d))
        n++;
    closedir(d);
    return n;
}

static void healthz(void *ud, int *code, char **body, const char **ctype)
{
    (void)ctype; /* NULL: text/plain */
    int *calls = ud;
    (*calls)++;
    *code = 200;
    *body = strdup("ok");
}

static void not_ready(void *ud, int *code, char **body, const char **ctype)
{
    (void)ud;
    *code = 503;
    *body = strdup("{\"ready\":false}");
    *ctype = "application/json";
}

static void no_body(void *ud, int *code, char **body, const char **ctype)
{
    (void)ud;
    (void)body;
    (void)ctype;
    *code = 204;
}

static void test_http_serve(void **state)
{
    (void)state;
    int fds_before = open_fds();
    obs_registry *r = obs_registry_new();
    obs_metric *c = obs_counter_new(r, "scrapes_total", "Scrapes.", NULL);
    obs_metric *h = obs_histogram_new(r, "op_seconds", "Op.", (const char *[]){"op", NULL},
                                      (const double[]){0.1, 1}, 2);
    obs_histogram_observe(h, (const char *[]){"a"}, 0.05);
    obs_histogram_observe(h, (const char *[]){"b"}, 5);
    struct collect_ctx cc = {obs_gauge_new(r, "depth", "Depth.", NULL), c, 0};
    obs_registry_on_render(r, collect, &cc);

    obs_http *srv = NULL;
    assert_int_equal(obs_http_new("http-endpoint", "127.0.0.1:0", r, "/metrics", &srv), 0);
    assert_non_null(srv);
    assert_int_equal(obs_http_port(srv), 0);
    int calls = 0;
    assert_int_equal(obs_http_handle(srv, "/healthz", healthz, &calls), 0);
    assert_int_equal(obs_http_handle(srv, "/readyz", not_ready, NULL), 0);
    assert_int_equal(obs_http_handle(srv, "/empty", no_body, NULL), 0);
    assert_int_equal(obs_http_handle(srv, "/healthz", healthz, &calls), -EEXIST);
    assert_int_equal(obs_http_handle(srv, "/metrics", healthz, &calls), -EEXIST);
    assert_int_equal(obs_http_handle(srv, "relative", healthz, &calls), -EINVAL);
    assert_int_equal(obs_http_start(srv), 0);
    int port = obs_http_port(srv);
    assert_true(port > 0 && port < 65536);
    assert_int_equal(obs_http_start(srv), -EALREADY);
    assert_int_equal(obs_http_handle(srv, "/late", healthz, &calls), -EBUSY);

    struct http_resp resp;
    http_do("GET", "127.0.0.1", port, "/metrics", &resp);
    assert_int_equal(resp.code, 200);
    assert_string_equal(resp.ctype, "text/plain; version=0.0.4; charset=utf-8");
    assert_int_equal(prom_check(resp.body), 3);
    /* The collector ran once for this scrape. */
    assert_non_null(strstr(resp.body, "\nscrapes_total 1\n"));
    assert_non_null(strstr(resp.body, "op_seconds_bucket{op=\"b\",le=\"+Inf\"} 1\n"));
    char *direct = render(r); /* second run: collector counts 2 */
    free(resp.body);
    http_do("GET", "127.0.0.1", port, "/metrics", &resp);
    /* The third render, over HTTP, equals the direct one but for the count. */
    char *want = strdup(direct);
    char *at = strstr(want, "scrapes_total 2\n");
    assert_non_null(at);
    at[strlen("scrapes_total ")] = '3';
    at = strstr(want, "depth 10\n");
    assert_non_null(at);
    at[strlen("depth ")] = '2';
    assert_string_equal(resp.body, want);
    free(want);
    free(direct);
    free(resp.body);

    http_do("GET", "127.0.0.1", port, "/metrics?format=text", &resp); /* query ignored */
    assert_int_equal(resp.code, 200);
    free(resp.body);

    http_do("HEAD", "127.0.0.1", port, "/metrics", &resp);
    assert_int_equal(resp.code, 200);
    assert_int_equal(resp.len, 0);
    free(resp.body);

    http_do("GET", "127.0.0.1", port, "/healthz", &resp);
    assert_int_equal(resp.code, 200);
    assert_string_equal(resp.body, "ok");
    assert_string_equal(resp.ctype, "text/plain; charset=utf-8");
    assert_int_equal(calls, 1);
    free(resp.body);

    http_do("GET", "127.0.0.1", port, "/readyz", &resp);
    assert_int_equal(resp.code, 503);
    assert_string_equal(resp.body, "{\"ready\":false}");
    assert_string_equal(resp.ctype, "application/json");
    free(resp.body);

    http_do("GET", "127.0.0.1", port, "/empty", &resp);
    assert_int_equal(resp.code, 204);
    assert_int_equal(resp.len, 0);
    free(resp.body);

    static const char *const missing[] = {"/", "/metrics/", "/Metrics", "/healthz/x", "/nope"};
    for (size_t i = 0; i < sizeof(missing) / sizeof(missing[0]); i++) {
        http_do("GET", "127.0.0.1", port, missing[i], &resp);
        assert_int_equal(resp.code, 404);
        assert_string_equal(resp.body, "404 page not found\n");
        free(resp.body);
    }
    http_do("POST", "127.0.0.1", port, "/nope", &resp);
    assert_int_equal(resp.code, 404);
    free(resp.body);

    static const char *const methods[] = {"POST", "PUT", "DELETE", "PATCH", "OPTIONS"};
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++) {
        http_do(methods[i], "127.0.0.1", port, i % 2 ? "/healthz" : "/metrics", &resp);
        assert_int_equal(resp.code, 405);
        assert_string_equal(resp.allow, "GET, HEAD");
        free(resp.body);
    }
    assert_int_equal(calls, 1); /* handlers never ran for those */

    obs_http_free(srv);
    obs_http_free(NULL);
    obs_registry_free(r);
    /* The listening socket and connections are closed. */
    assert_int_equal(open_fds(), fds_before);
}

static void test_http_no_metrics_path(void **state)
{
    (void)state;
    obs_http *srv = NULL;
    assert_int_equal(obs_http_new("metrics-address", "127.0.0.1:0", NULL, NULL, &srv), 0);
    assert_int_equal(obs_http_start(srv), 0);
    struct http_resp resp;
    http_do("GET", "127.0.0.1", obs_http_port(srv), "/metrics", &resp);
    assert_int_equal(resp.code, 404);
    free(resp.body);
    obs_http_free(srv);
}

static void test_http_port_in_use(void **state)
{
    (void)state;
    obs_http *a = NULL, *b = NULL;
    assert_int_equal(obs_http_new("http-endpoint", "127.0.0.1:0", NULL, NULL, &a), 0);
    assert_int_equal(obs_http_start(a), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", obs_http_port(a));
    assert_int_equal(obs_http_new("http-endpoint", addr, NULL, NULL, &b), 0);
    assert_int_equal(obs_http_port(b), obs_http_port(a));
    assert_int_equal(obs_http_start(b), -EADDRINUSE);
    char want[256];
    snprintf(want, sizeof(want), "--http-endpoint: cannot listen on \"%s\": %s", addr,
             strerror(EADDRINUSE));
    assert_string_equal(util_err_last(), want);
    obs_http_free(b);
    obs_http_free(a);
}

static void test_http_ipv6(void **state)
{
    (void)state;
    obs_registry *r = obs_registry_new();
    obs_counter_new(r, "v6_total", "V6.", NULL);
    obs_http *srv = NULL;
    assert_int_equal(obs_http_new("http-endpoint", "[::1]:0", r, "/metrics", &srv), 0);
    int rc = obs_http_start(srv);
    if (rc == -EADDRNOTAVAIL || rc == -EAFNOSUPPORT) {
        /* No IPv6 loopback in this sandbox. */
        obs_http_free(srv);
        obs_registry_free(r);
        skip();
    }
    assert_int_equal(rc, 0);
    struct http_resp resp;
    http_do("GET", "[::1]", obs_http_port(srv), "/metrics", &resp);
    assert_int_equal(resp.code, 200);
    assert_non_null(strstr(resp.body, "v6_total 0\n"));
    free(resp.body);
    obs_http_free(srv);
    obs_registry_free(r);
}

static void test_http_addresses(void **state)
{
    (void)state;
    static const struct {
        const char *addr;
        const char *msg; /* NULL: accepted */
        int port;
    } cases[] = {
        {":0", NULL, 0},
        {":8080", NULL, 8080},
        {"127.0.0.1:0", NULL, 0},
        {"0.0.0.0:9808", NULL, 9808},
        {"[::1]:65535", NULL, 65535},
        {"[::]:1", NULL, 1},
        {"localhost:80", NULL, 80},
        {"", "--http-endpoint: \"\" is not host:port", 0},
        {":abc", "--http-endpoint: \":abc\" is not host:port", 0},
        {":", "--http-endpoint: \":\" is not host:port", 0},
        {"8080", "--http-endpoint: \"8080\" is not host:port", 0},
        {"127.0.0.1", "--http-endpoint: \"127.0.0.1\" is not host:port", 0},
        {"127.0.0.1:", "--http-endpoint: \"127.0.0.1:\" is not host:port", 0},
        {":-1", "--http-endpoint: \":-1\" is not host:port", 0},
        {":80x", "--http-endpoint: \":80x\" is not host:port", 0},
        {":65536", "--http-endpoint: \":65536\": port out of range 0-65535", 0},
        {":99999999999999999999",
         "--http-endpoint: \":99999999999999999999\": port out of range 0-65535", 0},
        {"::1:80",
         "--http-endpoint: \"::1:80\" is not host:port (write an IPv6 host in brackets: "
         "[::1]:8080)",
         0},
        {"[::1]", "--http-endpoint: \"[::1]\" is not host:port", 0},
        {"[::1]:", "--http-endpoint: \"[::1]:\" is not host:port", 0},
        {"[::1:80", "--http-endpoint: \"[::1:80\" is not host:port", 0},
        {"[::1]x:80", "--http-endpoint: \"[::1]x:80\" is not host:port", 0},
        {"a]:80", "--http-endpoint: \"a]:80\" is not host:port", 0},
        {"[::g]:80",
         "--http-endpoint: \"[::g]:80\": unknown host \"::g\": Name or service not known", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        static char sentinel;
        obs_http *h = (obs_http *)&sentinel; /* must be reset to NULL on error */
        util_err_clear();
        int rc = obs_http_new("http-endpoint", cases[i].addr, NULL, "/metrics", &h);
        if (cases[i].msg == NULL) {
            if (rc != 0)
                fail_msg("%s: %s", cases[i].addr, util_err_last());
            assert_int_equal(obs_http_port(h), cases[i].port);
            obs_http_free(h);
            continue;
        }
        if (rc != -EINVAL)
            fail_msg("%s: got %d, want -EINVAL", cases[i].addr, rc);
        assert_null(h);
        assert_string_equal(util_err_last(), cases[i].msg);
        assert_null(strchr(util_err_last(), '\n'));
    }
    /* The flag name is the caller's. */
    obs_http *h = NULL;
    assert_int_equal(obs_http_new("metrics-address", "nope", NULL, NULL, &h), -EINVAL);
    assert_string_equal(util_err_last(), "--metrics-address: \"nope\" is not host:port");
}

static int group_setup(void **state)
{
    (void)state;
    return curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK ? 0 : -1;
}

static int group_teardown(void **state)
{
    (void)state;
    curl_global_cleanup();
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_counter_plain),
        cmocka_unit_test(test_counter_labels),
        cmocka_unit_test(test_gauge),
        cmocka_unit_test(test_histogram),
        cmocka_unit_test(test_histogram_buckets),
        cmocka_unit_test(test_escaping),
        cmocka_unit_test(test_number_format),
        cmocka_unit_test(test_many_series),
        cmocka_unit_test(test_concurrent_updates),
        cmocka_unit_test(test_on_render),
        cmocka_unit_test(test_remove),
        cmocka_unit_test(test_registration),
        cmocka_unit_test(test_http_serve),
        cmocka_unit_test(test_http_no_metrics_path),
        cmocka_unit_test(test_http_port_in_use),
        cmocka_unit_test(test_http_ipv6),
        cmocka_unit_test(test_http_addresses),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
