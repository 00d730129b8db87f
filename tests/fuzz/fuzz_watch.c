/*
 * fuzz_watch: the kube client's response handling against a hostile API
 * server. common/kube has no pure entry point for its watch-stream decoder
 * (feed() in watch.c is static), so this target serves each input from a
 * small HTTP server on loopback in a thread of its own and drives the real
 * code with libcurl:
 *
 *   byte 0 even  a watch: the rest, from byte 3 on, is the 200 body, sent
 *                chunked with chunk sizes drawn from bytes 1 and 2, so
 *                libcurl hands it to the decoder split at those points;
 *   byte 0 odd   a GET: byte 1 picks the status code, the rest is the body
 *                (a list, a Status, or anything else).
 *
 * Codes that the client retries (429, 5xx) are left out: their backoff
 * would make every input take seconds. One connection per input
 * (Connection: close), so no state is carried between inputs.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "kobj/kobj.h"
#include "kube/kube.h"

#include "fuzz.h"

static const int codes[] = {200, 201, 400, 401, 403, 404, 409, 410, 422};

/* The answer the server gives next (fuzzing state, set before each request). */
static struct {
    pthread_mutex_t mu;
    uint8_t *body; /* a copy: the server may still send after the client gave up */
    size_t len;
    int code;
    bool chunked;
    uint8_t split[2];
} ans = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int srv_fd = -1;
static kube_config *cfg;
static kube_client *client;

static void send_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n > 0) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w <= 0)
            return;
        c += w;
        n -= (size_t)w;
    }
}

static void serve(int c)
{
    char req[4096];
    size_t got = 0;
    while (got < sizeof(req) - 1) {
        ssize_t n = recv(c, req + got, sizeof(req) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        req[got] = '\0';
        if (strstr(req, "\r\n\r\n") != NULL)
            break;
    }
    pthread_mutex_lock(&ans.mu);
    char head[256];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n%s",
                      ans.code, ans.chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n");
    send_all(c, head, (size_t)hn);
    if (!ans.chunked) {
        send_all(c, ans.body, ans.len);
    } else {
        size_t off = 0;
        for (unsigned i = 0; off < ans.len; i++) {
            size_t n = 1 + (size_t)((ans.split[0] + i * ans.split[1]) % 64);
            if (n > ans.len - off)
                n = ans.len - off;
            char sz[32];
            int sn = snprintf(sz, sizeof(sz), "%zx\r\n", n);
            send_all(c, sz, (size_t)sn);
            send_all(c, ans.body + off, n);
            send_all(c, "\r\n", 2);
            off += n;
        }
        send_all(c, "0\r\n\r\n", 5);
    }
    pthread_mutex_unlock(&ans.mu);
    close(c);
}

static void *server_main(void *ud)
{
    (void)ud;
    for (;;) {
        int c = accept(srv_fd, NULL, NULL);
        if (c >= 0)
            serve(c);
    }
    return NULL;
}

static int setup(void)
{
    if (client != NULL)
        return 0;
    srv_fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t sl = sizeof(sa);
    if (srv_fd < 0 || bind(srv_fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        listen(srv_fd, 16) != 0 || getsockname(srv_fd, (struct sockaddr *)&sa, &sl) != 0)
        abort();
    pthread_t th;
    if (pthread_create(&th, NULL, server_main, NULL) != 0)
        abort();
    int fd = memfd_create("fuzz-watch-kubeconfig", 0);
    if (fd < 0)
        abort();
    dprintf(fd,
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n"
            "    server: http://127.0.0.1:%d\ncontexts:\n- name: c\n  context:\n    cluster: c\n"
            "    user: u\ncurrent-context: c\nusers:\n- name: u\n  user: {}\n",
            ntohs(sa.sin_port));
    char path[64];
    (void)snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    kube_client_opts co = {
        .user_agent = "fuzz_watch/fuzz", .timeout = 10 * UTIL_SECOND, .max_retries = -1};
    if (kube_config_from_file(path, NULL, &cfg) != 0 || kube_client_new(cfg, &co, &client) != 0)
        abort();
    close(fd);
    return 0;
}

/* What a controller does with an event: read it through kobj. */
static int on_event(void *ud, const char *type, json_object *obj)
{
    size_t *n = ud;
    (*n)++;
    (void)type;
    (void)kobj_name(obj);
    (void)kobj_namespace(obj);
    (void)kobj_rv(obj);
    (void)kobj_deleting(obj);
    char *key = kube_key(obj);
    free(key);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3 || size > 65536 || setup() != 0)
        return 0;
    uint8_t *copy = malloc(size - 3 + 1);
    if (copy == NULL)
        return 0;
    memcpy(copy, data + 3, size - 3);
    pthread_mutex_lock(&ans.mu);
    free(ans.body);
    ans.body = copy;
    ans.len = size - 3;
    ans.chunked = (data[0] & 1) == 0;
    ans.code = ans.chunked ? 200 : codes[data[1] % (sizeof(codes) / sizeof(codes[0]))];
    ans.split[0] = data[1];
    ans.split[1] = data[2];
    pthread_mutex_unlock(&ans.mu);

    if (ans.chunked) {
        kube_watch *w = kube_watch_new(client);
        size_t events = 0;
        (void)kube_watch_run(w, "/api/v1/namespaces/default/configmaps?watch=true", on_event,
                             &events);
        kube_watch_free(w);
    } else {
        kube_resp r = {0};
        (void)kube_get(client, "/api/v1/namespaces/default/configmaps?limit=500", &r);
        json_object *items = kobj_get(r.body, "items");
        for (size_t i = 0; i < kobj_len(items); i++)
            free(kube_key(kobj_at(items, i)));
        (void)kube_is_not_found(&r);
        (void)kube_is_conflict(&r);
        kube_resp_clear(&r);
    }
    return 0;
}
