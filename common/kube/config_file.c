/*
 * kube config: the kubeconfig file, as client-go's clientcmd loads it.
 * Parsed with libyaml's document API; every entry of clusters/contexts/users
 * is type-checked, the entries the current context uses are validated and
 * copied into a new kube_config (the object itself is in config.c, the exec
 * plugin it may hold in config_exec.c).
 */
#include "kobj/kobj.h"
#include "kube/config_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <yaml.h>

#define EXEC_API_V1      "client.authentication.k8s.io/v1"
#define EXEC_API_V1BETA1 "client.authentication.k8s.io/v1beta1"
#define EXEC_EXTENSION   "client.authentication.k8s.io/exec"
#define EMPTY_CONFIG_MSG "invalid configuration: no configuration has been provided"
#define MAX_CONFIG_BYTES (4 << 20) /* kubeconfigs are kilobytes; this bounds a mistake */
#define MAX_JSON_NODES   10000     /* bounds YAML alias expansion in extensions */
#define KEY_LEN          256

/* ---- kubeconfig: YAML access ----------------------------------------------------- */

struct kp {
    const char *file; /* as given, for messages */
    char *dir;        /* its absolute directory, for relative paths */
    yaml_document_t doc;
};

static int kp_err(const struct kp *p, const char *key, const char *fmt, ...) UTIL_ATTR_PRINTF(3, 4);

static int kp_err(const struct kp *p, const char *key, const char *fmt, ...)
{
    char msg[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (key == NULL || key[0] == '\0')
        return util_err_set(-EINVAL, "kubeconfig %s: %s", p->file, msg);
    return util_err_set(-EINVAL, "kubeconfig %s: %s: %s", p->file, key, msg);
}

static const char *sval(const yaml_node_t *n)
{
    return (const char *)n->data.scalar.value;
}

static bool is_null(const yaml_node_t *n)
{
    if (n == NULL)
        return true;
    if (n->type != YAML_SCALAR_NODE)
        return false;
    if (n->tag != NULL && strcmp((const char *)n->tag, YAML_NULL_TAG) == 0)
        return true;
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *v = sval(n);
    return v[0] == '\0' || strcmp(v, "~") == 0 || strcmp(v, "null") == 0 ||
           strcmp(v, "Null") == 0 || strcmp(v, "NULL") == 0;
}

static yaml_node_t *node_at(struct kp *p, int id)
{
    return yaml_document_get_node(&p->doc, id);
}

/* map[key], the last one when repeated (as go-yaml), or NULL. */
static yaml_node_t *map_get(struct kp *p, yaml_node_t *map, const char *key)
{
    if (map == NULL || map->type != YAML_MAPPING_NODE)
        return NULL;
    yaml_node_t *found = NULL;
    for (yaml_node_pair_t *pr = map->data.mapping.pairs.start; pr < map->data.mapping.pairs.top;
         pr++) {
        yaml_node_t *k = node_at(p, pr->key);
        if (k != NULL && k->type == YAML_SCALAR_NODE && strcmp(sval(k), key) == 0)
            found = node_at(p, pr->value);
    }
    return found;
}

/* Formats a key path ("users[0].user.exec") into a KEY_LEN buffer; a
 * longer one is cut, which only shortens a message. */
static void key_fmt(char *buf, const char *fmt, ...) UTIL_ATTR_PRINTF(2, 3);

static void key_fmt(char *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, KEY_LEN, fmt, ap);
    va_end(ap);
}

static void join_key(char *buf, const char *parent, const char *key)
{
    key_fmt(buf, "%s%s%s", parent, parent[0] != '\0' ? "." : "", key);
}

/* map[key] as a string: NULL when absent, null or "". */
static int get_str(struct kp *p, yaml_node_t *map, const char *parent, const char *key,
                   const char **out)
{
    *out = NULL;
    yaml_node_t *n = map_get(p, map, key);
    if (is_null(n))
        return 0;
    if (n->type != YAML_SCALAR_NODE) {
        char k[KEY_LEN];
        join_key(k, parent, key);
        return kp_err(p, k, "not a string");
    }
    if (sval(n)[0] != '\0')
        *out = sval(n);
    return 0;
}

static int get_bool(struct kp *p, yaml_node_t *map, const char *parent, const char *key, bool *out)
{
    static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "YES",
                                      "on",   "On",   "ON",   "y",   "Y"};
    static const char *const no[] = {"false", "False", "FALSE", "no", "No", "NO",
                                     "off",   "Off",   "OFF",   "n",  "N"};
    *out = false;
    yaml_node_t *n = map_get(p, map, key);
    if (is_null(n))
        return 0;
    /* YAML 1.1 booleans as go-yaml reads them; a quoted "true" is a string
     * and client-go's decoder rejects it. */
    if (n->type == YAML_SCALAR_NODE &&
        (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE ||
         (n->tag != NULL && strcmp((const char *)n->tag, YAML_BOOL_TAG) == 0))) {
        for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
            if (strcmp(sval(n), yes[i]) == 0) {
                *out = true;
                return 0;
            }
            if (strcmp(sval(n), no[i]) == 0)
                return 0;
        }
    }
    char k[KEY_LEN];
    join_key(k, parent, key);
    if (n->type == YAML_SCALAR_NODE)
        return kp_err(p, k, "not a boolean (\"%.40s\")", sval(n));
    return kp_err(p, k, "not a boolean");
}

static int get_typed(struct kp *p, yaml_node_t *map, const char *parent, const char *key,
                     yaml_node_type_t type, yaml_node_t **out)
{
    *out = NULL;
    yaml_node_t *n = map_get(p, map, key);
    if (is_null(n))
        return 0;
    if (n->type != type) {
        char k[KEY_LEN];
        join_key(k, parent, key);
        return kp_err(p, k, type == YAML_MAPPING_NODE ? "not a mapping" : "not a list");
    }
    *out = n;
    return 0;
}

/* map[key] as base64-encoded PEM, decoded (NULL when absent). */
static int get_pem_data(struct kp *p, yaml_node_t *map, const char *parent, const char *key,
                        char **out)
{
    *out = NULL;
    const char *s;
    int rc = get_str(p, map, parent, key, &s);
    if (rc != 0 || s == NULL)
        return rc;
    char k[KEY_LEN];
    join_key(k, parent, key);
    size_t n = 0;
    char *data = kcfg_b64_decode(s, &n);
    if (data == NULL)
        return kp_err(p, k, "not valid base64");
    if (!kcfg_looks_like_pem(data, n)) {
        free(data);
        return kp_err(p, k, "decoded data is not PEM (no \"-----BEGIN\" line)");
    }
    *out = data;
    return 0;
}

/* A YAML value as JSON (the exec plugin's cluster config), with go-yaml's
 * resolution of plain scalars. `budget` bounds alias expansion. */
static json_object *yaml_to_json(struct kp *p, yaml_node_t *n, int *budget)
{
    if (n == NULL || --*budget < 0)
        return NULL;
    if (n->type == YAML_MAPPING_NODE) {
        json_object *o = json_object_new_object();
        for (yaml_node_pair_t *pr = n->data.mapping.pairs.start; pr < n->data.mapping.pairs.top;
             pr++) {
            yaml_node_t *k = node_at(p, pr->key);
            if (k != NULL && k->type == YAML_SCALAR_NODE)
                json_object_object_add(o, sval(k), yaml_to_json(p, node_at(p, pr->value), budget));
        }
        return o;
    }
    if (n->type == YAML_SEQUENCE_NODE) {
        json_object *a = json_object_new_array();
        for (yaml_node_item_t *it = n->data.sequence.items.start; it < n->data.sequence.items.top;
             it++)
            json_object_array_add(a, yaml_to_json(p, node_at(p, *it), budget));
        return a;
    }
    if (is_null(n))
        return NULL;
    const char *v = sval(n);
    if (n->data.scalar.style == YAML_PLAIN_SCALAR_STYLE) {
        if (strcmp(v, "true") == 0 || strcmp(v, "True") == 0 || strcmp(v, "TRUE") == 0)
            return json_object_new_boolean(1);
        if (strcmp(v, "false") == 0 || strcmp(v, "False") == 0 || strcmp(v, "FALSE") == 0)
            return json_object_new_boolean(0);
        char *end = NULL;
        errno = 0;
        long long ll = strtoll(v, &end, 10);
        if (errno == 0 && end != v && *end == '\0')
            return json_object_new_int64(ll);
        errno = 0;
        double d = strtod(v, &end);
        if (errno == 0 && end != v && *end == '\0' && strpbrk(v, "xXnN") == NULL)
            return json_object_new_double(d);
    }
    return json_object_new_string(v);
}

/* ---- kubeconfig: entries --------------------------------------------------------- */

struct kc_cluster {
    const char *name, *server, *ca_file, *tls_server_name, *proxy_url;
    char *ca_pem;
    bool insecure;
    json_object *exec_config; /* extensions[client.authentication.k8s.io/exec].extension */
};

struct kc_context {
    const char *name, *cluster, *user, *ns;
};

struct kc_user {
    const char *name, *token, *token_file, *cert_file, *key_file, *username, *password;
    char *cert_pem, *key_pem;
    const char *impersonate_key; /* the first "as*" key present, or NULL */
    bool auth_provider;
    yaml_node_t *exec; /* the exec mapping, checked */
};

/* One entry of a named list: {name: ..., <inner>: {...}}. */
static int list_item(struct kp *p, yaml_node_t *seq, size_t i, const char *list, const char *inner,
                     const char **name, yaml_node_t **body, char *at)
{
    char item[KEY_LEN];
    *name = NULL;
    *body = NULL;
    key_fmt(item, "%s[%zu]", list, i);
    yaml_node_t *m = node_at(p, seq->data.sequence.items.start[i]);
    if (m == NULL || m->type != YAML_MAPPING_NODE)
        return kp_err(p, item, "not a mapping");
    int rc = get_str(p, m, item, "name", name);
    if (rc == 0)
        rc = get_typed(p, m, item, inner, YAML_MAPPING_NODE, body);
    key_fmt(at, "%s.%s", item, inner);
    return rc;
}

static int parse_cluster(struct kp *p, yaml_node_t *m, const char *at, struct kc_cluster *c)
{
    int rc;
    if ((rc = get_str(p, m, at, "server", &c->server)) != 0 ||
        (rc = get_str(p, m, at, "certificate-authority", &c->ca_file)) != 0 ||
        (rc = get_pem_data(p, m, at, "certificate-authority-data", &c->ca_pem)) != 0 ||
        (rc = get_bool(p, m, at, "insecure-skip-tls-verify", &c->insecure)) != 0 ||
        (rc = get_str(p, m, at, "tls-server-name", &c->tls_server_name)) != 0 ||
        (rc = get_str(p, m, at, "proxy-url", &c->proxy_url)) != 0)
        return rc;
    yaml_node_t *exts;
    if ((rc = get_typed(p, m, at, "extensions", YAML_SEQUENCE_NODE, &exts)) != 0 || exts == NULL)
        return rc;
    size_t n = (size_t)(exts->data.sequence.items.top - exts->data.sequence.items.start);
    for (size_t i = 0; i < n; i++) {
        char ext_at[KEY_LEN];
        key_fmt(ext_at, "%s.extensions[%zu]", at, i);
        yaml_node_t *e = node_at(p, exts->data.sequence.items.start[i]);
        if (e == NULL || e->type != YAML_MAPPING_NODE)
            return kp_err(p, ext_at, "not a mapping");
        const char *name;
        if ((rc = get_str(p, e, ext_at, "name", &name)) != 0)
            return rc;
        if (name != NULL && strcmp(name, EXEC_EXTENSION) == 0) {
            int budget = MAX_JSON_NODES;
            json_object_put(c->exec_config);
            c->exec_config = yaml_to_json(p, map_get(p, e, "extension"), &budget);
            if (budget < 0)
                return kp_err(p, ext_at, "extension is too large");
        }
    }
    return 0;
}

static int parse_context(struct kp *p, yaml_node_t *m, const char *at, struct kc_context *c)
{
    int rc;
    if ((rc = get_str(p, m, at, "cluster", &c->cluster)) != 0 ||
        (rc = get_str(p, m, at, "user", &c->user)) != 0 ||
        (rc = get_str(p, m, at, "namespace", &c->ns)) != 0)
        return rc;
    return 0;
}

/* Type-checks an exec mapping; it is read again when the user is chosen. */
static int check_exec(struct kp *p, yaml_node_t *m, const char *at)
{
    const char *s;
    bool b;
    yaml_node_t *args, *env;
    int rc;
    if ((rc = get_str(p, m, at, "apiVersion", &s)) != 0 ||
        (rc = get_str(p, m, at, "command", &s)) != 0 ||
        (rc = get_str(p, m, at, "interactiveMode", &s)) != 0 ||
        (rc = get_str(p, m, at, "installHint", &s)) != 0 ||
        (rc = get_bool(p, m, at, "provideClusterInfo", &b)) != 0 ||
        (rc = get_typed(p, m, at, "args", YAML_SEQUENCE_NODE, &args)) != 0 ||
        (rc = get_typed(p, m, at, "env", YAML_SEQUENCE_NODE, &env)) != 0)
        return rc;
    for (size_t i = 0;
         args != NULL && args->data.sequence.items.start + i < args->data.sequence.items.top; i++) {
        yaml_node_t *a = node_at(p, args->data.sequence.items.start[i]);
        if (a == NULL || a->type != YAML_SCALAR_NODE) {
            char k[KEY_LEN];
            key_fmt(k, "%s.args[%zu]", at, i);
            return kp_err(p, k, "not a string");
        }
    }
    for (size_t i = 0;
         env != NULL && env->data.sequence.items.start + i < env->data.sequence.items.top; i++) {
        char k[KEY_LEN];
        key_fmt(k, "%s.env[%zu]", at, i);
        yaml_node_t *e = node_at(p, env->data.sequence.items.start[i]);
        if (e == NULL || e->type != YAML_MAPPING_NODE)
            return kp_err(p, k, "not a mapping");
        if ((rc = get_str(p, e, k, "name", &s)) != 0 || (rc = get_str(p, e, k, "value", &s)) != 0)
            return rc;
    }
    return 0;
}

static int parse_user(struct kp *p, yaml_node_t *m, const char *at, struct kc_user *u)
{
    static const char *const impersonation[] = {"as", "as-uid", "as-groups", "as-user-extra"};
    yaml_node_t *ap;
    int rc;
    if ((rc = get_str(p, m, at, "token", &u->token)) != 0 ||
        (rc = get_str(p, m, at, "tokenFile", &u->token_file)) != 0 ||
        (rc = get_str(p, m, at, "client-certificate", &u->cert_file)) != 0 ||
        (rc = get_pem_data(p, m, at, "client-certificate-data", &u->cert_pem)) != 0 ||
        (rc = get_str(p, m, at, "client-key", &u->key_file)) != 0 ||
        (rc = get_pem_data(p, m, at, "client-key-data", &u->key_pem)) != 0 ||
        (rc = get_str(p, m, at, "username", &u->username)) != 0 ||
        (rc = get_str(p, m, at, "password", &u->password)) != 0 ||
        (rc = get_typed(p, m, at, "auth-provider", YAML_MAPPING_NODE, &ap)) != 0 ||
        (rc = get_typed(p, m, at, "exec", YAML_MAPPING_NODE, &u->exec)) != 0)
        return rc;
    u->auth_provider = ap != NULL;
    for (size_t i = 0; i < sizeof(impersonation) / sizeof(impersonation[0]); i++)
        if (u->impersonate_key == NULL && !is_null(map_get(p, m, impersonation[i])))
            u->impersonate_key = impersonation[i];
    if (u->exec != NULL) {
        char k[KEY_LEN];
        join_key(k, at, "exec");
        return check_exec(p, u->exec, k);
    }
    return 0;
}

static size_t seq_len(const yaml_node_t *seq)
{
    return seq == NULL ? 0
                       : (size_t)(seq->data.sequence.items.top - seq->data.sequence.items.start);
}

static const char *nz(const char *s)
{
    return s != NULL ? s : "";
}

/* Rejects a name used twice in one list (client-go: "duplicate name"). */
static int check_unique(struct kp *p, const char *list, const char *const *names, size_t i)
{
    for (size_t j = 0; j < i; j++) {
        if (strcmp(nz(names[j]), nz(names[i])) == 0) {
            char k[KEY_LEN];
            key_fmt(k, "%s[%zu].name", list, i);
            return kp_err(p, k, "\"%s\" is already used by %s[%zu]", nz(names[i]), list, j);
        }
    }
    return 0;
}

/* ---- kubeconfig: the chosen context ---------------------------------------------- */

struct kc_all {
    struct kc_cluster *clusters;
    struct kc_context *contexts;
    struct kc_user *users;
    size_t n_clusters, n_contexts, n_users;
};

static void kc_all_free(struct kc_all *a)
{
    for (size_t i = 0; i < a->n_clusters; i++) {
        free(a->clusters[i].ca_pem);
        json_object_put(a->clusters[i].exec_config);
    }
    for (size_t i = 0; i < a->n_users; i++) {
        free(a->users[i].cert_pem);
        free(a->users[i].key_pem);
    }
    free(a->clusters);
    free(a->contexts);
    free(a->users);
}

static int parse_lists(struct kp *p, yaml_node_t *root, struct kc_all *a)
{
    yaml_node_t *clusters, *contexts, *users;
    int rc;
    if ((rc = get_typed(p, root, "", "clusters", YAML_SEQUENCE_NODE, &clusters)) != 0 ||
        (rc = get_typed(p, root, "", "contexts", YAML_SEQUENCE_NODE, &contexts)) != 0 ||
        (rc = get_typed(p, root, "", "users", YAML_SEQUENCE_NODE, &users)) != 0)
        return rc;
    a->n_clusters = seq_len(clusters);
    a->n_contexts = seq_len(contexts);
    a->n_users = seq_len(users);
    a->clusters = util_calloc(a->n_clusters, sizeof(*a->clusters));
    a->contexts = util_calloc(a->n_contexts, sizeof(*a->contexts));
    a->users = util_calloc(a->n_users, sizeof(*a->users));
    /* Names of the list being read, for check_unique (reused per list). */
    size_t most = a->n_clusters > a->n_contexts ? a->n_clusters : a->n_contexts;
    const char **names = util_calloc(most > a->n_users ? most : a->n_users, sizeof(char *));
    char at[KEY_LEN];
    yaml_node_t *body;
    for (size_t i = 0; i < a->n_clusters && rc == 0; i++) {
        rc = list_item(p, clusters, i, "clusters", "cluster", &a->clusters[i].name, &body, at);
        names[i] = a->clusters[i].name;
        if (rc == 0)
            rc = check_unique(p, "clusters", names, i);
        if (rc == 0)
            rc = parse_cluster(p, body, at, &a->clusters[i]);
    }
    for (size_t i = 0; i < a->n_contexts && rc == 0; i++) {
        rc = list_item(p, contexts, i, "contexts", "context", &a->contexts[i].name, &body, at);
        names[i] = a->contexts[i].name;
        if (rc == 0)
            rc = check_unique(p, "contexts", names, i);
        if (rc == 0)
            rc = parse_context(p, body, at, &a->contexts[i]);
    }
    for (size_t i = 0; i < a->n_users && rc == 0; i++) {
        rc = list_item(p, users, i, "users", "user", &a->users[i].name, &body, at);
        names[i] = a->users[i].name;
        if (rc == 0)
            rc = check_unique(p, "users", names, i);
        if (rc == 0)
            rc = parse_user(p, body, at, &a->users[i]);
    }
    free(names);
    return rc;
}

static bool name_is(const char *name, const char *want)
{
    return strcmp(nz(name), want) == 0;
}

static int check_readable(struct kp *p, const char *key, const char *path)
{
    if (access(path, R_OK) == 0)
        return 0;
    return kp_err(p, key, "cannot read %s: %s", path, strerror(errno));
}

static int use_cluster(struct kp *p, const struct kc_cluster *cl, size_t idx, kube_config *c,
                       bool master)
{
    char at[KEY_LEN];
    key_fmt(at, "clusters[%zu].cluster", idx);
    char key[KEY_LEN];
    if (cl->server == NULL && !master) {
        join_key(key, at, "server");
        return kp_err(p, key, "not set (no server found for cluster \"%s\")",
                      cl->name != NULL ? cl->name : "");
    }
    if (cl->ca_file != NULL && cl->ca_pem != NULL)
        return kp_err(p, at, "certificate-authority and certificate-authority-data are both set");
    if (cl->ca_file != NULL) {
        c->ca_file = kcfg_resolve(p->dir, cl->ca_file);
        join_key(key, at, "certificate-authority");
        int rc = check_readable(p, key, c->ca_file);
        if (rc != 0)
            return rc;
    }
    if (cl->insecure && (cl->ca_file != NULL || cl->ca_pem != NULL)) {
        join_key(key, at, "insecure-skip-tls-verify");
        return kp_err(p, key,
                      "cannot be combined with a certificate authority (specifying a "
                      "root certificates file with the insecure flag is not allowed)");
    }
    if (cl->proxy_url != NULL)
        obs_warn("kubeconfig %s: %s.proxy-url is not supported and is ignored", p->file, at);
    c->ca_pem = util_strdup(cl->ca_pem);
    c->tls.insecure = cl->insecure;
    /* As client-go: --master clears the kubeconfig's tls-server-name. */
    if (!master)
        c->server_name = util_strdup(cl->tls_server_name);
    return 0;
}

static int use_user_certs(struct kp *p, const struct kc_user *u, const char *at, kube_config *c)
{
    char key[KEY_LEN];
    bool cert = u->cert_file != NULL || u->cert_pem != NULL;
    bool keyset = u->key_file != NULL || u->key_pem != NULL;
    if (u->cert_file != NULL && u->cert_pem != NULL)
        return kp_err(p, at, "client-certificate and client-certificate-data are both set");
    if (u->key_file != NULL && u->key_pem != NULL)
        return kp_err(p, at, "client-key and client-key-data are both set");
    if (cert && !keyset)
        return kp_err(p, at, "client-certificate needs client-key or client-key-data");
    if (keyset && !cert)
        return kp_err(p, at, "client-key needs client-certificate or client-certificate-data");
    int rc = 0;
    if (u->cert_file != NULL) {
        c->cert_file = kcfg_resolve(p->dir, u->cert_file);
        join_key(key, at, "client-certificate");
        rc = check_readable(p, key, c->cert_file);
    }
    if (rc == 0 && u->key_file != NULL) {
        c->key_file = kcfg_resolve(p->dir, u->key_file);
        join_key(key, at, "client-key");
        rc = check_readable(p, key, c->key_file);
    }
    c->cert_pem = util_strdup(u->cert_pem);
    c->key_pem = util_strdup(u->key_pem);
    return rc;
}

/* The ExecCredential request the plugin finds in KUBERNETES_EXEC_INFO. */
static char *exec_info(const char *api, bool provide, const kube_config *c,
                       const struct kc_cluster *cl)
{
    json_object *root = json_object_new_object();
    json_object_object_add(root, "kind", json_object_new_string("ExecCredential"));
    json_object_object_add(root, "apiVersion", json_object_new_string(api));
    json_object *spec = json_object_new_object();
    if (provide) {
        json_object *cj = json_object_new_object();
        json_object_object_add(cj, "server", json_object_new_string(c->server));
        if (c->server_name != NULL)
            json_object_object_add(cj, "tls-server-name", json_object_new_string(c->server_name));
        if (c->tls.insecure)
            json_object_object_add(cj, "insecure-skip-tls-verify", json_object_new_boolean(1));
        /* CA data always travels as bytes, read from the file when need be. */
        size_t n = 0;
        char *ca = c->ca_pem != NULL    ? util_strdup(c->ca_pem)
                   : c->ca_file != NULL ? kcfg_read_file(c->ca_file, MAX_SMALL_FILE, &n, NULL)
                                        : NULL;
        if (c->ca_pem != NULL)
            n = strlen(ca);
        if (ca != NULL) {
            char *b64 = kcfg_b64_encode(ca, n);
            json_object_object_add(cj, "certificate-authority-data", json_object_new_string(b64));
            free(b64);
            free(ca);
        }
        if (cl != NULL && cl->proxy_url != NULL)
            json_object_object_add(cj, "proxy-url", json_object_new_string(cl->proxy_url));
        if (cl != NULL && cl->exec_config != NULL)
            json_object_object_add(cj, "config", json_object_get(cl->exec_config));
        json_object_object_add(spec, "cluster", cj);
    }
    json_object_object_add(spec, "interactive", json_object_new_boolean(0));
    json_object_object_add(root, "spec", spec);
    char *text = kobj_to_text(root, NULL);
    json_object_put(root);
    char *s = util_asprintf("KUBERNETES_EXEC_INFO=%s", text);
    free(text);
    return s;
}

static int use_exec(struct kp *p, yaml_node_t *m, const char *at, kube_config *c,
                    const struct kc_cluster *cl, bool active)
{
    const char *api, *command, *mode;
    bool provide = false;
    yaml_node_t *args, *env;
    char key[KEY_LEN];
    /* Already type-checked by check_exec. */
    get_str(p, m, at, "apiVersion", &api);
    get_str(p, m, at, "command", &command);
    get_str(p, m, at, "interactiveMode", &mode);
    get_bool(p, m, at, "provideClusterInfo", &provide);
    get_typed(p, m, at, "args", YAML_SEQUENCE_NODE, &args);
    get_typed(p, m, at, "env", YAML_SEQUENCE_NODE, &env);
    if (command == NULL) {
        join_key(key, at, "command");
        return kp_err(p, key, "not set (command must be specified to use exec authentication)");
    }
    if (api == NULL) {
        join_key(key, at, "apiVersion");
        return kp_err(p, key, "not set (apiVersion must be specified to use exec authentication)");
    }
    join_key(key, at, "apiVersion");
    if (strcmp(api, EXEC_API_V1) != 0 && strcmp(api, EXEC_API_V1BETA1) != 0)
        return kp_err(p, key, "\"%s\" is not supported (use %s or %s)", api, EXEC_API_V1,
                      EXEC_API_V1BETA1);
    join_key(key, at, "interactiveMode");
    /* client-go defaults interactiveMode to IfAvailable for v1beta1 only. */
    if (mode == NULL && strcmp(api, EXEC_API_V1) == 0)
        return kp_err(p, key, "not set (interactiveMode must be specified for %s)", EXEC_API_V1);
    if (mode != NULL && strcmp(mode, "Always") == 0)
        return kp_err(p, key,
                      "Always is not supported: a sidecar has no terminal (exec plugin "
                      "cannot support interactive mode: standard input is not a "
                      "terminal); use IfAvailable or Never");
    if (mode != NULL && strcmp(mode, "Never") != 0 && strcmp(mode, "IfAvailable") != 0)
        return kp_err(p, key, "invalid value \"%s\" (want Never, IfAvailable or Always)", mode);
    size_t n_env = seq_len(env);
    for (size_t i = 0; i < n_env; i++) {
        const char *name;
        key_fmt(key, "%s.env[%zu]", at, i);
        get_str(p, node_at(p, env->data.sequence.items.start[i]), key, "name", &name);
        if (name == NULL) {
            char k2[KEY_LEN];
            join_key(k2, key, "name");
            return kp_err(p, k2, "not set (env variable name must be specified)");
        }
    }
    if (!active)
        return 0;

    struct exec_plugin *x = util_calloc(1, sizeof(*x));
    x->where = util_asprintf("kubeconfig %s: %s", p->file, at);
    x->api_version = util_strdup(api);
    size_t n_args = seq_len(args);
    x->argv = util_calloc(n_args + 2, sizeof(char *));
    /* Like client-go, a command with a slash is a path (relative to the
     * kubeconfig's directory); a bare name is looked up in $PATH. */
    x->argv[0] =
        strchr(command, '/') != NULL ? kcfg_resolve(p->dir, command) : util_strdup(command);
    for (size_t i = 0; i < n_args; i++)
        x->argv[i + 1] = util_strdup(sval(node_at(p, args->data.sequence.items.start[i])));
    x->env = util_calloc(n_env + 1, sizeof(char *));
    for (size_t i = 0; i < n_env; i++) {
        yaml_node_t *e = node_at(p, env->data.sequence.items.start[i]);
        const char *name, *value;
        get_str(p, e, "", "name", &name);
        get_str(p, e, "", "value", &value);
        x->env[i] = util_asprintf("%s=%s", name, value != NULL ? value : "");
    }
    x->exec_info = exec_info(api, provide, c, cl);
    c->x = x;
    return 0;
}

static int use_user(struct kp *p, const struct kc_user *u, size_t idx, kube_config *c,
                    const struct kc_cluster *cl)
{
    char at[KEY_LEN], key[KEY_LEN];
    key_fmt(at, "users[%zu].user", idx);
    if (u->username != NULL || u->password != NULL) {
        join_key(key, at, u->username != NULL ? "username" : "password");
        return kp_err(p, key,
                      "basic authentication (username/password) is not supported; use a "
                      "token, a client certificate or an exec plugin");
    }
    if (u->auth_provider) {
        join_key(key, at, "auth-provider");
        return kp_err(p, key, "auth providers are not supported; use an exec plugin");
    }
    if (u->impersonate_key != NULL) {
        join_key(key, at, u->impersonate_key);
        return kp_err(p, key, "impersonation is not supported");
    }
    int rc = use_user_certs(p, u, at, c);
    if (rc != 0)
        return rc;
    c->token = util_strdup(u->token);
    if (u->token_file != NULL) {
        c->tf.path = kcfg_resolve(p->dir, u->token_file);
        /* client-go reads the file up front only when there is no token. */
        rc = kcfg_token_file_refresh(&c->tf, "");
        if (rc != 0 && u->token == NULL) {
            join_key(key, at, "tokenFile");
            if (rc == -EINVAL)
                return kp_err(p, key, "%s is empty", c->tf.path);
            return kp_err(p, key, "cannot read %s: %s", c->tf.path, strerror(-rc));
        }
    }
    /* client-go ignores the plugin when a token or a client certificate is
     * there; it is still validated. */
    bool active =
        u->token == NULL && u->token_file == NULL && c->cert_file == NULL && c->cert_pem == NULL;
    if (u->exec != NULL) {
        join_key(key, at, "exec");
        return use_exec(p, u->exec, key, c, cl, active);
    }
    return 0;
}

/* Drops what an http:// server never gets (client-go only sends credentials
 * and TLS settings when the transport is TLS). */
static void drop_tls_and_auth(kube_config *c, const char *file)
{
    if (c->token != NULL || c->tf.path != NULL || c->x != NULL || c->cert_file != NULL ||
        c->cert_pem != NULL)
        obs_warn("kubeconfig %s: server %s is not https; credentials are not sent", file,
                 c->server);
    char **fields[] = {&c->ca_file,  &c->ca_pem,  &c->server_name, &c->cert_file, &c->cert_pem,
                       &c->key_file, &c->key_pem, &c->token,       &c->tf.path,   &c->tf.value};
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++) {
        free(*fields[i]);
        *fields[i] = NULL;
    }
    kcfg_exec_free(c->x);
    c->x = NULL;
    c->tls.insecure = false;
}

/* The config for `--master` alone (client-go: no kubeconfig, nothing but
 * the host, no credentials). */
kube_config *kcfg_master_only(const char *master)
{
    kube_config *c = kcfg_config_new();
    c->server = kcfg_normalize_server(master, false);
    kcfg_config_sync_tls(c);
    return c;
}

static int build(struct kp *p, yaml_node_t *root, const char *master, kube_config **out,
                 bool *empty)
{
    bool have_master = master != NULL && master[0] != '\0';
    *empty = false;
    if (root == NULL || is_null(root)) {
        if (have_master) {
            *out = kcfg_master_only(master);
            return 0;
        }
        *empty = true;
        return kp_err(p, NULL, EMPTY_CONFIG_MSG " (the file is empty)");
    }
    if (root->type != YAML_MAPPING_NODE)
        return kp_err(p, NULL, "not a kubeconfig: top level is not a mapping");
    const char *s, *current;
    int rc;
    if ((rc = get_str(p, root, "", "kind", &s)) != 0)
        return rc;
    if (s != NULL && strcmp(s, "Config") != 0)
        return kp_err(p, "kind", "\"%s\" is not Config: not a kubeconfig", s);
    if ((rc = get_str(p, root, "", "apiVersion", &s)) != 0)
        return rc;
    if (s != NULL && strcmp(s, "v1") != 0)
        return kp_err(p, "apiVersion", "\"%s\" is not v1", s);
    if ((rc = get_str(p, root, "", "current-context", &current)) != 0)
        return rc;

    struct kc_all a = {0};
    rc = parse_lists(p, root, &a);
    if (rc != 0)
        goto out;
    if (current == NULL) {
        if (have_master) {
            *out = kcfg_master_only(master);
            goto out;
        }
        *empty = true;
        rc = kp_err(p, NULL, EMPTY_CONFIG_MSG " (current-context is not set)");
        goto out;
    }
    size_t ci = 0;
    while (ci < a.n_contexts && !name_is(a.contexts[ci].name, current))
        ci++;
    if (ci == a.n_contexts) {
        rc = kp_err(p, "current-context", "\"%s\" not found in contexts", current);
        goto out;
    }
    const struct kc_context *ctx = &a.contexts[ci];
    char at[KEY_LEN], key[KEY_LEN];
    key_fmt(at, "contexts[%zu].context", ci);

    const struct kc_cluster *cl = NULL;
    size_t cli = 0;
    if (ctx->cluster != NULL) {
        while (cli < a.n_clusters && !name_is(a.clusters[cli].name, ctx->cluster))
            cli++;
        if (cli == a.n_clusters) {
            join_key(key, at, "cluster");
            rc = kp_err(p, NULL, "%s \"%s\" not found in clusters", key, ctx->cluster);
            goto out;
        }
        cl = &a.clusters[cli];
    } else if (!have_master) {
        join_key(key, at, "cluster");
        rc = kp_err(p, key, "not set");
        goto out;
    }
    const struct kc_user *u = NULL;
    size_t ui = 0;
    if (ctx->user != NULL) {
        while (ui < a.n_users && !name_is(a.users[ui].name, ctx->user))
            ui++;
        if (ui == a.n_users) {
            join_key(key, at, "user");
            rc = kp_err(p, NULL, "%s \"%s\" not found in users", key, ctx->user);
            goto out;
        }
        u = &a.users[ui];
    }

    kube_config *c = kcfg_config_new();
    c->ns = util_strdup(ctx->ns);
    if (cl != NULL)
        rc = use_cluster(p, cl, cli, c, have_master);
    if (rc == 0 && (have_master || cl != NULL)) {
        const char *server = have_master ? master : cl->server;
        /* As client-go decides whether to send credentials: with the host
         * alone, a URL without a scheme is http. */
        c->server = kcfg_normalize_server(server, false);
    }
    if (rc == 0 && u != NULL)
        rc = use_user(p, u, ui, c, cl);
    if (rc != 0) {
        kube_config_free(c);
        goto out;
    }
    if (!kcfg_is_https(c->server))
        drop_tls_and_auth(c, p->file);
    kcfg_config_sync_tls(c);
    *out = c;
out:
    kc_all_free(&a);
    return rc;
}

int kcfg_from_file(const char *path, const char *master, kube_config **out, bool *empty)
{
    *out = NULL;
    *empty = false;
    struct kp p = {.file = path};
    size_t len = 0;
    char *text = kcfg_read_file(path, MAX_CONFIG_BYTES, &len, NULL);
    if (text == NULL) {
        int e = errno;
        if (e == EFBIG)
            return util_err_set(-EINVAL, "kubeconfig %s: larger than %d bytes", path,
                                MAX_CONFIG_BYTES);
        return util_err_set(-e, "kubeconfig %s: cannot read: %s", path, strerror(e));
    }
    yaml_parser_t parser;
    if (!yaml_parser_initialize(&parser))
        abort();
    yaml_parser_set_input_string(&parser, (const unsigned char *)text, len);
    int rc;
    if (!yaml_parser_load(&parser, &p.doc)) {
        const char *problem = parser.problem != NULL ? parser.problem : "unknown error";
        if (parser.error == YAML_READER_ERROR)
            rc = kp_err(&p, NULL, "YAML syntax error at byte %zu: %s", parser.problem_offset,
                        problem);
        else if (parser.context != NULL)
            rc = kp_err(&p, NULL, "YAML syntax error at line %zu, column %zu: %s (%s)",
                        parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem,
                        parser.context);
        else
            rc = kp_err(&p, NULL, "YAML syntax error at line %zu, column %zu: %s",
                        parser.problem_mark.line + 1, parser.problem_mark.column + 1, problem);
        yaml_parser_delete(&parser);
        free(text);
        return rc;
    }
    p.dir = kcfg_dir_of(path);
    rc = build(&p, yaml_document_get_root_node(&p.doc), master, out, empty);
    yaml_document_delete(&p.doc);
    yaml_parser_delete(&parser);
    free(text);
    free(p.dir);
    return rc;
}

int kube_config_from_file(const char *path, const char *master, kube_config **out)
{
    bool empty;
    if (path == NULL || path[0] == '\0') {
        *out = NULL;
        return util_err_set(-EINVAL, "kubeconfig: no path given");
    }
    return kcfg_from_file(path, master, out, &empty);
}
