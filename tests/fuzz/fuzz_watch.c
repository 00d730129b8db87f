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
 *                (a list, a Status, or anything else);
 *   byte 0 = 2 (mod 4)  an informer (with a label index): the body up to the
 *                first NUL answers every list, the rest (chunked as above)
 *                every watch; it runs until synced and watched once, or
 *                briefly when the list never syncs.
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
    bool informer; /* lists get body[0, list_len), watches the rest, chunked */
    size_t list_len;
    int lists; /* requests served in informer mode */
    int watches;
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
    char req[4096] = "";
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
    req[got] = '\0';
    const uint8_t *body = ans.body;
    size_t len = ans.len;
    bool chunked = ans.chunked;
    if (ans.informer) {
        chunked = strstr(req, "watch=true") != NULL;
        if (chunked) {
            ans.watches++;
            body = ans.body + ans.list_len + (ans.list_len < ans.len ? 1 : 0);
            len = (size_t)(ans.body + ans.len - body);
        } else {
            ans.lists++;
            len = ans.list_len;
        }
    }
    char head[256];
    int hn = snprintf(head, sizeof(head),
                      "HTTP/1.1 %d X\r\nContent-Type: application/json\r\nConnection: close\r\n%s",
                      ans.code, chunked ? "Transfer-Encoding: chunked\r\n\r\n" : "\r\n");
    send_all(c, head, (size_t)hn);
    if (!chunked) {
        send_all(c, body, len);
    } else {
        size_t off = 0;
        for (unsigned i = 0; off < len; i++) {
            size_t n = 1 + (size_t)((ans.split[0] + i * ans.split[1]) % 64);
            if (n > len - off)
                n = len - off;
            char sz[32];
            int sn = snprintf(sz, sizeof(sz), "%zx\r\n", n);
            send_all(c, sz, (size_t)sn);
            send_all(c, body + off, n);
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

static const kube_resource CM = {"", "v1", "configmaps", "ConfigMap", true, NULL};

static void on_add(void *ud, json_object *obj)
{
    (void)ud;
    (void)kobj_label(obj, "app");
}

static void on_update(void *ud, json_object *old, json_object *obj)
{
    (void)ud;
    (void)kobj_rv(old);
    (void)kobj_rv(obj);
}

static void on_delete(void *ud, json_object *obj)
{
    (void)ud;
    (void)kobj_name(obj);
}

static void by_app(const json_object *obj, void (*add)(void *ctx, const char *key), void *ctx)
{
    const char *app = kobj_label(obj, "app");
    if (app != NULL)
        add(ctx, app);
}

static void count_each(void *ud, json_object *obj)
{
    (void)obj;
    (*(size_t *)ud)++;
}

static int served(bool watch)
{
    pthread_mutex_lock(&ans.mu);
    int n = watch ? ans.watches : ans.lists;
    pthread_mutex_unlock(&ans.mu);
    return n;
}

static void informer(void)
{
    kube_informer_opts o = {
        .res = &CM,
        .ns = "default",
        .handlers = {.on_add = on_add, .on_update = on_update, .on_delete = on_delete},
    };
    kube_informer *inf = NULL;
    if (kube_informer_new(client, &o, &inf) != 0)
        return;
    (void)kube_informer_add_index(inf, "app", by_app);
    if (kube_informer_start(inf) == 0) {
        /* Synced: let it take one watch stream. Not synced in a while: the
         * list was refused, and the informer is in its backoff. */
        if (kube_informer_wait_for_sync(inf, 50 * UTIL_MS) == 0) {
            for (int i = 0; i < 200 && served(true) == 0; i++)
                util_sleep(UTIL_MS);
            size_t n = 0;
            kube_informer_each(inf, count_each, &n);
            (void)kube_informer_by_index(inf, "app", "web", count_each, &n);
            json_object_put(kube_informer_get(inf, "default", "a"));
        }
        kube_informer_stop(inf);
    }
    kube_informer_free(inf);
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
    ans.informer = (data[0] & 3) == 2;
    const uint8_t *nul = memchr(copy, 0, size - 3);
    ans.list_len = nul != NULL ? (size_t)(nul - copy) : size - 3;
    ans.lists = 0;
    ans.watches = 0;
    ans.code = ans.chunked ? 200 : codes[data[1] % (sizeof(codes) / sizeof(codes[0]))];
    ans.split[0] = data[1];
    ans.split[1] = data[2];
    pthread_mutex_unlock(&ans.mu);

    if ((data[0] & 3) == 2) {
        informer();
    } else if (ans.chunked) {
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
