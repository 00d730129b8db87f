/*
 * The connection to the driver: one gRPC channel shared by every worker.
 *
 * Each call gets its own pluck completion queue, so any number of threads
 * can call at once (a pluck queue allows only a handful of concurrent
 * pluckers; one queue per call sidesteps that limit and any cross-talk).
 * Calls are fail-fast like grpc-go's default: while the driver is away they
 * end with UNAVAILABLE instead of waiting out their deadline.
 *
 * A monitor thread watches the channel once it is READY; the first time it
 * leaves READY the connection counts as lost and on_loss runs, which for
 * the provisioner and attacher means exit so Kubernetes restarts the pod.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <grpc/byte_buffer.h>
#include <grpc/byte_buffer_reader.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "csi/csi.h"
#include "csi/csi_internal.h"
#include "obs/obs.h"

struct csi_conn {
    char *target;
    char *path;
    grpc_channel *ch;
    csi_conn_opts opts;
    atomic_bool lost;
    atomic_bool stopping;
    pthread_t monitor;
    bool monitor_started;
    /* Completion queues of finished calls, for the next ones: creating and
     * draining one per call cost about a third of a call's CPU. */
    pthread_mutex_t cq_mu;
    struct cq_slot {
        grpc_completion_queue *cq;
    } * cqs;
    size_t n_cqs, cap_cqs;
};

static grpc_completion_queue *cq_take(csi_conn *c)
{
    grpc_completion_queue *cq = NULL;
    pthread_mutex_lock(&c->cq_mu);
    if (c->n_cqs)
        cq = c->cqs[--c->n_cqs].cq;
    pthread_mutex_unlock(&c->cq_mu);
    return cq ? cq : grpc_completion_queue_create_for_pluck(NULL);
}

/* A queue goes back only after its call completed and was unreffed: no
 * event of that call can still arrive on it. */
static void cq_give(csi_conn *c, grpc_completion_queue *cq)
{
    pthread_mutex_lock(&c->cq_mu);
    if (c->n_cqs == c->cap_cqs) {
        size_t cap = c->cap_cqs ? c->cap_cqs * 2 : 8;
        struct cq_slot *n = realloc(c->cqs, cap * sizeof(*n));
        if (!n) {
            pthread_mutex_unlock(&c->cq_mu);
            csi_cq_destroy(cq);
            return;
        }
        c->cqs = n;
        c->cap_cqs = cap;
    }
    c->cqs[c->n_cqs++].cq = cq;
    pthread_mutex_unlock(&c->cq_mu);
}

#ifdef CSI_ABSL_DEADLOCK_MODE_SYM
/* absl::SetMutexDeadlockDetectionMode, bound by its linker name (the
 * Makefile reads it from the abseil archive gRPC is linked with); its
 * argument is the enum OnDeadlockCycle: kIgnore 0, kReport 1, kAbort 2. */
void csi__absl_deadlock_mode(int mode) __asm__(CSI_ABSL_DEADLOCK_MODE_SYM);
#endif

void csi_grpc_init(void)
{
#ifdef CSI_ABSL_DEADLOCK_MODE_SYM
    /* Debian builds abseil without NDEBUG, which leaves its mutex deadlock
     * detector on in gRPC's mutexes (a release build compiles it out). It
     * aborts the process on any lock-order inversion it sees, real deadlock
     * or not; every lock of every mutex goes through one global graph
     * behind one global lock; and the graph's nodes live in memory mapped
     * for them and never handed back (0.7 MiB after a burst of 1,000
     * volumes). Off, as in gRPC's release builds. */
    csi__absl_deadlock_mode(0);
#endif
    grpc_init();
}

gpr_timespec csi_deadline_after(util_duration d)
{
    if (d <= 0)
        return gpr_inf_future(GPR_CLOCK_MONOTONIC);
    return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC), gpr_time_from_nanos(d, GPR_TIMESPAN));
}

static grpc_channel *channel_create(const char *target)
{
    grpc_arg args[4];
    /* Never drop the connection for idleness: an idle drop would read as a
     * lost driver. */
    args[0].type = GRPC_ARG_INTEGER;
    args[0].key = (char *)GRPC_ARG_CLIENT_IDLE_TIMEOUT_MS;
    args[0].value.integer = INT_MAX;
    /* Upstream redials at most a second apart. */
    args[1].type = GRPC_ARG_INTEGER;
    args[1].key = (char *)GRPC_ARG_MAX_RECONNECT_BACKOFF_MS;
    args[1].value.integer = 1000;
    args[2].type = GRPC_ARG_INTEGER;
    args[2].key = (char *)GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS;
    args[2].value.integer = 100;
    args[3].type = GRPC_ARG_INTEGER;
    args[3].key = (char *)GRPC_ARG_MIN_RECONNECT_BACKOFF_MS;
    args[3].value.integer = 100;
    grpc_channel_args ca = {.num_args = 4, .args = args};
    grpc_channel_credentials *creds = grpc_insecure_credentials_create();
    grpc_channel *ch = grpc_channel_create(target, creds, &ca);
    grpc_channel_credentials_release(creds);
    return ch;
}

/* Waits up to `d` for the channel to leave `from`; returns the new state. */
static grpc_connectivity_state wait_state_change(grpc_channel *ch, grpc_completion_queue *cq,
                                                 grpc_connectivity_state from, util_duration d)
{
    grpc_channel_watch_connectivity_state(ch, from, csi_deadline_after(d), cq, (void *)ch);
    grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
    return grpc_channel_check_connectivity_state(ch, 0);
}

static void *monitor_main(void *arg)
{
    csi_conn *c = arg;
    util_thread_name("csi-monitor");
    /* Looks at the state without waiting on a completion queue: a thread
     * blocked in one takes its turn polling the channel's socket, and then
     * every answer to a call was read here and handed over to the caller's
     * thread, one more wake-up per call. Pollers see a lost connection:
     * callers while calls run, gRPC's backup poller (every 5 s) when idle. */
    while (!atomic_load(&c->stopping)) {
        util_sleep(200 * UTIL_MS);
        grpc_connectivity_state s = grpc_channel_check_connectivity_state(c->ch, 0);
        if (s == GRPC_CHANNEL_READY || atomic_load(&c->stopping))
            continue;
        atomic_store(&c->lost, true);
        obs_error("Lost connection to CSI driver at %s", c->target);
        if (c->opts.on_loss)
            c->opts.on_loss(c->opts.on_loss_ud);
        break;
    }
    return NULL;
}

static int wait_ready(csi_conn *c)
{
    util_duration bound = c->opts.connect_timeout ? c->opts.connect_timeout : 30 * UTIL_SECOND;
    util_duration every = c->opts.progress_every ? c->opts.progress_every : 10 * UTIL_SECOND;
    util_duration step = c->opts.max_backoff ? c->opts.max_backoff : UTIL_SECOND;
    util_duration start = util_now_mono();
    util_duration next_note = start + every;
    grpc_completion_queue *cq = grpc_completion_queue_create_for_next(NULL);
    int r = 0;

    obs_v(2, "Connecting to %s", c->target);
    for (;;) {
        grpc_connectivity_state s = grpc_channel_check_connectivity_state(c->ch, 1);
        if (s == GRPC_CHANNEL_READY)
            break;
        util_duration now = util_now_mono();
        if (bound > 0 && now - start >= bound) {
            r = util_err_set(-ETIMEDOUT,
                             "failed to connect to CSI driver at %s: no answer after %.0f s",
                             c->path, (double)bound / UTIL_SECOND);
            break;
        }
        if (now >= next_note) {
            obs_warn("Still connecting to %s", c->target);
            next_note = now + every;
        }
        /* Wait for a state change, or until it is time for the next try. */
        util_duration wait = step;
        if (bound > 0 && start + bound - now < wait)
            wait = start + bound - now;
        if (next_note - now < wait)
            wait = next_note - now;
        wait_state_change(c->ch, cq, s, wait);
    }
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_next(cq, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
    return r;
}

int csi_conn_new(const char *endpoint, const csi_conn_opts *opts, csi_conn **out)
{
    *out = NULL;
    char *target = NULL, *path = NULL;
    int r = csi_endpoint_parse("csi-address", endpoint, &target, &path);
    if (r < 0)
        return r;
    csi_grpc_init();
    csi_conn *c = util_calloc(1, sizeof(*c));
    c->target = target;
    c->path = path;
    pthread_mutex_init(&c->cq_mu, NULL);
    if (opts)
        c->opts = *opts;
    c->ch = channel_create(target);
    r = wait_ready(c);
    if (r < 0) {
        csi_conn_free(c);
        return r;
    }
    obs_v(2, "Connected to %s", c->target);
    if (pthread_create(&c->monitor, NULL, monitor_main, c) != 0) {
        csi_conn_free(c);
        return util_err_set(-EAGAIN, "cannot start the connection monitor thread");
    }
    c->monitor_started = true;
    *out = c;
    return 0;
}

void csi_conn_trim(csi_conn *c, size_t keep)
{
    if (!c)
        return;
    for (;;) {
        pthread_mutex_lock(&c->cq_mu);
        grpc_completion_queue *cq = c->n_cqs > keep ? c->cqs[--c->n_cqs].cq : NULL;
        if (c->n_cqs == 0) {
            free(c->cqs);
            c->cqs = NULL;
            c->cap_cqs = 0;
        }
        pthread_mutex_unlock(&c->cq_mu);
        if (!cq)
            return;
        csi_cq_destroy(cq); /* idle: no call of it is under way */
    }
}

void csi_conn_free(csi_conn *c)
{
    if (!c)
        return;
    atomic_store(&c->stopping, true);
    if (c->monitor_started)
        pthread_join(c->monitor, NULL);
    for (size_t i = 0; i < c->n_cqs; i++)
        csi_cq_destroy(c->cqs[i].cq);
    free(c->cqs);
    pthread_mutex_destroy(&c->cq_mu);
    if (c->ch)
        grpc_channel_destroy(c->ch);
    free(c->target);
    free(c->path);
    free(c);
    grpc_shutdown();
}

bool csi_conn_lost(const csi_conn *c)
{
    return atomic_load(&c->lost);
}

const char *csi_conn_endpoint(const csi_conn *c)
{
    return c->target;
}

void csi_loss_exit(void *ud)
{
    (void)ud;
    obs_fatal_exit("Lost connection to CSI driver, exiting");
}

grpc_byte_buffer *csi_pack(const ProtobufCMessage *msg)
{
    size_t len = protobuf_c_message_get_packed_size(msg);
    grpc_slice slice = grpc_slice_malloc(len);
    protobuf_c_message_pack(msg, GRPC_SLICE_START_PTR(slice));
    grpc_byte_buffer *bb = grpc_raw_byte_buffer_create(&slice, 1);
    grpc_slice_unref(slice);
    return bb;
}

ProtobufCMessage *csi_unpack(const ProtobufCMessageDescriptor *desc, grpc_byte_buffer *bb)
{
    grpc_byte_buffer_reader reader;
    if (!grpc_byte_buffer_reader_init(&reader, bb))
        return NULL;
    grpc_slice all = grpc_byte_buffer_reader_readall(&reader);
    grpc_byte_buffer_reader_destroy(&reader);
    ProtobufCMessage *m =
        protobuf_c_message_unpack(desc, NULL, GRPC_SLICE_LENGTH(all), GRPC_SLICE_START_PTR(all));
    grpc_slice_unref(all);
    return m;
}

void csi_cq_destroy(grpc_completion_queue *cq)
{
    grpc_completion_queue_shutdown(cq);
    while (grpc_completion_queue_pluck(cq, NULL, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL).type !=
           GRPC_QUEUE_SHUTDOWN) {
    }
    grpc_completion_queue_destroy(cq);
}

static void log_call(csi_conn *c, const char *method, const ProtobufCMessage *req)
{
    if (!obs_log_enabled(5, __FILE__))
        return;
    char *text = csi_msg_to_text(req, 0);
    obs_v(5, "GRPC call: %s", method);
    obs_v(5, "GRPC request: %s", text);
    free(text);
    (void)c;
}

static void log_result(csi_conn *c, const ProtobufCMessage *resp, const csi_status *st)
{
    if (!obs_log_enabled(5, __FILE__))
        return;
    char *text = csi_msg_to_text(resp, c->opts.max_log_len);
    obs_v(5, "GRPC response: %s", resp ? text : "{}");
    if (st->code != CSI_OK)
        obs_v(5, "GRPC error: rpc error: code = %s desc = %s", csi_code_name(st->code),
              st->message);
    free(text);
}

int csi_call(csi_conn *c, const char *method, const ProtobufCMessage *req,
             const ProtobufCMessageDescriptor *resp_desc, util_duration timeout,
             ProtobufCMessage **resp, csi_status *st)
{
    *resp = NULL;
    st->code = CSI_OK;
    st->message[0] = '\0';
    log_call(c, method, req);
    util_duration start = util_now_mono();

    grpc_completion_queue *cq = cq_take(c);
    grpc_slice mslice = grpc_slice_from_static_string(method);
    grpc_call *call = grpc_channel_create_call(c->ch, NULL, GRPC_PROPAGATE_DEFAULTS, cq, mslice,
                                               NULL, csi_deadline_after(timeout), NULL);
    grpc_byte_buffer *send = csi_pack(req);
    grpc_byte_buffer *recv = NULL;
    grpc_metadata_array md_initial, md_trailing;
    grpc_metadata_array_init(&md_initial);
    grpc_metadata_array_init(&md_trailing);
    grpc_status_code code = GRPC_STATUS_UNKNOWN;
    grpc_slice details = grpc_empty_slice();

    grpc_op ops[6];
    memset(ops, 0, sizeof(ops));
    ops[0].op = GRPC_OP_SEND_INITIAL_METADATA;
    ops[1].op = GRPC_OP_SEND_MESSAGE;
    ops[1].data.send_message.send_message = send;
    ops[2].op = GRPC_OP_SEND_CLOSE_FROM_CLIENT;
    ops[3].op = GRPC_OP_RECV_INITIAL_METADATA;
    ops[3].data.recv_initial_metadata.recv_initial_metadata = &md_initial;
    ops[4].op = GRPC_OP_RECV_MESSAGE;
    ops[4].data.recv_message.recv_message = &recv;
    ops[5].op = GRPC_OP_RECV_STATUS_ON_CLIENT;
    ops[5].data.recv_status_on_client.trailing_metadata = &md_trailing;
    ops[5].data.recv_status_on_client.status = &code;
    ops[5].data.recv_status_on_client.status_details = &details;

    grpc_call_error ce = grpc_call_start_batch(call, ops, 6, call, NULL);
    if (ce != GRPC_CALL_OK) {
        csi_status_set(st, CSI_INTERNAL, "grpc_call_start_batch failed (%d)", (int)ce);
    } else {
        grpc_event ev =
            grpc_completion_queue_pluck(cq, call, gpr_inf_future(GPR_CLOCK_MONOTONIC), NULL);
        if (ev.type != GRPC_OP_COMPLETE || !ev.success) {
            csi_status_set(st, CSI_INTERNAL, "gRPC call did not complete");
        } else if (code != GRPC_STATUS_OK) {
            char *d = grpc_slice_to_c_string(details);
            csi_status_set(st, (int)code, "%s", d);
            gpr_free(d);
        } else if (!recv) {
            csi_status_set(st, CSI_INTERNAL, "driver answered OK without a response message");
        } else {
            *resp = csi_unpack(resp_desc, recv);
            if (!*resp)
                csi_status_set(st, CSI_INTERNAL, "cannot decode %s from the driver",
                               resp_desc->name);
        }
    }

    grpc_byte_buffer_destroy(send);
    if (recv)
        grpc_byte_buffer_destroy(recv);
    grpc_slice_unref(details);
    grpc_metadata_array_destroy(&md_initial);
    grpc_metadata_array_destroy(&md_trailing);
    grpc_call_unref(call);
    if (ce == GRPC_CALL_OK)
        cq_give(c, cq);
    else
        csi_cq_destroy(cq);

    log_result(c, *resp, st);
    if (c->opts.on_call)
        c->opts.on_call(c->opts.on_call_ud, method, csi_code_name(st->code),
                        util_now_mono() - start);
    return st->code == CSI_OK ? 0 : -EREMOTEIO;
}
