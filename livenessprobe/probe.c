/*
 * One /healthz: the driver socket checked, Identity.Probe over the
 * connection kept from start-up, and its metrics.
 *
 * Upstream dials a fresh gRPC connection for every request and closes it
 * afterwards. Keeping one connection saves a dial and a handshake per probe,
 * but must not hide what the fresh dial would notice: a socket file that was
 * removed fails the probe (the driver may still hold the old connection, but
 * nobody else can reach it), and a connection that answered UNAVAILABLE is
 * not trusted again: gRPC redials it in the background only while some
 * thread polls it, which a sleeping prober does not, so after a driver
 * restart it could stay down for seconds. The next try dials afresh, waiting
 * for the connection within the probe's time, and the new connection
 * replaces the old.
 *
 * libmicrohttpd runs handlers on its one polling thread, so probes never
 * overlap and the connection needs no lock.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "livenessprobe/livenessprobe.h"

#define PROBE_METHOD "/csi.v1.Identity/Probe"
/* How often a missing socket is looked for again within a probe's time. */
#define RETRY_EVERY (100 * UTIL_MS)

int lp_metrics_register(obs_registry *r, double start_time, lp_metrics *m)
{
    static const char *const labels[] = {"driver_name", "method_name", "grpc_status_code", NULL};
    static const double buckets[] = {.1, .25, .5, 1, 2.5, 5, 10, 15, 25, 50, 120, 300, 600};
    m->seconds = obs_histogram_new(r, "csi_sidecar_operations_seconds",
                                   "[ALPHA] Duration of the CSI calls made, by driver, gRPC "
                                   "method and result code, in seconds",
                                   labels, buckets, sizeof(buckets) / sizeof(buckets[0]));
    m->start =
        obs_gauge_new(r, "process_start_time_seconds",
                      "[ALPHA] When the process started, in seconds since the Unix epoch.", NULL);
    if (!m->seconds || !m->start)
        return util_err_set(-EINVAL, "cannot register the metrics");
    obs_gauge_set(m->start, NULL, start_time);
    return 0;
}

void lp_metrics_observe(const lp_metrics *m, const char *driver, const char *method, int code,
                        util_duration took)
{
    if (!m || !m->seconds)
        return;
    const char *v[] = {driver ? driver : "unknown-driver", method, csi_code_go_name(code)};
    obs_histogram_observe(m->seconds, v, (double)took / (double)UTIL_SECOND);
}

static bool socket_present(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0 && S_ISSOCK(sb.st_mode);
}

/* Replaces the connection with a fresh one that is ready, waiting at most
 * `left`. The old one is freed only at the next replacement: its monitor
 * thread ends once it sees the connection down, which by then it has, so
 * freeing it does not wait in a probe's time. */
static int redial(lp_probe *p, util_duration left)
{
    csi_conn *fresh = NULL;
    csi_conn_opts co = {.connect_timeout = left};
    int r = csi_conn_new(p->endpoint, &co, &fresh);
    if (r < 0)
        return r;
    csi_conn_free(p->retired);
    p->retired = p->csi;
    p->csi = fresh;
    p->stale = false;
    return 0;
}

void lp_probe_run(lp_probe *p, lp_outcome *o, csi_status *st)
{
    util_duration deadline = util_now_mono() + p->timeout;
    bool fresh = false; /* the connection was dialled within this probe */
    char why[CSI_STATUS_MSG_MAX] = "no time left to call";
    st->code = CSI_OK;
    st->message[0] = '\0';
    for (;;) {
        /* A dial and a call both read 0 or less as "no bound": out of
         * time is checked before each. */
        util_duration left = deadline - util_now_mono();
        if (left <= 0)
            break;
        if (!socket_present(p->socket_path)) {
            /* upstream's dial waits for the socket until the timeout */
            snprintf(why, sizeof(why), "socket %s does not exist", p->socket_path);
            util_sleep(left < RETRY_EVERY ? left : RETRY_EVERY);
            continue;
        }
        if (p->stale || !p->csi) {
            /* waits for the driver within the time left, as upstream's dial */
            if (redial(p, left) < 0) {
                snprintf(why, sizeof(why), "%s", util_err_last());
                break;
            }
            fresh = true;
            if ((left = deadline - util_now_mono()) <= 0)
                break;
        }
        obs_v(5, "Sending probe request to CSI driver %s", p->driver);
        bool ready = false;
        util_duration t0 = util_now_mono();
        int r = csi_probe(p->csi, left, &ready, st);
        util_duration took = util_now_mono() - t0;
        if (r < 0 && st->code == CSI_UNAVAILABLE)
            p->stale = true;
        /* UNAVAILABLE over a connection just dialled is the driver's own
         * answer; over an older one it may be a connection that broke, so
         * it is asked again over a fresh one. */
        if (r == 0 || st->code != CSI_UNAVAILABLE || fresh) {
            *o = r == 0 ? (ready ? LP_READY : LP_NOT_READY) : LP_CALL_FAILED;
            lp_metrics_observe(p->metrics, p->driver, PROBE_METHOD, st->code, took);
            return;
        }
    }
    /* No call answered in time: upstream's text for a dial that timed out. */
    *o = LP_UNREACHABLE;
    csi_status_set(st, CSI_UNAVAILABLE, "%s", why);
}

void lp_probe_clear(lp_probe *p)
{
    csi_conn_free(p->csi);
    csi_conn_free(p->retired);
    p->csi = p->retired = NULL;
}

void lp_healthz(void *ud, int *code, char **body, const char **ctype)
{
    lp_probe *p = ud;
    lp_outcome o = LP_UNREACHABLE;
    csi_status st;
    lp_probe_run(p, &o, &st);
    lp_answer(o, &st, code, body);
    *ctype = "text/plain; charset=utf-8";
    switch (o) {
    case LP_READY:
        obs_v(5, "Health check succeeded");
        break;
    case LP_NOT_READY:
        obs_error("Driver responded but is not ready");
        break;
    case LP_CALL_FAILED:
        obs_error("Health check failed: %s", *body);
        break;
    case LP_UNREACHABLE:
        obs_error("Failed to establish connection to CSI driver: %s: %s", *body, st.message);
        break;
    }
}
