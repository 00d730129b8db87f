/*
 * The standalone binary of one controller module (see sidecar.h): the
 * start-up skeleton every sidecar's main.c used to repeat, in one place.
 */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include "sidecar/sidecar.h"

struct runner {
    const sidecar_module *m;
    void *state;
    char *lock; /* the lease's name, kept while the election runs */
};

static void die(const sidecar_module *m, const char *msg)
{
    fprintf(stderr, "%s: %s\n", m->prog, msg);
    exit(1);
}

static const char *lock_name(void *ud, const char *driver)
{
    struct runner *r = ud;
    free(r->lock);
    r->lock = r->m->lock_name(driver);
    return r->lock;
}

static void run(void *ud)
{
    struct runner *r = ud;
    if (r->m->start(r->state) < 0)
        obs_fatal_exit("cannot start %s: %s", r->m->title, util_err_last());
}

int sidecar_module_main(const sidecar_module *m, const char *version, int argc, char **argv)
{
    /* glibc gives each busy thread an arena of its own, up to 8 per core,
     * and each keeps what it touched; the modules say how many they need. */
    if (m->malloc_arenas > 0)
        mallopt(M_ARENA_MAX, m->malloc_arenas);
    util_flags *f = util_flags_new(m->prog, version);
    sidecar_flags common;
    if (sidecar_flags_add(f, &common, m->which) < 0)
        die(m, "cannot register the common flags");
    struct runner r = {.m = m, .state = m->new (f, &common)};
    util_flags_parse_or_exit(f, argc, argv);
    if (sidecar_flags_check(f, &common) < 0)
        die(m, util_err_last());
    sidecar_opts so = {.component = m->prog, .version = version, .which = m->which};
    int rc = m->configure(r.state, f, &so);
    if (rc < 0)
        die(m, util_err_last());
    if (rc == SIDECAR_MODULE_DONE) {
        m->free(r.state);
        util_flags_free(f);
        return 0;
    }
    so.version = version;
    if (m->lock_name) {
        so.lock_name = lock_name;
        so.ud = &r;
    }
    obs_info("Version: %s", version);

    sidecar *s = NULL;
    if (sidecar_start(&common, &so, &s) < 0 || m->prepare(r.state, s) < 0)
        die(m, util_err_last());
    if (sidecar_serve(s, run, &r) < 0)
        die(m, util_err_last());
    int code = sidecar_wait(s);
    if (m->stop(r.state) < 0)
        code = 1;
    /* Before the clients go: a module's own event recorder flushes on them. */
    m->free(r.state);
    sidecar_free(s);
    free(r.lock);
    util_flags_free(f);
    return code;
}
