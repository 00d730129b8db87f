/*
 * The diagnostics HTTP server (--http-endpoint / --metrics-address): GET
 * on a few exact paths, served by one libmicrohttpd polling thread.
 *
 * The listening socket is made here rather than by libmicrohttpd so that a
 * bind failure reports its real errno, ":port" can listen dual-stack like
 * Go's net.Listen with an IPv4-only fallback, and port 0 can be read back.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <microhttpd.h>

#include "obs/obs.h"

#define METRICS_CTYPE "text/plain; version=0.0.4; charset=utf-8"
#define TEXT_CTYPE    "text/plain; charset=utf-8"

struct route {
    char *path;
    obs_http_fn fn;
    void *ud;
};

struct obs_http {
    char *flag;
    char *address;
    obs_registry *reg;
    bool any_host; /* ":port": every interface */
    struct sockaddr_storage sa;
    socklen_t sa_len;
    int port; /* requested, then bound */
    struct route *routes;
    size_t n_routes;
    struct MHD_Daemon *d;
};

/* ---- address ------------------------------------------------------------- */

static int bad_address(const char *flag, const char *addr, const char *why)
{
    util_err_set(-EINVAL, "--%s: \"%s\" is not host:port%s", flag, addr, why);
    return -EINVAL;
}

/*
 * Splits like Go's net.SplitHostPort: "host:port", ":port", "[v6]:port".
 * *host is malloc'ed ("" for every interface).
 */
static int split_host_port(const char *flag, const char *addr, char **host, int *port)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL)
        return bad_address(flag, addr, "");
    const char *h = addr, *h_end = colon;
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (close == NULL || close + 1 != colon)
            return bad_address(flag, addr, "");
        h = addr + 1;
        h_end = close;
    } else if (memchr(addr, ':', (size_t)(colon - addr)) != NULL) {
        return bad_address(flag, addr, " (write an IPv6 host in brackets: [::1]:8080)");
    }
    if (memchr(h, '[', (size_t)(h_end - h)) || memchr(h, ']', (size_t)(h_end - h)))
        return bad_address(flag, addr, "");

    const char *p = colon + 1;
    if (*p == '\0')
        return bad_address(flag, addr, "");
    long n = 0;
    for (; *p; p++) {
        if (*p < '0' || *p > '9')
            return bad_address(flag, addr, "");
        n = n * 10 + (*p - '0');
        if (n > 65535) {
            util_err_set(-EINVAL, "--%s: \"%s\": port out of range 0-65535", flag, addr);
            return -EINVAL;
        }
    }
    *host = util_calloc(1, (size_t)(h_end - h) + 1);
    memcpy(*host, h, (size_t)(h_end - h));
    *port = (int)n;
    return 0;
}

/* Resolves a named or numeric host; like Go, prefers its IPv4 address.
 * A bracketed host must be an address literal: no DNS for "[typo]:80". */
static int resolve(obs_http *h, const char *host, bool literal)
{
    struct addrinfo hints = {.ai_family = AF_UNSPEC,
                             .ai_socktype = SOCK_STREAM,
                             .ai_flags = literal ? AI_NUMERICHOST : 0};
    struct addrinfo *res = NULL;
    int rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0)
        return util_err_set(-EINVAL, "--%s: \"%s\": unknown host \"%s\": %s", h->flag, h->address,
                            host, gai_strerror(rc));
    const struct addrinfo *pick = NULL;
    for (const struct addrinfo *ai = res; ai; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET) {
            pick = ai;
            break;
        }
        if (ai->ai_family == AF_INET6 && pick == NULL)
            pick = ai;
    }
    if (pick == NULL || pick->ai_addrlen > sizeof(h->sa)) {
        freeaddrinfo(res);
        return util_err_set(-EINVAL, "--%s: \"%s\": no IP address for host \"%s\"", h->flag,
                            h->address, host);
    }
    memcpy(&h->sa, pick->ai_addr, pick->ai_addrlen);
    h->sa_len = pick->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void set_port(struct sockaddr_storage *sa, int port)
{
    if (sa->ss_family == AF_INET)
        ((struct sockaddr_in *)sa)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)sa)->sin6_port = htons((uint16_t)port);
}

/* ---- requests ------------------------------------------------------------- */

static void metrics_handler(void *ud, int *code, char **body, const char **ctype)
{
    const obs_http *h = ud;
    *code = MHD_HTTP_OK;
    *body = obs_registry_render(h->reg, NULL);
    *ctype = METRICS_CTYPE;
}

/* Sends `body` (taken over and freed by libmicrohttpd when malloc'ed). */
static enum MHD_Result respond(struct MHD_Connection *c, int code, const char *ctype, char *body,
                               bool owned, const char *allow)
{
    size_t len = body ? strlen(body) : 0;
    struct MHD_Response *resp = MHD_create_response_from_buffer(
        len, body ? body : (char *)"",
        owned && body ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (resp == NULL) {
        if (owned)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype ? ctype : TEXT_CTYPE);
    if (allow)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)code, resp);
    MHD_destroy_response(resp);
    return r;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls)
{
    (void)version;
    (void)upload_data;
    (void)upload_data_size;
    (void)con_cls;
    const obs_http *h = cls;
    const struct route *rt = NULL;
    for (size_t i = 0; i < h->n_routes && rt == NULL; i++)
        if (strcmp(h->routes[i].path, url) == 0)
            rt = &h->routes[i];
    /* Answered on the first call, before any request body: nothing here
     * takes one. */
    if (rt == NULL)
        return respond(c, MHD_HTTP_NOT_FOUND, NULL, (char *)"404 page not found\n", false, NULL);
    /* HEAD is GET without the body, which libmicrohttpd drops. */
    if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
        return respond(c, MHD_HTTP_METHOD_NOT_ALLOWED, NULL, (char *)"405 method not allowed\n",
                       false, "GET, HEAD");
    int code = MHD_HTTP_OK;
    char *body = NULL;
    const char *ctype = NULL;
    rt->fn(rt->ud, &code, &body, &ctype);
    return respond(c, code, ctype, body, true, NULL);
}

/* libmicrohttpd's own complaints (accept failures and the like) go to the log. */
__attribute__((format(printf, 2, 0))) static void on_mhd_log(void *cls, const char *fmt, va_list ap)
{
    const obs_http *h = cls;
    char msg[512];
    vsnprintf(msg, sizeof(msg), fmt, ap);
    size_t n = strlen(msg);
    while (n > 0 && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = '\0';
    obs_warn("http server --%s=%s: %s", h->flag, h->address, msg);
}

/* ---- lifecycle ----------------------------------------------------------- */

int obs_http_new(const char *flag_name, const char *address, obs_registry *r,
                 const char *metrics_path, obs_http **out)
{
    *out = NULL;
    const char *flag = flag_name ? flag_name : "http-endpoint";
    if (address == NULL)
        address = "";
    char *host = NULL;
    int port = 0;
    int rc = split_host_port(flag, address, &host, &port);
    if (rc < 0)
        return rc;

    obs_http *h = util_calloc(1, sizeof(*h));
    h->flag = util_strdup(flag);
    h->address = util_strdup(address);
    h->reg = r;
    h->port = port;
    h->any_host = host[0] == '\0';
    if (!h->any_host) {
        rc = resolve(h, host, address[0] == '[');
        if (rc < 0) {
            free(host);
            obs_http_free(h);
            return rc;
        }
        set_port(&h->sa, port);
    }
    free(host);
    if (metrics_path) {
        rc = obs_http_handle(h, metrics_path, metrics_handler, h);
        if (rc < 0) {
            obs_http_free(h);
            return rc;
        }
    }
    *out = h;
    return 0;
}

int obs_http_handle(obs_http *h, const char *path, obs_http_fn fn, void *ud)
{
    if (h == NULL || path == NULL || path[0] != '/' || fn == NULL)
        return util_err_set(-EINVAL, "http: handler path must start with '/'");
    if (h->d)
        return util_err_set(-EBUSY, "http: handler %s added after start", path);
    for (size_t i = 0; i < h->n_routes; i++)
        if (strcmp(h->routes[i].path, path) == 0)
            return util_err_set(-EEXIST, "http: path %s is already served", path);
    struct route *routes = util_calloc(h->n_routes + 1, sizeof(*routes));
    if (h->n_routes)
        memcpy(routes, h->routes, h->n_routes * sizeof(*routes));
    free(h->routes);
    h->routes = routes;
    h->routes[h->n_routes++] = (struct route){util_strdup(path), fn, ud};
    return 0;
}

/* A bound, listening socket for the address; -errno on failure. */
static int listen_socket(obs_http *h, int *fd_out, bool *v6)
{
    struct sockaddr_storage sa = h->sa;
    socklen_t sa_len = h->sa_len;
    for (int attempt = 0; attempt < 2; attempt++) {
        if (h->any_host) {
            /* Go listens on [::] accepting IPv4 too; without IPv6 in the
             * kernel that is 0.0.0.0. */
            memset(&sa, 0, sizeof(sa));
            if (attempt == 0) {
                struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&sa;
                s6->sin6_family = AF_INET6;
                s6->sin6_addr = in6addr_any;
                sa_len = sizeof(*s6);
            } else {
                struct sockaddr_in *s4 = (struct sockaddr_in *)&sa;
                s4->sin_family = AF_INET;
                s4->sin_addr.s_addr = htonl(INADDR_ANY);
                sa_len = sizeof(*s4);
            }
            set_port(&sa, h->port);
        }
        int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            int err = errno;
            if (h->any_host && attempt == 0 && err == EAFNOSUPPORT)
                continue;
            return -err;
        }
        int one = 1, zero = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (h->any_host && sa.ss_family == AF_INET6)
            setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
        if (bind(fd, (struct sockaddr *)&sa, sa_len) < 0 || listen(fd, SOMAXCONN) < 0) {
            int err = errno;
            close(fd);
            if (h->any_host && attempt == 0 && err == EADDRNOTAVAIL)
                continue;
            return -err;
        }
        *fd_out = fd;
        *v6 = sa.ss_family == AF_INET6;
        return 0;
    }
    return -EAFNOSUPPORT;
}

int obs_http_start(obs_http *h)
{
    if (h == NULL)
        return util_err_set(-EINVAL, "http: no server");
    if (h->d)
        return util_err_set(-EALREADY, "--%s: server already started", h->flag);
    int fd = -1;
    bool v6 = false;
    int rc = listen_socket(h, &fd, &v6);
    if (rc < 0)
        return util_err_set(rc, "--%s: cannot listen on \"%s\": %s", h->flag, h->address,
                            strerror(-rc));
    union {
        struct sockaddr sa;
        struct sockaddr_in in;
        struct sockaddr_in6 in6;
        struct sockaddr_storage ss;
    } bound;
    memset(&bound, 0, sizeof(bound));
    socklen_t bound_len = sizeof(bound);
    if (getsockname(fd, &bound.sa, &bound_len) == 0)
        h->port = ntohs(v6 ? bound.in6.sin6_port : bound.in.sin_port);

    /* One polling thread: scrapes are rare and the handlers are quick.
     * The timeout keeps an idle client from holding a connection. */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (v6)
        flags |= MHD_USE_IPv6;
    h->d =
        MHD_start_daemon(flags, 0, NULL, NULL, on_request, h, MHD_OPTION_EXTERNAL_LOGGER,
                         on_mhd_log, h, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_TIMEOUT,
                         30u, MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_END);
    if (h->d == NULL) {
        /* Not closing fd: libmicrohttpd may already have, and a double
         * close could hit another thread's descriptor. */
        return util_err_set(-EIO, "--%s: cannot start the HTTP server on \"%s\"", h->flag,
                            h->address);
    }
    return 0;
}

int obs_http_port(const obs_http *h)
{
    return h ? h->port : -1;
}

void obs_http_free(obs_http *h)
{
    if (h == NULL)
        return;
    /* Joins the polling thread and closes the listening socket. */
    if (h->d)
        MHD_stop_daemon(h->d);
    for (size_t i = 0; i < h->n_routes; i++)
        free(h->routes[i].path);
    free(h->routes);
    free(h->flag);
    free(h->address);
    free(h);
}
