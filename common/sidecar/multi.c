/*
 * Several controller modules in one process (csi-sidecars): one flag set
 * with each module's flags as --<name>-<flag>, one driver connection, one
 * API client, one lease, one HTTP endpoint. See sidecar.h.
 */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sidecar/sidecar.h"

struct hosted {
    const sidecar_module *m;
    util_flags *scope;
    void *state;
    bool enabled;
};

struct multi {
    const char *prog;
    struct hosted *h;
    size_t n;
    char *lock;
};

static void die(const char *prog, const char *msg)
{
    fprintf(stderr, "%s: %s\n", prog, msg);
    exit(1);
}

/* "a,b" against the known modules; -EINVAL with one line. */
static int pick(struct multi *mx, const char *list)
{
    if (!list || !*list)
        return util_err_set(-EINVAL, "--controllers: name at least one controller");
    char *copy = util_strdup(list), *save = NULL;
    int rc = 0;
    for (char *t = strtok_r(copy, ",", &save); t && rc == 0; t = strtok_r(NULL, ",", &save)) {
        size_t i = 0;
        while (i < mx->n && strcmp(mx->h[i].m->name, t) != 0)
            i++;
        if (i == mx->n)
            rc = util_err_set(-EINVAL, "--controllers: unknown controller \"%s\"", t);
        else
            mx->h[i].enabled = true;
    }
    free(copy);
    return rc;
}

static size_t enabled(const struct multi *mx)
{
    size_t k = 0;
    for (size_t i = 0; i < mx->n; i++)
        k += mx->h[i].enabled;
    return k;
}

static const char *lock_name(void *ud, const char *driver)
{
    struct multi *mx = ud;
    free(mx->lock);
    mx->lock = util_asprintf("csi-sidecars-%s", driver);
    for (char *p = mx->lock; *p; p++)
        if (*p == '/')
            *p = '-';
    return mx->lock;
}

static void run(void *ud)
{
    struct multi *mx = ud;
    for (size_t i = 0; i < mx->n; i++)
        if (mx->h[i].enabled && mx->h[i].m->start(mx->h[i].state) < 0)
            obs_fatal_exit("cannot start %s: %s", mx->h[i].m->title, util_err_last());
}

/* The hosted modules' needs, merged: any module's ask is the process's. */
static void merge(sidecar_opts *into, const sidecar_opts *o)
{
    into->which |= o->which;
    if (o->timeout > into->timeout)
        into->timeout = o->timeout;
    into->exit_on_csi_loss |= o->exit_on_csi_loss;
    into->probe |= o->probe;
    into->kubeconfig_env |= o->kubeconfig_env;
    into->release_on_exit |= o->release_on_exit;
    if (o->max_log_len > into->max_log_len)
        into->max_log_len = o->max_log_len;
}

int sidecar_multi_main(const char *prog, const sidecar_module *const *mods, size_t n,
                       const char *version, int argc, char **argv)
{
    struct multi mx = {.prog = prog, .h = util_calloc(n, sizeof(struct hosted)), .n = n};
    unsigned which = 0;
    int arenas = 0;
    for (size_t i = 0; i < n; i++) {
        mx.h[i].m = mods[i];
        which |= mods[i]->which;
        if (mods[i]->malloc_arenas > arenas)
            arenas = mods[i]->malloc_arenas;
    }
    if (arenas > 0)
        mallopt(M_ARENA_MAX, arenas);
    util_flags *f = util_flags_new(prog, version);
    sidecar_flags common;
    if (sidecar_flags_add(f, &common, which) < 0)
        die(prog, "cannot register the common flags");
    const char *controllers = "";
    util_duration timeout = 0;
    util_flags_string(f, "controllers", &controllers,
                      "Comma-separated controllers to run: provisioner, attacher, resizer, "
                      "snapshotter.");
    util_flags_duration(f, "timeout", &timeout,
                        "Timeout of CSI calls for every controller that does not set "
                        "--<controller>-timeout (unset: each controller's own default).");
    for (size_t i = 0; i < n; i++) {
        char *prefix = util_asprintf("%s-", mods[i]->name);
        mx.h[i].scope = util_flags_scope(f, prefix);
        free(prefix);
        mx.h[i].state = mods[i]->new (mx.h[i].scope, &common);
    }
    util_flags_parse_or_exit(f, argc, argv);
    if (pick(&mx, controllers) < 0 || sidecar_flags_check(f, &common) < 0)
        die(prog, util_err_last());
    sidecar_opts so = {.component = prog, .version = version, .healthz = true};
    for (size_t i = 0; i < n; i++) {
        struct hosted *h = &mx.h[i];
        const char *given = util_flags_scope_first_set(h->scope);
        if (!h->enabled && given) {
            fprintf(stderr, "%s: --%s: the %s controller is not enabled (--controllers=%s)\n", prog,
                    given, h->m->name, controllers);
            exit(1);
        }
        if (!h->enabled)
            continue;
        util_flags_inherit(h->scope);
        sidecar_opts o = {.component = prog, .version = version, .which = h->m->which};
        bool elect = common.leader_election;
        int rc = h->m->configure(h->state, h->scope, &o);
        if (rc < 0) {
            fprintf(stderr, "%s: %s: %s\n", prog, h->m->name, util_err_last());
            exit(1);
        }
        /* The provisioner's --node-deployment turns the election off: one
         * process has one election, so it cannot stay on for the others. */
        if (elect && !common.leader_election && enabled(&mx) > 1) {
            fprintf(stderr,
                    "%s: --%s-node-deployment turns leader election off, which the other "
                    "controllers need: run it in a csi-sidecars of its own\n",
                    prog, h->m->name);
            exit(1);
        }
        if (rc == SIDECAR_MODULE_DONE)
            h->enabled = false;
        else
            merge(&so, &o);
    }
    so.component = prog;
    so.lock_name = lock_name;
    so.ud = &mx;
    obs_info("Version: %s", version);
    sidecar *s = NULL;
    if (sidecar_start(&common, &so, &s) < 0)
        die(prog, util_err_last());
    for (size_t i = 0; i < n; i++)
        if (mx.h[i].enabled && mx.h[i].m->prepare(mx.h[i].state, s) < 0) {
            fprintf(stderr, "%s: %s: %s\n", prog, mx.h[i].m->name, util_err_last());
            exit(1);
        }
    if (sidecar_serve(s, run, &mx) < 0)
        die(prog, util_err_last());
    int code = sidecar_wait(s);
    for (size_t i = n; i-- > 0;)
        if (mx.h[i].enabled && mx.h[i].m->stop(mx.h[i].state) < 0)
            code = 1;
    for (size_t i = 0; i < n; i++)
        mx.h[i].m->free(mx.h[i].state);
    sidecar_free(s);
    free(mx.lock);
    free(mx.h);
    util_flags_free(f);
    return code;
}
