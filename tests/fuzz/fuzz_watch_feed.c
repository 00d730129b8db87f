/*
 * fuzz_watch_feed: the watch-stream decoder of common/kube fed directly
 * (watch.c's test hooks), without the loopback server fuzz_watch needs, so
 * it runs orders of magnitude more inputs. Bytes 0 and 1 pick two split
 * points; the rest is a 200 watch body, fed once whole and once in three
 * slices cut there. Checked: the stream ends the same way and delivers the
 * same events (type and object) whatever the cuts, as curl may hand bytes
 * over in any slices; only the ends the informer knows come out.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kube/kube.h"

#include "fuzz.h"

/* From common/kube/watch.c (test hooks, not in kube.h). */
void kube_watch__begin(kube_watch *w, const char *path, kube_watch_fn fn, void *ud);
int kube_watch__feed(kube_watch *w, const char *p, size_t n);
int kube_watch__end(kube_watch *w);

#define MAX_EVENTS 64

/* What one run delivered: each event's type and object as text. */
typedef struct seen {
    int n;
    char *ev[MAX_EVENTS];
} seen;

static int on_event(void *ud, const char *type, json_object *obj)
{
    seen *s = ud;
    if (s->n < MAX_EVENTS)
        s->ev[s->n] = util_asprintf("%s %s", type,
                                    json_object_to_json_string_ext(obj, JSON_C_TO_STRING_PLAIN));
    s->n++;
    return 0;
}

static void seen_clear(seen *s)
{
    for (int i = 0; i < s->n && i < MAX_EVENTS; i++)
        free(s->ev[i]);
    s->n = 0;
}

static int run(kube_watch *w, const char *p, size_t n, size_t a, size_t b, seen *s)
{
    kube_watch__begin(w, "/api/v1/configmaps?watch=true", on_event, s);
    size_t cut[4] = {0, a, b, n};
    for (int i = 0; i < 3; i++)
        if (kube_watch__feed(w, p + cut[i], cut[i + 1] - cut[i]) != 0)
            break;
    return kube_watch__end(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    const char *body = (const char *)data + 2;
    size_t n = size - 2;
    size_t a = n > 0 ? data[0] % (n + 1) : 0;
    size_t b = n > 0 ? data[1] % (n + 1) : 0;
    if (a > b) {
        size_t t = a;
        a = b;
        b = t;
    }
    /* One watch for every input (its curl handles are never used: no
     * client, the hooks never reach the network); fuzzing state. */
    static kube_watch *w;
    if (w == NULL)
        w = kube_watch_new(NULL);
    seen whole = {0}, sliced = {0};
    int rw = run(w, body, n, n, n, &whole);
    int rs = run(w, body, n, a, b, &sliced);
    if (rw != 0 && rw != -EIO && rw != -ERANGE && rw != -EREMOTEIO && rw != -EMSGSIZE) {
        fprintf(stderr, "watch ended with %d: %s\n", rw, util_err_last());
        abort();
    }
    if (rw != rs || whole.n != sliced.n) {
        fprintf(stderr, "whole: %d (%d events), cut at %zu and %zu: %d (%d events)\n", rw, whole.n,
                a, b, rs, sliced.n);
        abort();
    }
    for (int i = 0; i < whole.n && i < MAX_EVENTS; i++) {
        if (strcmp(whole.ev[i], sliced.ev[i]) != 0) {
            fprintf(stderr, "event %d: whole %s, cut %s\n", i, whole.ev[i], sliced.ev[i]);
            abort();
        }
    }
    seen_clear(&whole);
    seen_clear(&sliced);
    return 0;
}
