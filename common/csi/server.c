/*
 * A gRPC server on a unix socket for C handlers: drivers built on this
 * library, the kubelet registration socket and tests.
 *
 * Calls are taken with the generic (unregistered) request API, so every
 * method, known or not, arrives the same way and unknown ones are answered
 * UNIMPLEMENTED at once rather than hanging until the caller's deadline.
 * `threads` workers all wait on one completion queue; each call moves
 * through three steps (accepted -> request read -> answer sent), and the
 * handler runs on whichever worker read the request, so a slow handler
 * holds up only its own thread. Every accepted call re-arms one request, so
 * the number waiting stays constant.
 */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <grpc/byte_buffer.h>
#include <grpc/grpc.h>
#include <grpc/grpc_security.h>
#include <grpc/support/alloc.h>
#include <grpc/support/time.h>

#include "csi/csi.h"
#include "csi/csi_internal.h"
#include "obs/obs.h"

struct route {
    char *path;
    const ProtobufCMessageDescriptor *input;
    csi_handler_fn fn;
    void *ud;
};

struct csi_reply {
    bool answered;
    int code;
    char *message;
    grpc_byte_buffer *body;
    gpr_timespec deadline;
};

enum stage { STAGE_ACCEPT, STAGE_READ, STAGE_ANSWER };

struct slot {
    csi_server *srv;
    enum stage stage;
    grpc_call *call;
    grpc_call_details details;
    grpc_metadata_array md;
    grpc_byte_buffer *request;
    struct csi_reply reply;
    grpc_slice status_details;
    int cancelled;
};

struct csi_server {
    char *target;
    char *path;
    csi_server_opts opts;
    grpc_server *gs;
    grpc_completion_queue *cq;
    struct route *routes;
    size_t n_routes;
    pthread_t *threads;
    int n_threads;
    bool started;
    bool stopped;
    atomic_bool stopping;
    pthread_mutex_t mu;
    pthread_cond_t cond;
    bool shutdown_done;
    int shutdown_tag; /* its address is the tag */
    /* Workers handling an event: a handler still running after the server
     * shut down must finish before the queue does (it starts a batch). */
    atomic_int busy;
};

/* ---- replies ------------------------------------------------------------ */

int csi_reply_ok(csi_reply *reply, const ProtobufCMessage *resp)
{
    if (reply->answered)
        return util_err_set(-EALREADY, "handler answered twice");
    reply->answered = true;
    reply->code = CSI_OK;
    reply->body = csi_pack(resp);
    return 0;
}

int csi_reply_error(csi_reply *reply, int code, const char *fmt, ...)
{
    if (reply->answered)
        return util_err_set(-EALREADY, "handler answered twice");
    if (code == CSI_OK)
        code = CSI_UNKNOWN; /* an error reply must not read as success */
    reply->answered = true;
    reply->code = code;
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&reply->message, fmt, ap) < 0)
        reply->message = NULL;
    va_end(ap);
    return 0;
}

util_duration csi_reply_time_left(const csi_reply *reply)
{
    gpr_timespec dl = gpr_convert_clock_type(reply->deadline, GPR_CLOCK_MONOTONIC);
    if (gpr_time_cmp(dl, gpr_inf_future(GPR_CLOCK_MONOTONIC)) == 0)
        return INT64_MAX;
    gpr_timespec left = gpr_time_sub(dl, gpr_now(GPR_CLOCK_MONOTONIC));
    return (util_duration)left.tv_sec * UTIL_SECOND + left.tv_nsec;
}

/* ---- call steps --------------------------------------------------------- */

static void arm(csi_server *s)
{
    struct slot *sl = util_calloc(1, sizeof(*sl));
    sl->srv = s;
    sl->stage = STAGE_ACCEPT;
    grpc_call_details_init(&sl->details);
    grpc_metadata_array_init(&sl->md);
    sl->status_details = grpc_empty_slice();
    grpc_call_error e =
        grpc_server_request_call(s->gs, &sl->call, &sl->details, &sl->md, s->cq, s->cq, sl);
    if (e != GRPC_CALL_OK) {
        obs_error("grpc_server_request_call failed (%d)", (int)e);
        grpc_call_details_destroy(&sl->details);
        grpc_metadata_array_destroy(&sl->md);
        free(sl);
    }
}

static void slot_free(struct slot *sl)
{
    if (sl->call)
        grpc_call_unref(sl->call);
    grpc_call_details_destroy(&sl->details);
    grpc_metadata_array_destroy(&sl->md);
    if (sl->request)
        grpc_byte_buffer_destroy(sl->request);
    if (sl->reply.body)
        grpc_byte_buffer_destroy(sl->reply.body);
    free(sl->reply.message);
    grpc_slice_unref(sl->status_details);
    free(sl);
}

static const struct route *find_route(const csi_server *s, grpc_slice method)
{
    size_t len = GRPC_SLICE_LENGTH(method);
    const char *p = (const char *)GRPC_SLICE_START_PTR(method);
    for (size_t i = 0; i < s->n_routes; i++)
        if (strlen(s->routes[i].path) == len && memcmp(s->routes[i].path, p, len) == 0)
            return &s->routes[i];
    return NULL;
}

static void send_answer(struct slot *sl)
{
    grpc_op ops[4];
    memset(ops, 0, sizeof(ops));
    size_t n = 0;
    ops[n++].op = GRPC_OP_SEND_INITIAL_METADATA;
    if (sl->reply.code == CSI_OK && sl->reply.body) {
        ops[n].op = GRPC_OP_SEND_MESSAGE;
        ops[n++].data.send_message.send_message = sl->reply.body;
    }
    sl->status_details = grpc_slice_from_copied_string(sl->reply.message ? sl->reply.message : "");
    ops[n].op = GRPC_OP_SEND_STATUS_FROM_SERVER;
    ops[n].data.send_status_from_server.status = (grpc_status_code)sl->reply.code;
    ops[n++].data.send_status_from_server.status_details = &sl->status_details;
    ops[n].op = GRPC_OP_RECV_CLOSE_ON_SERVER;
    ops[n++].data.recv_close_on_server.cancelled = &sl->cancelled;
    sl->stage = STAGE_ANSWER;
    grpc_call_error e = grpc_call_start_batch(sl->call, ops, n, sl, NULL);
    if (e != GRPC_CALL_OK) {
        obs_error("cannot send the answer (%d)", (int)e);
        slot_free(sl);
    }
}

static void on_accepted(struct slot *sl)
{
    csi_server *s = sl->srv;
    if (!atomic_load(&s->stopping))
        arm(s);
    sl->reply.deadline = sl->details.deadline;
    if (!find_route(s, sl->details.method)) {
        char *m = grpc_slice_to_c_string(sl->details.method);
        obs_v(4, "unknown method %s: answering UNIMPLEMENTED", m);
        csi_reply_error(&sl->reply, CSI_UNIMPLEMENTED, "unknown method %s", m);
        gpr_free(m);
        send_answer(sl);
        return;
    }
    grpc_op op;
    memset(&op, 0, sizeof(op));
    op.op = GRPC_OP_RECV_MESSAGE;
    op.data.recv_message.recv_message = &sl->request;
    sl->stage = STAGE_READ;
    grpc_call_error e = grpc_call_start_batch(sl->call, &op, 1, sl, NULL);
    if (e != GRPC_CALL_OK) {
        obs_error("cannot read the request (%d)", (int)e);
        slot_free(sl);
    }
}

static void on_read(struct slot *sl)
{
    const struct route *rt = find_route(sl->srv, sl->details.method);
    ProtobufCMessage *req = sl->request ? csi_unpack(rt->input, sl->request) : NULL;
    if (!req) {
        csi_reply_error(&sl->reply, CSI_INTERNAL, "cannot decode the request as %s",
                        rt->input->name);
    } else {
        rt->fn(rt->ud, rt->path, req, &sl->reply);
        protobuf_c_message_free_unpacked(req, NULL);
        if (!sl->reply.answered)
            csi_reply_error(&sl->reply, CSI_INTERNAL, "handler for %s gave no answer", rt->path);
    }
    send_answer(sl);
}

static void *worker_main(void *arg)
{
    csi_server *s = arg;
    util_thread_name("csi-server");
    for (;;) {
        grpc_event ev = grpc_completion_queue_next(s->cq, csi_deadline_after(200 * UTIL_MS), NULL);
        if (ev.type == GRPC_QUEUE_SHUTDOWN)
            break;
        if (ev.type != GRPC_OP_COMPLETE)
            continue;
        if (ev.tag == &s->shutdown_tag) {
            pthread_mutex_lock(&s->mu);
            s->shutdown_done = true;
            pthread_cond_broadcast(&s->cond);
            pthread_mutex_unlock(&s->mu);
            continue;
        }
        struct slot *sl = ev.tag;
        atomic_fetch_add(&s->busy, 1);
        if (sl->stage == STAGE_ACCEPT && !ev.success) {
            atomic_fetch_sub(&s->busy, 1);
            slot_free(sl); /* the server is shutting down */
            continue;
        }
        switch (sl->stage) {
        case STAGE_ACCEPT:
            on_accepted(sl);
            break;
        case STAGE_READ:
            on_read(sl);
            break;
        case STAGE_ANSWER:
            slot_free(sl);
            break;
        }
        atomic_fetch_sub(&s->busy, 1);
    }
    return NULL;
}

/* ---- lifecycle ---------------------------------------------------------- */

int csi_server_new(const char *endpoint, const csi_server_opts *opts, csi_server **out)
{
    *out = NULL;
    char *target = NULL, *path = NULL;
    int r = csi_endpoint_parse("endpoint", endpoint, &target, &path);
    if (r < 0)
        return r;
    csi_grpc_init();
    csi_server *s = util_calloc(1, sizeof(*s));
    s->target = target;
    s->path = path;
    if (opts)
        s->opts = *opts;
    s->n_threads = s->opts.threads > 0 ? s->opts.threads : 8;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cond, NULL);
    s->gs = grpc_server_create(NULL, NULL);
    s->cq = grpc_completion_queue_create_for_next(NULL);
    grpc_server_register_completion_queue(s->gs, s->cq, NULL);
    *out = s;
    return 0;
}

static int add_route(csi_server *s, const ProtobufCServiceDescriptor *svc,
                     const ProtobufCMethodDescriptor *m, csi_handler_fn fn, void *ud)
{
    char *path = util_asprintf("/%s/%s", svc->name, m->name);
    for (size_t i = 0; i < s->n_routes; i++) {
        if (strcmp(s->routes[i].path, path) == 0) {
            s->routes[i].fn = fn;
            s->routes[i].ud = ud;
            free(path);
            return 0;
        }
    }
    struct route *nr = realloc(s->routes, (s->n_routes + 1) * sizeof(*nr));
    if (!nr)
        abort();
    s->routes = nr;
    s->routes[s->n_routes++] = (struct route){path, m->input, fn, ud};
    return 0;
}

int csi_server_handle(csi_server *s, const ProtobufCServiceDescriptor *svc, const char *method,
                      csi_handler_fn fn, void *ud)
{
    if (s->started)
        return util_err_set(-EBUSY, "routes must be added before csi_server_start");
    for (unsigned i = 0; i < svc->n_methods; i++)
        if (strcmp(svc->methods[i].name, method) == 0)
            return add_route(s, svc, &svc->methods[i], fn, ud);
    return util_err_set(-ENOENT, "service %s has no method %s", svc->name, method);
}

int csi_server_handle_all(csi_server *s, const ProtobufCServiceDescriptor *svc, csi_handler_fn fn,
                          void *ud)
{
    if (s->started)
        return util_err_set(-EBUSY, "routes must be added before csi_server_start");
    for (unsigned i = 0; i < svc->n_methods; i++)
        add_route(s, svc, &svc->methods[i], fn, ud);
    return 0;
}

/* Removes a leftover socket from an earlier run; refuses anything else. */
static int clear_stale_socket(const char *path)
{
    struct stat st;
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : util_err_set(-errno, "cannot stat %s: %m", path);
    if (!S_ISSOCK(st.st_mode))
        return util_err_set(-EEXIST,
                            "%s exists and is not a socket; remove it or pick another path", path);
    if (unlink(path) < 0)
        return util_err_set(-errno, "cannot remove stale socket %s: %m", path);
    obs_v(2, "removed stale socket %s", path);
    return 0;
}

int csi_server_start(csi_server *s)
{
    if (s->started)
        return util_err_set(-EALREADY, "server already started");
    int r = clear_stale_socket(s->path);
    if (r < 0)
        return r;
    grpc_server_credentials *creds = grpc_insecure_server_credentials_create();
    mode_t old_mask = 0;
    if (s->opts.owner_only)
        old_mask = umask(0077);
    int port = grpc_server_add_http2_port(s->gs, s->target, creds);
    if (s->opts.owner_only)
        umask(old_mask);
    grpc_server_credentials_release(creds);
    if (port == 0)
        return util_err_set(-EADDRNOTAVAIL, "cannot listen on %s", s->path);
    if (s->opts.socket_mode && chmod(s->path, s->opts.socket_mode) < 0)
        return util_err_set(-errno, "cannot chmod %s: %m", s->path);
    grpc_server_start(s->gs);
    s->started = true;
    s->threads = util_calloc((size_t)s->n_threads, sizeof(pthread_t));
    for (int i = 0; i < s->n_threads; i++)
        arm(s);
    for (int i = 0; i < s->n_threads; i++) {
        if (pthread_create(&s->threads[i], NULL, worker_main, s) != 0) {
            s->n_threads = i;
            csi_server_stop(s, 0);
            return util_err_set(-EAGAIN, "cannot start server threads");
        }
    }
    obs_v(2, "serving gRPC on %s", s->target);
    return 0;
}

static bool wait_shutdown(csi_server *s, util_duration d)
{
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    int64_t ns = until.tv_nsec + d % UTIL_SECOND;
    until.tv_sec += (time_t)(d / UTIL_SECOND + ns / UTIL_SECOND);
    until.tv_nsec = (long)(ns % UTIL_SECOND);
    pthread_mutex_lock(&s->mu);
    while (!s->shutdown_done) {
        if (pthread_cond_timedwait(&s->cond, &s->mu, &until) == ETIMEDOUT)
            break;
    }
    bool done = s->shutdown_done;
    pthread_mutex_unlock(&s->mu);
    return done;
}

void csi_server_stop(csi_server *s, util_duration grace)
{
    if (!s || !s->started || s->stopped)
        return;
    s->stopped = true;
    atomic_store(&s->stopping, true);
    grpc_server_shutdown_and_notify(s->gs, s->cq, &s->shutdown_tag);
    if (!wait_shutdown(s, grace > 0 ? grace : 0)) {
        grpc_server_cancel_all_calls(s->gs);
        wait_shutdown(s, 3600 * UTIL_SECOND);
    }
    /* Cancelled calls count as done while their handlers may still run. */
    while (atomic_load(&s->busy) > 0)
        util_sleep(5 * UTIL_MS);
    grpc_completion_queue_shutdown(s->cq);
    for (int i = 0; i < s->n_threads; i++)
        pthread_join(s->threads[i], NULL);
    if (unlink(s->path) < 0 && errno != ENOENT)
        obs_warn("cannot remove socket %s: %m", s->path);
}

void csi_server_free(csi_server *s)
{
    if (!s)
        return;
    csi_server_stop(s, 0);
    if (!s->started)
        grpc_completion_queue_shutdown(s->cq);
    grpc_server_destroy(s->gs);
    /* Drain anything left so the queue can be destroyed. */
    while (grpc_completion_queue_next(s->cq, gpr_inf_past(GPR_CLOCK_MONOTONIC), NULL).type ==
           GRPC_OP_COMPLETE) {
    }
    grpc_completion_queue_destroy(s->cq);
    for (size_t i = 0; i < s->n_routes; i++)
        free(s->routes[i].path);
    free(s->routes);
    free(s->threads);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cond);
    free(s->target);
    free(s->path);
    free(s);
    grpc_shutdown();
}

const char *csi_server_path(const csi_server *s)
{
    return s->path;
}
