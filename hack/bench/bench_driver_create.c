/*
 * Benchmark of the example CSI driver's CreateVolume path: `threads`
 * workers share one common/csi connection and send `calls` CreateVolume
 * requests with unique names. Every answer is checked (OK, the requested
 * size, a volume id) and every volume id must be unique; then one line:
 *   driver CreateVolume: N calls, T s, X calls/s
 *
 * Usage: bench_driver_create <endpoint> [calls=10000] [threads=16]
 * Built and run by hack/bench/run-driver-bench.sh.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_csi.h"
#include "csi/csi.h"

#define SIZE ((int64_t)1 << 20)

struct bench {
    csi_conn *conn;
    int calls;
    atomic_int next; /* the next call number to make */
    atomic_int bad;
    char **ids; /* one slot per call */
};

static void *worker(void *arg)
{
    struct bench *b = arg;
    for (;;) {
        int i = atomic_fetch_add(&b->next, 1);
        if (i >= b->calls)
            return NULL;
        char name[64];
        snprintf(name, sizeof(name), "bench-%06d", i);
        struct bench_create c;
        bench_create_init(&c, name, SIZE);
        Csi__V1__CreateVolumeResponse *resp = NULL;
        csi_status st;
        if (csi_create_volume(b->conn, &c.req, 60 * UTIL_SECOND, &resp, &st) < 0) {
            if (atomic_fetch_add(&b->bad, 1) < 5)
                fprintf(stderr, "%s: %s: %s\n", name, csi_code_name(st.code), st.message);
            continue;
        }
        if (!resp->volume || !resp->volume->volume_id || !resp->volume->volume_id[0] ||
            resp->volume->capacity_bytes != SIZE) {
            if (atomic_fetch_add(&b->bad, 1) < 5)
                fprintf(stderr, "%s: wrong answer\n", name);
        } else {
            b->ids[i] = util_strdup(resp->volume->volume_id);
        }
        csi__v1__create_volume_response__free_unpacked(resp, NULL);
    }
}

static int cmp_str(const void *a, const void *b)
{
    const char *x = *(const char *const *)a, *y = *(const char *const *)b;
    return strcmp(x ? x : "", y ? y : "");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s <endpoint> [calls] [threads]\n", argv[0]);
        return 2;
    }
    struct bench b = {.calls = argc > 2 ? atoi(argv[2]) : 10000};
    int threads = argc > 3 ? atoi(argv[3]) : 16;
    if (b.calls <= 0 || threads <= 0 || threads > 256) {
        fprintf(stderr, "bad calls or threads\n");
        return 2;
    }
    csi_conn_opts o = {.connect_timeout = 30 * UTIL_SECOND};
    if (csi_conn_new(argv[1], &o, &b.conn) < 0) {
        fprintf(stderr, "connect: %s\n", util_err_last());
        return 1;
    }
    b.ids = util_calloc((size_t)b.calls, sizeof(char *));
    pthread_t *th = util_calloc((size_t)threads, sizeof(pthread_t));
    util_duration start = util_now_mono();
    for (int i = 0; i < threads; i++)
        pthread_create(&th[i], NULL, worker, &b);
    for (int i = 0; i < threads; i++)
        pthread_join(th[i], NULL);
    double secs = (double)(util_now_mono() - start) / (double)UTIL_SECOND;

    /* Unique ids: sorted, no two neighbours equal. */
    qsort(b.ids, (size_t)b.calls, sizeof(char *), cmp_str);
    int dups = 0, missing = 0;
    for (int i = 0; i < b.calls; i++) {
        missing += b.ids[i] == NULL;
        if (i && b.ids[i] && b.ids[i - 1] && strcmp(b.ids[i], b.ids[i - 1]) == 0)
            dups++;
    }
    printf("driver CreateVolume: %d calls, %.2f s, %.0f calls/s\n", b.calls, secs,
           (double)b.calls / secs);
    int bad = atomic_load(&b.bad);
    if (bad || dups || missing)
        fprintf(stderr, "FAILED: %d bad answers, %d duplicate ids, %d missing\n", bad, dups,
                missing);
    for (int i = 0; i < b.calls; i++)
        free(b.ids[i]);
    free(b.ids);
    free(th);
    csi_conn_free(b.conn);
    return bad || dups || missing ? 1 : 0;
}
