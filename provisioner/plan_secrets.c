/*
 * plan_secrets: StorageClass secret references (A1.3), resolved the way
 * upstream's getSecretReference does.
 *
 * Each of the seven kinds has a prefixed key pair (and four of them an older
 * csi* pair still accepted with a warning); a kind with neither falls back
 * to the default secret-name/-namespace pair. A pair must be complete and
 * non-empty. Values are templates expanded with Go's os.Expand rules, so
 * "${pvc.name}" and "$x" are tokens, "${}" vanishes and a lone "$" stays;
 * every unknown token is reported. The namespace may use ${pv.name} and
 * ${pvc.namespace}; the name also ${pvc.name} and ${pvc.annotations['k']},
 * which the PVC's user controls. The results must be a DNS-1123 label
 * (namespace) and subdomain (name).
 *
 * Nothing here looks a Secret up: that is the controller's I/O.
 */
#include "plan_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct secret_keys {
    const char *name;         /* upstream's secretParamsMap.name */
    const char *dep_name_key; /* deprecated keys, or NULL */
    const char *dep_ns_key;
    const char *name_key;
    const char *ns_key;
} secret_keys;

#define P PROV_PARAM_PREFIX

static const secret_keys KINDS[PROV_SECRET_KINDS] = {
    [PROV_SECRET_PROVISIONER] = {"Provisioner", "csiProvisionerSecretName",
                                 "csiProvisionerSecretNamespace", P "provisioner-secret-name",
                                 P "provisioner-secret-namespace"},
    [PROV_SECRET_CONTROLLER_PUBLISH] = {"ControllerPublish", "csiControllerPublishSecretName",
                                        "csiControllerPublishSecretNamespace",
                                        P "controller-publish-secret-name",
                                        P "controller-publish-secret-namespace"},
    [PROV_SECRET_NODE_STAGE] = {"NodeStage", "csiNodeStageSecretName",
                                "csiNodeStageSecretNamespace", P "node-stage-secret-name",
                                P "node-stage-secret-namespace"},
    [PROV_SECRET_NODE_PUBLISH] = {"NodePublish", "csiNodePublishSecretName",
                                  "csiNodePublishSecretNamespace", P "node-publish-secret-name",
                                  P "node-publish-secret-namespace"},
    [PROV_SECRET_CONTROLLER_EXPAND] = {"ControllerExpand", NULL, NULL,
                                       P "controller-expand-secret-name",
                                       P "controller-expand-secret-namespace"},
    [PROV_SECRET_NODE_EXPAND] = {"NodeExpand", NULL, NULL, P "node-expand-secret-name",
                                 P "node-expand-secret-namespace"},
    [PROV_SECRET_CONTROLLER_MODIFY] = {"ControllerModify", NULL, NULL,
                                       P "controller-modify-secret-name",
                                       P "controller-modify-secret-namespace"},
};

static const secret_keys DEFAULT_KEYS = {"Default", NULL, NULL, P "secret-name",
                                         P "secret-namespace"};

const char *prov_secret_kind_name(prov_secret_kind kind)
{
    return (unsigned)kind < PROV_SECRET_KINDS ? KINDS[kind].name : "Unknown";
}

/* Present as a key, whatever its value (Go's `_, ok := params[k]`). */
static bool param(const json_object *params, const char *key, const char **value)
{
    json_object *v = NULL;
    if (key == NULL || kobj_typed(params, json_type_object) == NULL ||
        !json_object_object_get_ex(params, key, &v))
        return false;
    v = kobj_typed(v, json_type_string);
    *value = v != NULL ? json_object_get_string(v) : "";
    return true;
}

/* verifyAndGetSecretNameAndNamespaceTemplate: both NULL when the kind has
 * no keys at all. */
static int templates(const prov_config *cfg, const secret_keys *k, const json_object *params,
                     const char **name, const char **ns)
{
    int n_name = 0, n_ns = 0;
    const char *v = NULL;

    *name = *ns = NULL;
    if (param(params, k->dep_name_key, &v)) {
        *name = v;
        n_name++;
        plan_warn_deprecated(cfg, k->dep_name_key, k->name_key);
    }
    if (param(params, k->dep_ns_key, &v)) {
        *ns = v;
        n_ns++;
        plan_warn_deprecated(cfg, k->dep_ns_key, k->ns_key);
    }
    if (param(params, k->name_key, &v)) {
        *name = v;
        n_name++;
    }
    if (param(params, k->ns_key, &v)) {
        *ns = v;
        n_ns++;
    }
    if (n_name > 1 || n_ns > 1)
        return util_err_set(-EINVAL,
                            "%s secrets specified in parameters with both \"csi\" and \"%s\" keys",
                            k->name, PROV_PARAM_PREFIX);
    if (n_name != n_ns)
        return util_err_set(-EINVAL,
                            "either name and namespace for %s secrets specified, Both must be "
                            "specified",
                            k->name);
    if (n_name == 1 && ((*name)[0] == '\0' || (*ns)[0] == '\0'))
        return util_err_set(-EINVAL,
                            "%s secrets specified in parameters but value of either namespace or "
                            "name is empty",
                            k->name);
    return 0;
}

/* ---- os.Expand ----------------------------------------------------------- */

typedef struct tokens {
    const char *pv_name;
    const json_object *pvc; /* NULL: no PVC tokens */
    bool name_scope;        /* the name template: PVC name and annotations too */
    const char **missing;   /* sorted, unique */
    size_t n_missing;
} tokens;

static const char *lookup(tokens *t, const char *name)
{
    if (strcmp(name, "pv.name") == 0)
        return t->pv_name;
    if (t->pvc == NULL)
        return NULL;
    if (strcmp(name, "pvc.namespace") == 0) {
        const char *ns = kobj_path_str(t->pvc, "metadata.namespace");
        return ns != NULL ? ns : "";
    }
    if (!t->name_scope)
        return NULL;
    if (strcmp(name, "pvc.name") == 0) {
        const char *n = kobj_path_str(t->pvc, "metadata.name");
        return n != NULL ? n : "";
    }
    static const char open[] = "pvc.annotations['";
    size_t len = strlen(name);
    if (len >= sizeof(open) - 1 + 2 && strncmp(name, open, sizeof(open) - 1) == 0 &&
        strcmp(name + len - 2, "']") == 0) {
        size_t klen = len - (sizeof(open) - 1) - 2;
        char *key = util_calloc(klen + 1, 1);
        memcpy(key, name + sizeof(open) - 1, klen);
        json_object *ann = kobj_path(t->pvc, "metadata.annotations");
        json_object *v = NULL;
        const char *res = NULL;
        if (ann != NULL && json_object_object_get_ex(ann, key, &v))
            res = kobj_typed(v, json_type_string) != NULL ? json_object_get_string(v) : "";
        free(key);
        return res;
    }
    return NULL;
}

static void add_missing(tokens *t, const char *name)
{
    size_t i = 0;
    while (i < t->n_missing && strcmp(t->missing[i], name) < 0)
        i++;
    if (i < t->n_missing && strcmp(t->missing[i], name) == 0)
        return;
    const char **m = realloc(t->missing, (t->n_missing + 1) * sizeof(*m));
    if (m == NULL)
        abort();
    memmove(m + i + 1, m + i, (t->n_missing - i) * sizeof(*m));
    m[i] = util_strdup(name);
    t->missing = m;
    t->n_missing++;
}

static char *dupn(const char *s, size_t n)
{
    char *p = util_calloc(n + 1, 1);
    memcpy(p, s, n);
    return p;
}

static bool shell_special(char c)
{
    return c != '\0' && strchr("*#$@!?-0123456789", c) != NULL;
}

static bool alnum_(char c)
{
    return c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* Go's getShellName on s (the text after a '$', non-empty): the name
 * (copied) and how many bytes it took; name NULL with w > 0 is bad syntax
 * that is eaten, name NULL with w == 0 leaves the '$'. */
static char *shell_name(const char *s, size_t *w)
{
    size_t len = strlen(s);
    if (s[0] == '{') {
        if (len > 2 && shell_special(s[1]) && s[2] == '}') {
            *w = 3;
            return dupn(s + 1, 1);
        }
        for (size_t i = 1; i < len; i++) {
            if (s[i] == '}') {
                *w = i + 1;
                return i == 1 ? NULL : dupn(s + 1, i - 1);
            }
        }
        *w = 1;
        return NULL;
    }
    if (shell_special(s[0])) {
        *w = 1;
        return dupn(s, 1);
    }
    size_t i = 0;
    while (alnum_(s[i]))
        i++;
    *w = i;
    return i > 0 ? dupn(s, i) : NULL;
}

static char *expand(const char *tmpl, tokens *t)
{
    plan_buf b = {0};
    size_t len = strlen(tmpl), i = 0;
    for (size_t j = 0; j < len; j++) {
        if (tmpl[j] != '$' || j + 1 >= len)
            continue;
        plan_buf_addn(&b, tmpl + i, j - i);
        size_t w = 0;
        char *name = shell_name(tmpl + j + 1, &w);
        if (name == NULL && w == 0) {
            plan_buf_add(&b, "$"); /* "$" not followed by a name stays */
        } else if (name != NULL) {
            const char *v = lookup(t, name);
            if (v == NULL)
                add_missing(t, name);
            else
                plan_buf_add(&b, v);
        }
        free(name);
        j += w;
        i = j + 1;
    }
    plan_buf_addn(&b, tmpl + i, len - i);
    return plan_buf_take(&b);
}

static void tokens_clear(tokens *t)
{
    for (size_t i = 0; i < t->n_missing; i++)
        free((char *)t->missing[i]);
    free(t->missing);
    t->missing = NULL;
    t->n_missing = 0;
}

/* resolveTemplate plus the "error resolving value" wrapping. */
static int resolve(const char *tmpl, tokens *t, char **out)
{
    *out = expand(tmpl, t);
    if (t->n_missing == 0)
        return 0;
    plan_buf b = {0};
    plan_buf_add(&b, "error resolving value ");
    plan_buf_add_quoted(&b, tmpl);
    plan_buf_add(&b, ": invalid tokens: [");
    for (size_t i = 0; i < t->n_missing; i++) {
        if (i > 0)
            plan_buf_add(&b, " ");
        plan_buf_add_quoted(&b, t->missing[i]);
    }
    plan_buf_add(&b, "]");
    util_err_set(-EINVAL, "%s", b.s);
    plan_buf_free(&b);
    free(*out);
    *out = NULL;
    return -EINVAL;
}

/* ---- DNS-1123 ------------------------------------------------------------ */

static bool label_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

/* [a-z0-9]([-a-z0-9]*[a-z0-9])? over s[0..n) */
static bool label_ok(const char *s, size_t n)
{
    if (n == 0 || !label_char(s[0]) || !label_char(s[n - 1]))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!label_char(s[i]) && s[i] != '-')
            return false;
    return true;
}

static bool dns1123_label(const char *s)
{
    size_t n = strlen(s);
    return n <= 63 && label_ok(s, n);
}

static bool dns1123_subdomain(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 253)
        return false;
    const char *p = s;
    for (;;) {
        const char *dot = strchr(p, '.');
        size_t len = dot != NULL ? (size_t)(dot - p) : strlen(p);
        if (!label_ok(p, len))
            return false;
        if (dot == NULL)
            return true;
        p = dot + 1;
    }
}

static int invalid(const char *tmpl, const char *resolved, const char *what)
{
    plan_buf b = {0};
    plan_buf_add_quoted(&b, tmpl);
    if (strcmp(tmpl, resolved) != 0) {
        plan_buf_add(&b, " resolved to ");
        plan_buf_add_quoted(&b, resolved);
        plan_buf_add(&b, " which");
    }
    plan_buf_addf(&b, " is not a valid %s name", what);
    int r = util_err_set(-EINVAL, "%s", b.s);
    plan_buf_free(&b);
    return r;
}

/* ---- resolution ---------------------------------------------------------- */

static int wrap_template_error(int r, const char *which)
{
    char *msg = util_strdup(util_err_last());
    r = util_err_set(r, "failed to get %sname and namespace template from params: %s", which, msg);
    free(msg);
    return r;
}

int prov_secret_ref_resolve(const prov_config *cfg, prov_secret_kind kind,
                            const json_object *sc_params, const char *pv_name,
                            const json_object *pvc, prov_secret_ref *out)
{
    const char *name_t = NULL, *ns_t = NULL;

    out->name = out->namespace = NULL;
    if ((unsigned)kind >= PROV_SECRET_KINDS)
        return util_err_set(-EINVAL, "unknown secret kind %d", (int)kind);
    int r = templates(cfg, &KINDS[kind], sc_params, &name_t, &ns_t);
    if (r < 0)
        return wrap_template_error(r, "");
    if (name_t == NULL && ns_t == NULL) {
        r = templates(cfg, &DEFAULT_KEYS, sc_params, &name_t, &ns_t);
        if (r < 0)
            return wrap_template_error(r, "default ");
    }
    if (name_t == NULL || ns_t == NULL)
        return 0; /* none given (templates() returns both or neither) */

    tokens t = {.pv_name = pv_name != NULL ? pv_name : "", .pvc = pvc};
    char *ns = NULL, *name = NULL;
    r = resolve(ns_t, &t, &ns);
    tokens_clear(&t);
    if (r < 0)
        return r;
    if (!dns1123_label(ns)) {
        r = invalid(ns_t, ns, "namespace");
        free(ns);
        return r;
    }
    t.name_scope = true;
    r = resolve(name_t, &t, &name);
    tokens_clear(&t);
    if (r == 0 && !dns1123_subdomain(name)) {
        r = invalid(name_t, name, "secret");
        free(name);
    }
    if (r < 0) {
        free(ns);
        return r;
    }
    out->name = name;
    out->namespace = ns;
    return 0;
}

int prov_secret_refs_resolve(const prov_config *cfg, const json_object *sc_params,
                             const char *pv_name, const json_object *pvc, prov_secret_refs *out)
{
    memset(out, 0, sizeof(*out));
    for (int k = 0; k < PROV_SECRET_KINDS; k++) {
        int r = prov_secret_ref_resolve(cfg, (prov_secret_kind)k, sc_params, pv_name, pvc,
                                        &out->ref[k]);
        if (r < 0) {
            prov_secret_refs_clear(out);
            return r;
        }
    }
    return 0;
}

void prov_secret_refs_clear(prov_secret_refs *refs)
{
    if (refs == NULL)
        return;
    for (int k = 0; k < PROV_SECRET_KINDS; k++) {
        free(refs->ref[k].name);
        free(refs->ref[k].namespace);
        refs->ref[k].name = refs->ref[k].namespace = NULL;
    }
}
