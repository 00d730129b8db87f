/*
 * Tests for the config part of common/kube: kubeconfig parsing as client-go's
 * clientcmd reads it (every supported form, and each malformed kubeconfig
 * with its exact one-line message), --master and $KUBECONFIG precedence,
 * in-cluster config with a fake service-account directory (token rotation),
 * and exec credential plugins written as shell scripts (caching until
 * expiry, failures, certificates). Tables: one row per rule; a failing row
 * names itself.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness.h"
#include "kube/kube.h"

#define N_ROWS(t) (sizeof(t) / sizeof((t)[0]))

/* Fake PEM blocks and their base64 (the content is never parsed as X.509 here). */
#define CA_PEM   "-----BEGIN CERTIFICATE-----\nY2E=\n-----END CERTIFICATE-----\n"
#define CA_B64   "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClkyRT0KLS0tLS1FTkQgQ0VSVElGSUNBVEUtLS0tLQo="
#define CERT_PEM "-----BEGIN CERTIFICATE-----\nY2VydA==\n-----END CERTIFICATE-----\n"
#define CERT_B64                                                                                   \
    "LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tClkyVnlkQT09Ci0tLS0tRU5EIENFUlRJRklDQVRFLS0tLS0K"
#define KEY_PEM      "-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n"
#define KEY_B64      "LS0tLS1CRUdJTiBQUklWQVRFIEtFWS0tLS0tCmEyVjUKLS0tLS1FTkQgUFJJVkFURSBLRVktLS0tLQo="
#define NOT_PEM_B64  "aGVsbG8=" /* "hello" */
#define EMPTY_CONFIG "invalid configuration: no configuration has been provided"
#define NOT_IN_CLUSTER                                                                             \
    "unable to load in-cluster configuration, KUBERNETES_SERVICE_HOST and "                        \
    "KUBERNETES_SERVICE_PORT must be defined"

/* The usual frame: context ctx -> cluster c1 + user u1. */
#define HEAD                                                                                       \
    "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n"                                         \
    "contexts:\n- name: ctx\n  context:\n    cluster: c1\n    user: u1\n"
#define CLUSTER(body) "clusters:\n- name: c1\n  cluster:\n" body
#define SERVER        "    server: https://k.example:6443\n"
#define USER(body)    "users:\n- name: u1\n  user:\n" body

/* ---- helpers --------------------------------------------------------------------- */

static void expect_str(const char *row, const char *what, const char *got, const char *want)
{
    if (got == NULL && want == NULL)
        return;
    if (got == NULL || want == NULL || strcmp(got, want) != 0)
        fail_msg("[%s] %s:\n  got  \"%s\"\n  want \"%s\"", row, what, got ? got : "(null)",
                 want ? want : "(null)");
}

static void expect_int(const char *row, const char *what, long long got, long long want)
{
    if (got != want)
        fail_msg("[%s] %s: got %lld, want %lld (last error: %s)", row, what, got, want,
                 util_err_last());
}

/* Replaces {D} with `dir` and {F} with `file` (either may be NULL when unused). */
static char *subst(const char *tmpl, const char *dir, const char *file)
{
    size_t cap = strlen(tmpl) + 1;
    for (const char *p = tmpl; (p = strchr(p, '{')) != NULL; p++)
        cap += 4096;
    char *out = util_calloc(cap, 1);
    size_t o = 0;
    for (const char *p = tmpl; *p != '\0';) {
        const char *rep = NULL;
        if (strncmp(p, "{D}", 3) == 0)
            rep = dir;
        else if (strncmp(p, "{F}", 3) == 0)
            rep = file;
        if (rep != NULL) {
            size_t n = strlen(rep);
            memcpy(out + o, rep, n);
            o += n;
            p += 3;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    return out;
}

static void write_text(const char *path, const char *text, mode_t mode)
{
    FILE *fp = fopen(path, "w");
    assert_non_null(fp);
    fputs(text, fp);
    assert_int_equal(fclose(fp), 0);
    assert_int_equal(chmod(path, mode), 0);
}

/* A fresh directory under the test's scratch dir. */
static char *new_dir(const char *name)
{
    static int seq;
    char *dir = util_asprintf("%s/%s-%d", th_tmpdir(), name, ++seq);
    assert_int_equal(mkdir(dir, 0700), 0);
    return dir;
}

/* Writes `yaml` (after {D} substitution) to <dir>/config; returns the path. */
static char *write_config(const char *dir, const char *yaml)
{
    char *path = util_asprintf("%s/config", dir);
    char *text = subst(yaml, dir, path);
    write_text(path, text, 0600);
    free(text);
    return path;
}

static int read_count(const char *dir)
{
    char *path = util_asprintf("%s/count", dir);
    FILE *fp = fopen(path, "r");
    free(path);
    if (fp == NULL)
        return 0;
    int n = 0;
    if (fscanf(fp, "%d", &n) != 1)
        n = -1;
    fclose(fp);
    return n;
}

static char *slurp(const char *path)
{
    FILE *fp = fopen(path, "r");
    if (fp == NULL)
        return NULL;
    char buf[8192];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = '\0';
    return util_strdup(buf);
}

/* ---- valid kubeconfigs ----------------------------------------------------------- */

struct ok_row {
    const char *name;
    const char *yaml;   /* {D}: the kubeconfig's directory */
    const char *master; /* --master */
    const char *server, *ns;
    bool insecure;
    const char *server_name, *ca_file, *ca_pem, *cert_file, *cert_pem, *key_file, *key_pem;
    const char *token;
};

static const struct ok_row ok_rows[] = {
    {.name = "static token and namespace",
     .yaml = "apiVersion: v1\nkind: Config\ncurrent-context: ctx\n"
             "contexts:\n- name: ctx\n  context:\n    cluster: c1\n    user: u1\n"
             "    namespace: team-a\n" CLUSTER(SERVER) USER("    token: tok-static\n"),
     .server = "https://k.example:6443",
     .ns = "team-a",
     .token = "tok-static"},
    {.name = "no namespace is default",
     .yaml = HEAD CLUSTER(SERVER) USER("    token: t\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "t"},
    {.name = "certificate-authority-data and tls-server-name",
     .yaml = HEAD CLUSTER(SERVER "    certificate-authority-data: " CA_B64 "\n"
                                 "    tls-server-name: api.internal\n") USER("    token: t\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .server_name = "api.internal",
     .ca_pem = CA_PEM,
     .token = "t"},
    {.name = "relative certificate-authority resolves against the kubeconfig's dir",
     .yaml = HEAD CLUSTER(SERVER "    certificate-authority: pki/ca.crt\n") USER("    token: t\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .ca_file = "{D}/pki/ca.crt",
     .token = "t"},
    {.name = "absolute certificate-authority",
     .yaml =
         HEAD CLUSTER(SERVER "    certificate-authority: {D}/pki/ca.crt\n") USER("    token: t\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .ca_file = "{D}/pki/ca.crt",
     .token = "t"},
    {.name = "insecure-skip-tls-verify true",
     .yaml = HEAD CLUSTER(SERVER "    insecure-skip-tls-verify: true\n") USER("    token: t\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .insecure = true,
     .token = "t"},
    {.name = "insecure-skip-tls-verify YAML 1.1 yes",
     .yaml = HEAD CLUSTER(SERVER "    insecure-skip-tls-verify: yes\n") USER("    token: t\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .insecure = true,
     .token = "t"},
    {.name = "client certificate data decoded",
     .yaml = HEAD CLUSTER(SERVER) USER("    client-certificate-data: " CERT_B64 "\n"
                                       "    client-key-data: " KEY_B64 "\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .cert_pem = CERT_PEM,
     .key_pem = KEY_PEM},
    {.name = "client certificate files, relative",
     .yaml = HEAD CLUSTER(SERVER) USER("    client-certificate: pki/client.crt\n"
                                       "    client-key: pki/client.key\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .cert_file = "{D}/pki/client.crt",
     .key_file = "{D}/pki/client.key"},
    {.name = "certificate file with key data",
     .yaml = HEAD CLUSTER(SERVER) USER("    client-certificate: pki/client.crt\n"
                                       "    client-key-data: " KEY_B64 "\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .cert_file = "{D}/pki/client.crt",
     .key_pem = KEY_PEM},
    {.name = "tokenFile, relative and trimmed",
     .yaml = HEAD CLUSTER(SERVER) USER("    tokenFile: pki/token\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "tok-from-file"},
    {.name = "tokenFile wins over token",
     .yaml = HEAD CLUSTER(SERVER) USER("    token: tok-static\n    tokenFile: pki/token\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "tok-from-file"},
    {.name = "missing tokenFile falls back to token",
     .yaml = HEAD CLUSTER(SERVER) USER("    token: tok-static\n    tokenFile: pki/nope\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "tok-static"},
    {.name = "--master overrides server and clears tls-server-name",
     .yaml = HEAD CLUSTER(SERVER "    certificate-authority-data: " CA_B64 "\n"
                                 "    tls-server-name: api.internal\n") USER("    token: t\n"),
     .master = "https://10.0.0.1:443",
     .server = "https://10.0.0.1:443",
     .ns = "default",
     .ca_pem = CA_PEM,
     .token = "t"},
    {.name = "--master with no current-context: the host alone",
     .yaml = CLUSTER(SERVER) USER("    token: t\n"),
     .master = "https://10.0.0.1:443",
     .server = "https://10.0.0.1:443",
     .ns = "default"},
    {.name = "--master with an empty file",
     .yaml = "",
     .master = "http://127.0.0.1:8001",
     .server = "http://127.0.0.1:8001",
     .ns = "default"},
    {.name = "--master stands in for a context without cluster",
     .yaml = "current-context: ctx\ncontexts:\n- name: ctx\n  context:\n    user: u1\n"
             "    namespace: n1\n" USER("    token: t\n"),
     .master = "https://10.0.0.1:443",
     .server = "https://10.0.0.1:443",
     .ns = "n1",
     .token = "t"},
    {.name = "http server: no credentials, no TLS",
     .yaml = HEAD CLUSTER("    server: http://127.0.0.1:8080\n"
                          "    certificate-authority-data: " CA_B64 "\n") USER("    token: t\n"),
     .server = "http://127.0.0.1:8080",
     .ns = "default"},
    {.name = "server without scheme is http",
     .yaml = HEAD CLUSTER("    server: 127.0.0.1:8080\n") USER("    token: t\n"),
     .server = "http://127.0.0.1:8080",
     .ns = "default"},
    {.name = "trailing slash dropped, path prefix kept",
     .yaml = HEAD CLUSTER("    server: https://rancher.example/k8s/clusters/c-1/\n")
         USER("    token: t\n"),
     .server = "https://rancher.example/k8s/clusters/c-1",
     .ns = "default",
     .token = "t"},
    {.name = "context without user is anonymous",
     .yaml = "current-context: ctx\ncontexts:\n- name: ctx\n  context:\n    cluster: c1\n" CLUSTER(
         SERVER),
     .server = "https://k.example:6443",
     .ns = "default"},
    {.name = "null and ~ values are absent",
     .yaml = "current-context: ctx\ncontexts:\n- name: ctx\n  context:\n    cluster: c1\n"
             "    user: u1\n    namespace: ~\n" CLUSTER(SERVER "    tls-server-name: null\n")
                 USER("    token: t\n    tokenFile:\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "t"},
    {.name = "JSON kubeconfig (YAML flow style)",
     .yaml = "{\"apiVersion\":\"v1\",\"kind\":\"Config\",\"current-context\":\"ctx\","
             "\"contexts\":[{\"name\":\"ctx\",\"context\":{\"cluster\":\"c1\",\"user\":\"u1\","
             "\"namespace\":\"j\"}}],\"clusters\":[{\"name\":\"c1\",\"cluster\":{\"server\":"
             "\"https://j:6443\",\"insecure-skip-tls-verify\":true}}],\"users\":[{\"name\":\"u1\","
             "\"user\":{\"token\":\"tj\"}}]}",
     .server = "https://j:6443",
     .ns = "j",
     .insecure = true,
     .token = "tj"},
    {.name = "anchors and aliases",
     .yaml = "current-context: ctx\ncontexts:\n- name: ctx\n  context:\n    cluster: c1\n"
             "    user: u1\nclusters:\n- name: c0\n  cluster: &c {server: 'https://a:1'}\n"
             "- name: c1\n  cluster: *c\n" USER("    token: t\n"),
     .server = "https://a:1",
     .ns = "default",
     .token = "t"},
    {.name = "only the chosen entries are validated",
     .yaml = HEAD CLUSTER(
         SERVER) "- name: c2\n  cluster:\n    certificate-authority: /nope\n"
                 "users:\n- name: u1\n  user:\n    token: t\n"
                 "- name: u2\n  user:\n    username: admin\n    client-certificate: /nope\n",
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "t"},
    {.name = "unknown fields are ignored",
     .yaml = HEAD "preferences: {colors: true}\n" CLUSTER(SERVER "    disable-compression: true\n"
                                                                 "    extensions: []\n")
         USER("    token: t\n    extensions: [{name: x, extension: {}}]\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "t"},
    {.name = "exec plugin ignored when a token is set",
     .yaml = HEAD CLUSTER(SERVER) USER("    token: t\n    exec:\n"
                                       "      apiVersion: client.authentication.k8s.io/v1\n"
                                       "      command: /nonexistent/plugin\n"
                                       "      interactiveMode: Never\n"),
     .server = "https://k.example:6443",
     .ns = "default",
     .token = "t"},
    {.name = "duplicate key: the last wins",
     .yaml = HEAD CLUSTER("    server: https://first:1\n    server: https://second:2\n")
         USER("    token: t\n"),
     .server = "https://second:2",
     .ns = "default",
     .token = "t"},
};

static void prepare_pki(const char *dir)
{
    char *pki = util_asprintf("%s/pki", dir);
    assert_int_equal(mkdir(pki, 0700), 0);
    char *p = util_asprintf("%s/ca.crt", pki);
    write_text(p, CA_PEM, 0600);
    free(p);
    p = util_asprintf("%s/client.crt", pki);
    write_text(p, CERT_PEM, 0600);
    free(p);
    p = util_asprintf("%s/client.key", pki);
    write_text(p, KEY_PEM, 0600);
    free(p);
    p = util_asprintf("%s/token", pki);
    write_text(p, "  tok-from-file\n", 0600);
    free(p);
    free(pki);
}

static void expect_path(const char *row, const char *what, const char *got, const char *want,
                        const char *dir)
{
    char *w = want != NULL ? subst(want, dir, NULL) : NULL;
    expect_str(row, what, got, w);
    free(w);
}

static void test_valid_kubeconfigs(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(ok_rows); i++) {
        const struct ok_row *r = &ok_rows[i];
        char *dir = new_dir("ok");
        prepare_pki(dir);
        char *path = write_config(dir, r->yaml);
        kube_config *c = NULL;
        int rc = kube_config_from_file(path, r->master, &c);
        expect_int(r->name, "rc", rc, 0);
        expect_str(r->name, "server", kube_config_server(c), r->server);
        expect_str(r->name, "namespace", kube_config_namespace(c), r->ns);
        const kube_tls *t = kube_config_tls(c);
        expect_int(r->name, "insecure", t->insecure, r->insecure);
        expect_str(r->name, "server_name", t->server_name, r->server_name);
        expect_path(r->name, "ca_file", t->ca_file, r->ca_file, dir);
        expect_str(r->name, "ca_pem", t->ca_pem, r->ca_pem);
        expect_path(r->name, "cert_file", t->cert_file, r->cert_file, dir);
        expect_str(r->name, "cert_pem", t->cert_pem, r->cert_pem);
        expect_path(r->name, "key_file", t->key_file, r->key_file, dir);
        expect_str(r->name, "key_pem", t->key_pem, r->key_pem);
        char *tok = NULL;
        expect_int(r->name, "token rc", kube_config_token(c, &tok), 0);
        expect_str(r->name, "token", tok, r->token);
        free(tok);
        kube_config_free(c);
        free(path);
        free(dir);
    }
}

/* ---- malformed kubeconfigs ------------------------------------------------------- */

struct bad_row {
    const char *name;
    const char *yaml;
    int err;
    const char *msg; /* {F}: the kubeconfig path, {D}: its directory */
};

#define EXEC_V1(body) USER("    exec:\n      apiVersion: client.authentication.k8s.io/v1\n" body)

static const struct bad_row bad_rows[] = {
    {"YAML syntax error", "current-context: a: b\n", -EINVAL,
     "kubeconfig {F}: YAML syntax error at line 1, column 19: mapping values are not allowed in "
     "this context"},
    {"YAML syntax error with context", "clusters:\n- name: c1\n  cluster: {server: x\n", -EINVAL,
     "kubeconfig {F}: YAML syntax error at line 4, column 1: did not find expected ',' or '}' "
     "(while parsing a flow mapping)"},
    {"top level is a list", "- a\n- b\n", -EINVAL,
     "kubeconfig {F}: not a kubeconfig: top level is not a mapping"},
    {"top level is a scalar", "hello\n", -EINVAL,
     "kubeconfig {F}: not a kubeconfig: top level is not a mapping"},
    {"empty file", "", -EINVAL, "kubeconfig {F}: " EMPTY_CONFIG " (the file is empty)"},
    {"no current-context", CLUSTER(SERVER) USER("    token: t\n"), -EINVAL,
     "kubeconfig {F}: " EMPTY_CONFIG " (current-context is not set)"},
    {"kind is not Config", "kind: Pod\napiVersion: v1\n", -EINVAL,
     "kubeconfig {F}: kind: \"Pod\" is not Config: not a kubeconfig"},
    {"apiVersion is not v1", "kind: Config\napiVersion: v2\n", -EINVAL,
     "kubeconfig {F}: apiVersion: \"v2\" is not v1"},
    {"current-context not found", "current-context: nope\n" CLUSTER(SERVER), -EINVAL,
     "kubeconfig {F}: current-context: \"nope\" not found in contexts"},
    {"context's cluster not found", HEAD USER("    token: t\n"), -EINVAL,
     "kubeconfig {F}: contexts[0].context.cluster \"c1\" not found in clusters"},
    {"context's user not found", HEAD CLUSTER(SERVER), -EINVAL,
     "kubeconfig {F}: contexts[0].context.user \"u1\" not found in users"},
    {"context without cluster",
     "current-context: ctx\ncontexts:\n- name: ctx\n  context: {user: u1}\n" USER("    token: t\n"),
     -EINVAL, "kubeconfig {F}: contexts[0].context.cluster: not set"},
    {"clusters is not a list", HEAD "clusters: {c1: {}}\n", -EINVAL,
     "kubeconfig {F}: clusters: not a list"},
    {"clusters[0] is not a mapping", HEAD "clusters:\n- c1\n", -EINVAL,
     "kubeconfig {F}: clusters[0]: not a mapping"},
    {"cluster body is not a mapping", HEAD "clusters:\n- name: c1\n  cluster: [a]\n", -EINVAL,
     "kubeconfig {F}: clusters[0].cluster: not a mapping"},
    {"server is not a string", HEAD CLUSTER("    server: {a: b}\n"), -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.server: not a string"},
    {"server not set", HEAD CLUSTER("    insecure-skip-tls-verify: true\n") USER("    token: t\n"),
     -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.server: not set (no server found for cluster \"c1\")"},
    {"certificate-authority-data not base64",
     HEAD CLUSTER(SERVER "    certificate-authority-data: not*base64\n"), -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.certificate-authority-data: not valid base64"},
    {"certificate-authority-data not PEM",
     HEAD CLUSTER(SERVER "    certificate-authority-data: " NOT_PEM_B64 "\n"), -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.certificate-authority-data: decoded data is not PEM "
     "(no \"-----BEGIN\" line)"},
    {"certificate-authority and -data both set",
     HEAD CLUSTER(SERVER "    certificate-authority: pki/ca.crt\n"
                         "    certificate-authority-data: " CA_B64 "\n") USER("    token: t\n"),
     -EINVAL,
     "kubeconfig {F}: clusters[0].cluster: certificate-authority and certificate-authority-data "
     "are both set"},
    {"certificate-authority missing",
     HEAD CLUSTER(SERVER "    certificate-authority: pki/missing.crt\n") USER("    token: t\n"),
     -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.certificate-authority: cannot read "
     "{D}/pki/missing.crt: No such file or directory"},
    {"insecure with a CA",
     HEAD CLUSTER(SERVER "    insecure-skip-tls-verify: true\n"
                         "    certificate-authority-data: " CA_B64 "\n") USER("    token: t\n"),
     -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.insecure-skip-tls-verify: cannot be combined with a "
     "certificate authority (specifying a root certificates file with the insecure flag is not "
     "allowed)"},
    {"insecure not a boolean", HEAD CLUSTER(SERVER "    insecure-skip-tls-verify: maybe\n"),
     -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.insecure-skip-tls-verify: not a boolean (\"maybe\")"},
    {"insecure quoted", HEAD CLUSTER(SERVER "    insecure-skip-tls-verify: \"true\"\n"), -EINVAL,
     "kubeconfig {F}: clusters[0].cluster.insecure-skip-tls-verify: not a boolean (\"true\")"},
    {"duplicate cluster name", HEAD CLUSTER(SERVER) "- name: c1\n  cluster:\n" SERVER, -EINVAL,
     "kubeconfig {F}: clusters[1].name: \"c1\" is already used by clusters[0]"},
    {"type error in an unused entry",
     HEAD CLUSTER(SERVER) USER("    token: t\n") "- name: u2\n  user:\n    token: [a]\n", -EINVAL,
     "kubeconfig {F}: users[1].user.token: not a string"},
    {"basic auth", HEAD CLUSTER(SERVER) USER("    username: admin\n    password: secret\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user.username: basic authentication (username/password) is not "
     "supported; use a token, a client certificate or an exec plugin"},
    {"password alone", HEAD CLUSTER(SERVER) USER("    password: secret\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.password: basic authentication (username/password) is not "
     "supported; use a token, a client certificate or an exec plugin"},
    {"client-certificate-data not base64",
     HEAD CLUSTER(SERVER) USER("    client-certificate-data: Zm9v!\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.client-certificate-data: not valid base64"},
    {"client-key-data unpadded base64", HEAD CLUSTER(SERVER) USER("    client-key-data: Zm9vYg\n"),
     -EINVAL, "kubeconfig {F}: users[0].user.client-key-data: not valid base64"},
    {"certificate without key",
     HEAD CLUSTER(SERVER) USER("    client-certificate-data: " CERT_B64 "\n"), -EINVAL,
     "kubeconfig {F}: users[0].user: client-certificate needs client-key or client-key-data"},
    {"key without certificate", HEAD CLUSTER(SERVER) USER("    client-key: pki/client.key\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user: client-key needs client-certificate or "
     "client-certificate-data"},
    {"certificate file and data",
     HEAD CLUSTER(SERVER) USER("    client-certificate: pki/client.crt\n"
                               "    client-certificate-data: " CERT_B64 "\n"
                               "    client-key: pki/client.key\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user: client-certificate and client-certificate-data are both "
     "set"},
    {"key file and data",
     HEAD CLUSTER(SERVER) USER("    client-certificate: pki/client.crt\n"
                               "    client-key-data: " KEY_B64 "\n"
                               "    client-key: pki/client.key\n"),
     -EINVAL, "kubeconfig {F}: users[0].user: client-key and client-key-data are both set"},
    {"certificate file missing",
     HEAD CLUSTER(SERVER) USER("    client-certificate: nope.crt\n"
                               "    client-key: pki/client.key\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user.client-certificate: cannot read {D}/nope.crt: No such file "
     "or directory"},
    {"tokenFile missing", HEAD CLUSTER(SERVER) USER("    tokenFile: nope\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.tokenFile: cannot read {D}/nope: No such file or directory"},
    {"tokenFile empty", HEAD CLUSTER(SERVER) USER("    tokenFile: pki/empty\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.tokenFile: {D}/pki/empty is empty"},
    {"auth-provider", HEAD CLUSTER(SERVER) USER("    auth-provider: {name: oidc}\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.auth-provider: auth providers are not supported; use an exec "
     "plugin"},
    {"impersonation", HEAD CLUSTER(SERVER) USER("    token: t\n    as: admin\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.as: impersonation is not supported"},
    {"exec without command", HEAD CLUSTER(SERVER) EXEC_V1("      interactiveMode: Never\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user.exec.command: not set (command must be specified to use exec "
     "authentication)"},
    {"exec without apiVersion",
     HEAD CLUSTER(SERVER) USER("    exec:\n      command: x\n      interactiveMode: Never\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user.exec.apiVersion: not set (apiVersion must be specified to use "
     "exec authentication)"},
    {"exec v1alpha1",
     HEAD CLUSTER(SERVER) USER("    exec:\n      command: x\n"
                               "      apiVersion: client.authentication.k8s.io/v1alpha1\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user.exec.apiVersion: \"client.authentication.k8s.io/v1alpha1\" "
     "is not supported (use client.authentication.k8s.io/v1 or "
     "client.authentication.k8s.io/v1beta1)"},
    {"exec v1 without interactiveMode", HEAD CLUSTER(SERVER) EXEC_V1("      command: x\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.exec.interactiveMode: not set (interactiveMode must be "
     "specified for client.authentication.k8s.io/v1)"},
    {"exec interactiveMode Always",
     HEAD CLUSTER(SERVER) EXEC_V1("      command: x\n      interactiveMode: Always\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.exec.interactiveMode: Always is not supported: a sidecar has "
     "no terminal (exec plugin cannot support interactive mode: standard input is not a "
     "terminal); use IfAvailable or Never"},
    {"exec interactiveMode invalid",
     HEAD CLUSTER(SERVER) EXEC_V1("      command: x\n      interactiveMode: Sometimes\n"), -EINVAL,
     "kubeconfig {F}: users[0].user.exec.interactiveMode: invalid value \"Sometimes\" (want "
     "Never, IfAvailable or Always)"},
    {"exec env without name",
     HEAD CLUSTER(SERVER) EXEC_V1("      command: x\n      interactiveMode: Never\n"
                                  "      env:\n      - value: v\n"),
     -EINVAL,
     "kubeconfig {F}: users[0].user.exec.env[0].name: not set (env variable name must be "
     "specified)"},
    {"exec args not a list",
     HEAD CLUSTER(SERVER) EXEC_V1("      command: x\n      interactiveMode: Never\n"
                                  "      args: --token\n"),
     -EINVAL, "kubeconfig {F}: users[0].user.exec.args: not a list"},
    {"exec args item not a string",
     HEAD CLUSTER(SERVER) EXEC_V1("      command: x\n      interactiveMode: Never\n"
                                  "      args: [[a]]\n"),
     -EINVAL, "kubeconfig {F}: users[0].user.exec.args[0]: not a string"},
    {"exec provideClusterInfo not a boolean",
     HEAD CLUSTER(SERVER) EXEC_V1("      command: x\n      interactiveMode: Never\n"
                                  "      provideClusterInfo: sure\n"),
     -EINVAL, "kubeconfig {F}: users[0].user.exec.provideClusterInfo: not a boolean (\"sure\")"},
};

static void test_malformed_kubeconfigs(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(bad_rows); i++) {
        const struct bad_row *r = &bad_rows[i];
        char *dir = new_dir("bad");
        prepare_pki(dir);
        char *empty = util_asprintf("%s/pki/empty", dir);
        write_text(empty, "\n", 0600);
        free(empty);
        char *path = write_config(dir, r->yaml);
        kube_config *c = (kube_config *)&c; /* must come back NULL */
        util_err_clear();
        int rc = kube_config_from_file(path, NULL, &c);
        expect_int(r->name, "rc", rc, r->err);
        if (c != NULL)
            fail_msg("[%s] config not NULL on error", r->name);
        char *want = subst(r->msg, dir, path);
        expect_str(r->name, "message", util_err_last(), want);
        free(want);
        free(path);
        free(dir);
    }
}

static void test_missing_file(void **state)
{
    (void)state;
    kube_config *c = NULL;
    assert_int_equal(kube_config_from_file("/nonexistent/kubeconfig", NULL, &c), -ENOENT);
    assert_null(c);
    assert_string_equal(util_err_last(),
                        "kubeconfig /nonexistent/kubeconfig: cannot read: No such file or "
                        "directory");
}

/* Secrets never reach messages: a failing file whose token is a secret. */
static void test_no_secret_in_messages(void **state)
{
    (void)state;
    char *dir = new_dir("secret");
    char *path = write_config(dir, HEAD CLUSTER("    insecure-skip-tls-verify: true\n")
                                       USER("    token: SECRET-TOKEN\n    password: SECRET-PW\n"));
    kube_config *c = NULL;
    assert_int_equal(kube_config_from_file(path, NULL, &c), -EINVAL);
    assert_null(strstr(util_err_last(), "SECRET"));
    free(path);
    free(dir);
}

/* ---- load: --kubeconfig, $KUBECONFIG, --master, in-cluster ----------------------- */

static void test_load_precedence(void **state)
{
    (void)state;
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
    char *da = new_dir("env-a"), *db = new_dir("env-b");
    char *a = write_config(da, HEAD CLUSTER("    server: https://a:1\n") USER("    token: ta\n"));
    char *b = write_config(db, HEAD CLUSTER("    server: https://b:2\n") USER("    token: tb\n"));
    kube_config *c = NULL;

    /* $KUBECONFIG: the first existing file of the list. */
    char *list = util_asprintf("%s/missing::%s:%s", da, a, b);
    setenv("KUBECONFIG", list, 1);
    assert_int_equal(kube_config_load(NULL, NULL, true, &c), 0);
    assert_string_equal(kube_config_server(c), "https://a:1");
    kube_config_free(c);

    /* The flag wins over $KUBECONFIG; --master wins over both servers. */
    assert_int_equal(kube_config_load(b, NULL, true, &c), 0);
    assert_string_equal(kube_config_server(c), "https://b:2");
    kube_config_free(c);
    assert_int_equal(kube_config_load("", "https://m:3", true, &c), 0);
    assert_string_equal(kube_config_server(c), "https://m:3");
    char *tok = NULL;
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_string_equal(tok, "ta"); /* $KUBECONFIG's user, --master's server */
    free(tok);
    kube_config_free(c);

    /* use_env false: $KUBECONFIG is not looked at. */
    assert_int_equal(kube_config_load(NULL, NULL, false, &c), -ENOENT);
    assert_string_equal(util_err_last(), NOT_IN_CLUSTER);
    assert_null(c);

    /* --master alone: the host and nothing else, like client-go. */
    assert_int_equal(kube_config_load(NULL, "http://127.0.0.1:8001", false, &c), 0);
    assert_string_equal(kube_config_server(c), "http://127.0.0.1:8001");
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_null(tok);
    assert_null(kube_config_tls(c)->ca_file);
    kube_config_free(c);

    /* $KUBECONFIG naming no existing file. */
    char *none = util_asprintf("%s/x:%s/y", da, db);
    setenv("KUBECONFIG", none, 1);
    assert_int_equal(kube_config_load(NULL, NULL, true, &c), -ENOENT);
    char *want = util_asprintf("kubeconfig $KUBECONFIG=%s: no such file", none);
    assert_string_equal(util_err_last(), want);
    free(want);
    free(none);

    /* An empty $KUBECONFIG is unset. */
    setenv("KUBECONFIG", "", 1);
    assert_int_equal(kube_config_load(NULL, NULL, true, &c), -ENOENT);
    assert_string_equal(util_err_last(), NOT_IN_CLUSTER);

    /* A broken kubeconfig named by the flag is reported, not skipped. */
    write_text(b, "- not a config\n", 0600);
    assert_int_equal(kube_config_load(b, NULL, true, &c), -EINVAL);
    unsetenv("KUBECONFIG");
    free(list);
    free(a);
    free(b);
    free(da);
    free(db);
}

/* ---- in-cluster ------------------------------------------------------------------ */

static char *fake_sa_dir(const char *token, bool ca, const char *ns)
{
    char *dir = new_dir("sa");
    char *p = util_asprintf("%s/token", dir);
    if (token != NULL)
        write_text(p, token, 0600);
    free(p);
    if (ca) {
        p = util_asprintf("%s/ca.crt", dir);
        write_text(p, CA_PEM, 0600);
        free(p);
    }
    if (ns != NULL) {
        p = util_asprintf("%s/namespace", dir);
        write_text(p, ns, 0600);
        free(p);
    }
    return dir;
}

struct ic_row {
    const char *name;
    const char *host, *port; /* NULL: unset */
    const char *token;       /* NULL: no token file */
    bool ca;
    const char *ns_file;
    int err;
    const char *msg; /* on error; {D}: the sa dir */
    const char *server, *ns, *want_token;
};

static const struct ic_row ic_rows[] = {
    {"IPv4", "10.96.0.1", "443", "tok-1\n", true, "kube-system\n", 0, NULL, "https://10.96.0.1:443",
     "kube-system", "tok-1"},
    {"IPv6 host in brackets", "fd00::1", "6443", "tok-1", true, "ns", 0, NULL,
     "https://[fd00::1]:6443", "ns", "tok-1"},
    {"no namespace file", "h", "1", "t", true, NULL, 0, NULL, "https://h:1", "default", "t"},
    {"no CA: system roots", "h", "1", "t", false, NULL, 0, NULL, "https://h:1", "default", "t"},
    {"host unset", NULL, "443", "t", true, NULL, -ENOENT, NOT_IN_CLUSTER, NULL, NULL, NULL},
    {"port empty", "h", "", "t", true, NULL, -ENOENT, NOT_IN_CLUSTER, NULL, NULL, NULL},
    {"no token file", "h", "1", NULL, true, NULL, -ENOENT,
     "in-cluster configuration: cannot read {D}/token: No such file or directory", NULL, NULL,
     NULL},
    {"empty token file", "h", "1", " \n", true, NULL, -EINVAL,
     "in-cluster configuration: token file {D}/token is empty", NULL, NULL, NULL},
};

static void set_or_unset(const char *name, const char *value)
{
    if (value != NULL)
        setenv(name, value, 1);
    else
        unsetenv(name);
}

static void test_in_cluster(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(ic_rows); i++) {
        const struct ic_row *r = &ic_rows[i];
        set_or_unset("KUBERNETES_SERVICE_HOST", r->host);
        set_or_unset("KUBERNETES_SERVICE_PORT", r->port);
        char *dir = fake_sa_dir(r->token, r->ca, r->ns_file);
        kube_config *c = NULL;
        int rc = kube_config_in_cluster(dir, &c);
        expect_int(r->name, "rc", rc, r->err);
        if (r->err != 0) {
            char *want = subst(r->msg, dir, NULL);
            expect_str(r->name, "message", util_err_last(), want);
            free(want);
            if (c != NULL)
                fail_msg("[%s] config not NULL on error", r->name);
            free(dir);
            continue;
        }
        expect_str(r->name, "server", kube_config_server(c), r->server);
        expect_str(r->name, "namespace", kube_config_namespace(c), r->ns);
        char *ca = util_asprintf("%s/ca.crt", dir);
        expect_str(r->name, "ca_file", kube_config_tls(c)->ca_file, r->ca ? ca : NULL);
        free(ca);
        char *tok = NULL;
        expect_int(r->name, "token rc", kube_config_token(c, &tok), 0);
        expect_str(r->name, "token", tok, r->want_token);
        free(tok);
        kube_config_free(c);
        free(dir);
    }
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
}

static void test_in_cluster_token_rotation(void **state)
{
    (void)state;
    setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1", 1);
    setenv("KUBERNETES_SERVICE_PORT", "443", 1);
    char *dir = fake_sa_dir("token-one", true, "ns");
    char *path = util_asprintf("%s/token", dir);
    char *tmp = util_asprintf("%s/..token.new", dir);
    kube_config *c = NULL;
    assert_int_equal(kube_config_in_cluster(dir, &c), 0);
    char *tok = NULL;
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_string_equal(tok, "token-one");
    free(tok);

    /* Rewritten in place with a new size. */
    write_text(path, "token-two-longer\n", 0600);
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_string_equal(tok, "token-two-longer");
    free(tok);

    /* Swapped atomically (what the kubelet does), same size. */
    write_text(tmp, "token-3-longer--\n", 0600);
    assert_int_equal(rename(tmp, path), 0);
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_string_equal(tok, "token-3-longer--");
    free(tok);

    /* Gone for a moment: the last good token is kept. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_string_equal(tok, "token-3-longer--");
    free(tok);

    kube_config_free(c);
    free(tmp);
    free(path);
    free(dir);
    unsetenv("KUBERNETES_SERVICE_HOST");
    unsetenv("KUBERNETES_SERVICE_PORT");
}

/* A kubeconfig's tokenFile is re-read the same way. */
static void test_token_file_rotation(void **state)
{
    (void)state;
    char *dir = new_dir("tokfile");
    char *tf = util_asprintf("%s/tok", dir);
    write_text(tf, "first\n", 0600);
    char *path = write_config(dir, HEAD CLUSTER(SERVER) USER("    tokenFile: tok\n"));
    kube_config *c = NULL;
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    char *tok = NULL;
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_string_equal(tok, "first");
    free(tok);
    write_text(tf, "second-token\n", 0600);
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_string_equal(tok, "second-token");
    free(tok);
    kube_config_free(c);
    free(path);
    free(tf);
    free(dir);
}

/* ---- exec credential plugins ----------------------------------------------------- */

/* Counts its runs in $DIR/count, saves KUBERNETES_EXEC_INFO and its args,
 * and answers with token "tok-<run>" expiring at $EXP (none when empty). */
static const char plugin_sh[] =
    "#!/bin/sh\n"
    "n=$(cat \"$DIR/count\" 2>/dev/null || echo 0)\n"
    "n=$((n + 1))\n"
    "echo $n > \"$DIR/count\"\n"
    "printf '%s' \"$KUBERNETES_EXEC_INFO\" > \"$DIR/info\"\n"
    "echo \"$*\" > \"$DIR/args\"\n"
    "if [ -n \"$FAIL_AFTER\" ] && [ $n -gt \"$FAIL_AFTER\" ]; then\n"
    "  echo 'plugin: refresh refused' >&2; exit 7\n"
    "fi\n"
    "if [ \"$EXP\" = soon ]; then EXP=$(date -u -d @$(( $(date +%s) + 5 )) "
    "+%Y-%m-%dT%H:%M:%SZ); fi\n"
    "exp=\n"
    "[ -n \"$EXP\" ] && exp=\",\\\"expirationTimestamp\\\":\\\"$EXP\\\"\"\n"
    "echo "
    "\"{\\\"apiVersion\\\":\\\"$API\\\",\\\"kind\\\":\\\"ExecCredential\\\",\\\"status\\\":{"
    "\\\"token\\\":\\\"tok-$n\\\"$exp}}\"\n";

static char *plugin_dir(void)
{
    char *dir = new_dir("exec");
    char *p = util_asprintf("%s/plugin.sh", dir);
    write_text(p, plugin_sh, 0700);
    free(p);
    return dir;
}

/* A kubeconfig whose user runs ./plugin.sh (relative to the kubeconfig). */
static char *plugin_config(const char *dir, const char *api, const char *exp, const char *extra)
{
    char *yaml = util_asprintf(HEAD CLUSTER(SERVER "    certificate-authority-data: " CA_B64 "\n"
                                                   "    extensions:\n"
                                                   "    - name: client.authentication.k8s.io/exec\n"
                                                   "      extension: {audience: sts, n: 3}\n")
                                   USER("    exec:\n"
                                        "      apiVersion: %s\n"
                                        "      command: ./plugin.sh\n"
                                        "      args: [--region, eu-1]\n"
                                        "      env:\n"
                                        "      - {name: DIR, value: '{D}'}\n"
                                        "      - {name: API, value: '%s'}\n"
                                        "      - {name: EXP, value: '%s'}\n"
                                        "%s"),
                               api, api, exp, extra);
    char *path = write_config(dir, yaml);
    free(yaml);
    return path;
}

static void expect_token(kube_config *c, const char *want)
{
    char *tok = NULL;
    int rc = kube_config_token(c, &tok);
    if (rc != 0)
        fail_msg("kube_config_token: %d %s", rc, util_err_last());
    expect_str("exec", "token", tok, want);
    free(tok);
}

static void test_exec_cached_until_expiry(void **state)
{
    (void)state;
    struct {
        const char *name, *api, *exp, *mode;
        const char *tokens[3];
        int runs;
    } rows[] = {
        {"far expiry: one run",
         "client.authentication.k8s.io/v1",
         "2999-01-01T00:00:00Z",
         "      interactiveMode: Never\n",
         {"tok-1", "tok-1", "tok-1"},
         1},
        {"no expiry: one run",
         "client.authentication.k8s.io/v1",
         "",
         "      interactiveMode: IfAvailable\n",
         {"tok-1", "tok-1", "tok-1"},
         1},
        {"offset expiry with fraction",
         "client.authentication.k8s.io/v1",
         "2999-01-01T00:00:00.123+02:00",
         "      interactiveMode: Never\n",
         {"tok-1", "tok-1", "tok-1"},
         1},
        {"already expired: every call runs it",
         "client.authentication.k8s.io/v1",
         "2000-01-01T00:00:00Z",
         "      interactiveMode: Never\n",
         {"tok-1", "tok-2", "tok-3"},
         3},
        {"about to expire: refreshed early",
         "client.authentication.k8s.io/v1beta1",
         "soon",
         "",
         {"tok-1", "tok-2", "tok-3"},
         3},
    };
    for (size_t i = 0; i < N_ROWS(rows); i++) {
        char *dir = plugin_dir();
        char *path = plugin_config(dir, rows[i].api, rows[i].exp, rows[i].mode);
        kube_config *c = NULL;
        expect_int(rows[i].name, "load", kube_config_from_file(path, NULL, &c), 0);
        expect_int(rows[i].name, "runs at load", read_count(dir), 0); /* lazy, as client-go */
        for (int k = 0; k < 3; k++) {
            char *tok = NULL;
            expect_int(rows[i].name, "token rc", kube_config_token(c, &tok), 0);
            expect_str(rows[i].name, "token", tok, rows[i].tokens[k]);
            free(tok);
        }
        expect_int(rows[i].name, "runs", read_count(dir), rows[i].runs);
        kube_config_free(c);
        free(path);
        free(dir);
    }
}

static void test_exec_request(void **state)
{
    (void)state;
    char *dir = plugin_dir();
    char *path =
        plugin_config(dir, "client.authentication.k8s.io/v1", "", "      interactiveMode: Never\n");
    kube_config *c = NULL;
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    expect_token(c, "tok-1");
    char *p = util_asprintf("%s/info", dir);
    char *info = slurp(p);
    free(p);
    assert_string_equal(info, "{\"kind\":\"ExecCredential\",\"apiVersion\":\"client."
                              "authentication.k8s.io/v1\",\"spec\":{\"interactive\":false}}");
    free(info);
    p = util_asprintf("%s/args", dir);
    char *args = slurp(p);
    free(p);
    assert_string_equal(args, "--region eu-1\n");
    free(args);
    kube_config_free(c);
    free(path);

    /* provideClusterInfo: server, CA bytes and the exec extension. */
    path = plugin_config(dir, "client.authentication.k8s.io/v1beta1", "",
                         "      provideClusterInfo: true\n");
    assert_int_equal(kube_config_from_file(path, "https://override:443", &c), 0);
    expect_token(c, "tok-2");
    p = util_asprintf("%s/info", dir);
    info = slurp(p);
    free(p);
    assert_string_equal(info,
                        "{\"kind\":\"ExecCredential\",\"apiVersion\":\"client.authentication.k8s."
                        "io/v1beta1\",\"spec\":{\"cluster\":{\"server\":\"https://override:443\","
                        "\"certificate-authority-data\":\"" CA_B64 "\",\"config\":{\"audience\":"
                        "\"sts\",\"n\":3}},\"interactive\":false}}");
    free(info);
    kube_config_free(c);
    free(path);
    free(dir);
}

struct exec_fail_row {
    const char *name;
    const char *script; /* NULL: command is not found */
    const char *msg;    /* after "kubeconfig {F}: users[0].user.exec: " */
};

static const struct exec_fail_row exec_fail_rows[] = {
    {"exit code with stderr's first line",
     "#!/bin/sh\necho 'error: no credentials for you' >&2\necho 'more detail' >&2\nexit 3\n",
     "executable {D}/fail.sh failed with exit code 3: error: no credentials for you"},
    {"exit code, silent", "#!/bin/sh\nexit 1\n", "executable {D}/fail.sh failed with exit code 1"},
    {"killed", "#!/bin/sh\nkill -9 $$\n", "executable {D}/fail.sh was killed by signal 9"},
    {"not found", NULL, "executable {D}/fail.sh not found"},
    {"not JSON", "#!/bin/sh\necho 'token: SECRET'\n", "decoding stdout: not valid JSON"},
    {"JSON but not an object", "#!/bin/sh\necho '[\"SECRET\"]'\n",
     "decoding stdout: not a JSON object"},
    {"nothing on stdout", "#!/bin/sh\nexit 0\n", "decoding stdout: the plugin wrote nothing"},
    {"wrong kind",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
     "\"kind\":\"Pod\",\"status\":{\"token\":\"SECRET\"}}'\n",
     "decoding stdout: kind is \"Pod\", want ExecCredential"},
    {"token not a string",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
     "\"kind\":\"ExecCredential\",\"status\":{\"token\":5}}'\n",
     "decoding stdout: a status field is not a string"},
    {"certificate not PEM",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
     "\"kind\":\"ExecCredential\",\"status\":{\"clientCertificateData\":\"SECRET\","
     "\"clientKeyData\":\"SECRET\"}}'\n",
     "failed parsing client key/certificate: not PEM"},
    {"wrong apiVersion",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1beta1\","
     "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"SECRET\"}}'\n",
     "exec plugin is configured to use API version client.authentication.k8s.io/v1, plugin "
     "returned version client.authentication.k8s.io/v1beta1"},
    {"no status",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
     "\"kind\":\"ExecCredential\"}'\n",
     "exec plugin didn't return a status field"},
    {"no token",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
     "\"kind\":\"ExecCredential\",\"status\":{}}'\n",
     "exec plugin didn't return a token or cert/key pair"},
    {"certificate without key",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
     "\"kind\":\"ExecCredential\",\"status\":{\"clientCertificateData\":\"x\"}}'\n",
     "exec plugin returned only certificate or key, not both"},
    {"bad expiry",
     "#!/bin/sh\necho '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
     "\"kind\":\"ExecCredential\",\"status\":{\"token\":\"SECRET\","
     "\"expirationTimestamp\":\"tomorrow\"}}'\n",
     "status.expirationTimestamp \"tomorrow\" is not RFC 3339"},
};

static void test_exec_failures(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_ROWS(exec_fail_rows); i++) {
        const struct exec_fail_row *r = &exec_fail_rows[i];
        char *dir = new_dir("execfail");
        if (r->script != NULL) {
            char *p = util_asprintf("%s/fail.sh", dir);
            write_text(p, r->script, 0700);
            free(p);
        }
        char *path =
            write_config(dir, HEAD CLUSTER(SERVER) EXEC_V1("      command: ./fail.sh\n"
                                                           "      interactiveMode: Never\n"));
        kube_config *c = NULL;
        expect_int(r->name, "load", kube_config_from_file(path, NULL, &c), 0);
        char *tok = (char *)"x";
        expect_int(r->name, "rc", kube_config_token(c, &tok), -EACCES);
        if (tok != NULL)
            fail_msg("[%s] token not NULL on error", r->name);
        char *tmpl = util_asprintf("kubeconfig {F}: users[0].user.exec: %s", r->msg);
        char *want = subst(tmpl, dir, path);
        expect_str(r->name, "message", util_err_last(), want);
        if (strstr(util_err_last(), "SECRET") != NULL)
            fail_msg("[%s] secret in message", r->name);
        free(want);
        free(tmpl);
        kube_config_free(c);
        free(path);
        free(dir);
    }
}

/* A plugin on $PATH (a bare command name) and one that is not installed. */
static void test_exec_path_lookup(void **state)
{
    (void)state;
    char *dir = plugin_dir();
    char *old = util_strdup(getenv("PATH"));
    char *path_env = util_asprintf("%s:%s", dir, old != NULL ? old : "/usr/bin:/bin");
    setenv("PATH", path_env, 1);
    char *path = write_config(
        dir, HEAD CLUSTER(SERVER) USER("    exec:\n"
                                       "      apiVersion: client.authentication.k8s.io/v1beta1\n"
                                       "      command: plugin.sh\n"
                                       "      env: [{name: DIR, value: '{D}'}, {name: API, "
                                       "value: client.authentication.k8s.io/v1beta1}]\n"));
    kube_config *c = NULL;
    char *tok = NULL, *want = NULL;
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    expect_token(c, "tok-1");
    kube_config_free(c);
    free(path);

    /* A file that is there but not executable is "not found" too (LookPath). */
    char *noexec = util_asprintf("%s/noexec.sh", dir);
    write_text(noexec, "#!/bin/sh\necho '{}'\n", 0600);
    free(noexec);
    path = write_config(dir, HEAD CLUSTER(SERVER) EXEC_V1("      command: ./noexec.sh\n"
                                                          "      interactiveMode: Never\n"));
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    assert_int_equal(kube_config_token(c, &tok), -EACCES);
    want = util_asprintf("kubeconfig %s: users[0].user.exec: executable %s/noexec.sh not found",
                         path, dir);
    assert_string_equal(util_err_last(), want);
    free(want);
    kube_config_free(c);
    free(path);

    path = write_config(dir, HEAD CLUSTER(SERVER) EXEC_V1("      command: no-such-plugin-xyz\n"
                                                          "      interactiveMode: Never\n"));
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    assert_int_equal(kube_config_token(c, &tok), -EACCES);
    want = util_asprintf("kubeconfig %s: users[0].user.exec: executable no-such-plugin-xyz "
                         "not found",
                         path);
    assert_string_equal(util_err_last(), want);
    free(want);
    kube_config_free(c);
    free(path);
    setenv("PATH", old != NULL ? old : "/usr/bin:/bin", 1);
    free(old);
    free(path_env);
    free(dir);
}

/* A failed early refresh keeps the credential that has not expired yet. */
static void test_exec_refresh_failure_keeps_valid_token(void **state)
{
    (void)state;
    char *dir = plugin_dir();
    char *path = plugin_config(dir, "client.authentication.k8s.io/v1", "soon",
                               "      - {name: FAIL_AFTER, value: '1'}\n"
                               "      interactiveMode: Never\n");
    kube_config *c = NULL;
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    expect_token(c, "tok-1");
    expect_token(c, "tok-1"); /* the refresh failed; tok-1 is still valid */
    assert_int_equal(read_count(dir), 2);
    kube_config_free(c);
    free(path);
    free(dir);
}

static void test_exec_client_certificate(void **state)
{
    (void)state;
    char *dir = new_dir("execcert");
    char *p = util_asprintf("%s/cert.sh", dir);
    write_text(p,
               "#!/bin/sh\n"
               "echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\","
               "\"kind\":\"ExecCredential\",\"status\":{"
               "\"clientCertificateData\":\"-----BEGIN CERTIFICATE-----\\nY2VydA==\\n-----END "
               "CERTIFICATE-----\\n\","
               "\"clientKeyData\":\"-----BEGIN PRIVATE KEY-----\\na2V5\\n-----END PRIVATE "
               "KEY-----\\n\"}}'\n",
               0700);
    free(p);
    char *path = write_config(dir, HEAD CLUSTER(SERVER) EXEC_V1("      command: ./cert.sh\n"
                                                                "      interactiveMode: Never\n"));
    kube_config *c = NULL;
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    assert_null(kube_config_tls(c)->cert_pem);
    char *tok = (char *)"x";
    assert_int_equal(kube_config_token(c, &tok), 0);
    assert_null(tok);
    assert_string_equal(kube_config_tls(c)->cert_pem, CERT_PEM);
    assert_string_equal(kube_config_tls(c)->key_pem, KEY_PEM);
    kube_config_free(c);
    free(path);
    free(dir);
}

struct racer {
    kube_config *c;
    int failures;
};

static void *race_token(void *arg)
{
    struct racer *r = arg;
    for (int i = 0; i < 20; i++) {
        char *tok = NULL;
        if (kube_config_token(r->c, &tok) != 0 || tok == NULL || strcmp(tok, "tok-1") != 0)
            r->failures++;
        free(tok);
    }
    return NULL;
}

/* Many threads, one plugin run. */
static void test_exec_thread_safe(void **state)
{
    (void)state;
    char *dir = plugin_dir();
    char *path = plugin_config(dir, "client.authentication.k8s.io/v1", "2999-01-01T00:00:00Z",
                               "      interactiveMode: Never\n");
    kube_config *c = NULL;
    assert_int_equal(kube_config_from_file(path, NULL, &c), 0);
    pthread_t th[8];
    struct racer rs[8];
    for (int i = 0; i < 8; i++) {
        rs[i] = (struct racer){.c = c};
        assert_int_equal(pthread_create(&th[i], NULL, race_token, &rs[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(rs[i].failures, 0);
    }
    assert_int_equal(read_count(dir), 1);
    kube_config_free(c);
    free(path);
    free(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_kubeconfigs),
        cmocka_unit_test(test_malformed_kubeconfigs),
        cmocka_unit_test(test_missing_file),
        cmocka_unit_test(test_no_secret_in_messages),
        cmocka_unit_test(test_load_precedence),
        cmocka_unit_test(test_in_cluster),
        cmocka_unit_test(test_in_cluster_token_rotation),
        cmocka_unit_test(test_token_file_rotation),
        cmocka_unit_test(test_exec_cached_until_expiry),
        cmocka_unit_test(test_exec_request),
        cmocka_unit_test(test_exec_failures),
        cmocka_unit_test(test_exec_path_lookup),
        cmocka_unit_test(test_exec_refresh_failure_keeps_valid_token),
        cmocka_unit_test(test_exec_client_certificate),
        cmocka_unit_test(test_exec_thread_safe),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
