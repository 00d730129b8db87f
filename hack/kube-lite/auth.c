/*
 * auth: who is calling (static bearer tokens) and whether they may (RBAC).
 *
 * Tokens come from kube-apiserver's --token-auth-file CSV, parsed with the
 * quoting rules of Go's encoding/csv, and sit in a flat array: lookup
 * compares the presented token with every entry in constant time per entry
 * and never stops early, so timing does not tell how much of a token matched
 * or which entry did. Upstream only warns about a duplicate token (the last
 * wins) or an empty one (skipped); here both refuse the file, naming the line.
 * Service-account-shaped user names get the service-account groups here.
 *
 * RBAC is evaluated per request straight from the stored (Cluster)Roles and
 * (Cluster)RoleBindings through a kl_rbac_view, with the matching rules of
 * kube-apiserver's RBAC authorizer (rbac.go, evaluation_helpers.go,
 * validation/rule.go). Not done: ClusterRole aggregationRule (a ClusterRole
 * grants exactly the rules it stores), escalation checks on RBAC writes, and
 * the "RBAC: ..." reason upstream appends when a binding's role is missing.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "kobj/kobj.h"
#include "kube-lite/kl.h"

#define GROUP_AUTHENTICATED "system:authenticated"
#define GROUP_MASTERS       "system:masters"
#define GROUP_SA_ALL        "system:serviceaccounts"
#define SA_USER_PREFIX      "system:serviceaccount:"

static void *xrealloc(void *p, size_t n)
{
    void *q = realloc(p, n);
    if (q == NULL) {
        /* Same policy as util_str: out of memory is not an input error. */
        fputs("kube-lite: out of memory\n", stderr);
        abort();
    }
    return q;
}

/* ---- small growable buffers --------------------------------------------------- */

typedef struct strbuf {
    char *p;
    size_t len, cap;
} strbuf;

static void sb_putc(strbuf *b, char c)
{
    if (b->len + 2 > b->cap) {
        b->cap = b->cap ? b->cap * 2 : 32;
        b->p = xrealloc(b->p, b->cap);
    }
    b->p[b->len++] = c;
    b->p[b->len] = '\0';
}

/* The built string (never NULL); the buffer is left empty. */
static char *sb_take(strbuf *b)
{
    char *s = b->p ? b->p : util_strdup("");
    *b = (strbuf){0};
    return s;
}

typedef struct fields {
    char **v;
    size_t n, cap;
} fields;

static void fields_push(fields *f, char *s)
{
    if (f->n == f->cap) {
        f->cap = f->cap ? f->cap * 2 : 8;
        f->v = xrealloc(f->v, f->cap * sizeof(*f->v));
    }
    f->v[f->n++] = s;
}

static void fields_clear(fields *f)
{
    for (size_t i = 0; i < f->n; i++)
        free(f->v[i]);
    f->n = 0;
}

/* ---- CSV (Go encoding/csv rules, FieldsPerRecord = -1) ------------------------ */

typedef struct csv {
    const char *p, *end;
    const char *path;
    const char *line_start;
    int line; /* 1-based line of p */
} csv;

static void csv_newline(csv *c)
{
    c->line++;
    c->line_start = c->p;
}

static int csv_error(const csv *c, const char *what)
{
    return util_err_set(-EINVAL, "token file '%s', line %d, column %d: %s", c->path, c->line,
                        (int)(c->p - c->line_start) + 1, what);
}

static bool at_crlf(const csv *c)
{
    return c->p + 1 < c->end && c->p[0] == '\r' && c->p[1] == '\n';
}

/* Moves past blank lines and '#' comment lines; false at the end of input. */
static bool csv_skip_ignored(csv *c)
{
    while (c->p < c->end) {
        if (*c->p == '#') {
            while (c->p < c->end && *c->p != '\n')
                c->p++;
        } else if (at_crlf(c)) {
            c->p++;
        } else if (*c->p != '\n') {
            return true;
        }
        if (c->p < c->end) {
            c->p++;
            csv_newline(c);
        }
    }
    return false;
}

/* An unquoted field: up to ',' or the end of the line. */
static int csv_plain(csv *c, strbuf *b)
{
    while (c->p < c->end && *c->p != ',' && *c->p != '\n') {
        if (*c->p == '"')
            return csv_error(c, "bare \" in non-quoted-field");
        if (at_crlf(c)) {
            c->p++;
            break;
        }
        sb_putc(b, *c->p++);
    }
    return 0;
}

/* A quoted field: "" is a quote, newlines may appear inside. */
static int csv_quoted(csv *c, strbuf *b)
{
    c->p++;
    for (;;) {
        if (c->p >= c->end)
            return csv_error(c, "extraneous or missing \" in quoted-field");
        if (*c->p == '"' && c->p + 1 < c->end && c->p[1] == '"') {
            sb_putc(b, '"');
            c->p += 2;
        } else if (*c->p == '"') {
            c->p++;
            if (at_crlf(c))
                c->p++;
            if (c->p < c->end && *c->p != ',' && *c->p != '\n')
                return csv_error(c, "extraneous or missing \" in quoted-field");
            return 0;
        } else if (*c->p == '\n' || at_crlf(c)) {
            /* Go keeps a line break inside quotes as a bare "\n". */
            c->p += *c->p == '\r' ? 2 : 1;
            csv_newline(c);
            sb_putc(b, '\n');
        } else {
            sb_putc(b, *c->p++);
        }
    }
}

/* Reads one record into `out` (cleared first); 1, 0 at the end, or -EINVAL. */
static int csv_record(csv *c, fields *out, int *line)
{
    fields_clear(out);
    if (!csv_skip_ignored(c))
        return 0;
    *line = c->line;
    for (;;) {
        strbuf b = {0};
        int r = c->p < c->end && *c->p == '"' ? csv_quoted(c, &b) : csv_plain(c, &b);
        if (r < 0) {
            free(b.p);
            return r;
        }
        fields_push(out, sb_take(&b));
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p < c->end) {
            c->p++; /* the '\n' */
            csv_newline(c);
        }
        return 1;
    }
}

/* ---- tokens -------------------------------------------------------------------- */

typedef struct token_entry {
    char *token;
    size_t len;
    int line;
    kl_user user;
} token_entry;

struct kl_tokens {
    token_entry *v;
    size_t n, cap;
};

static bool user_in_group(const kl_user *u, const char *group)
{
    for (size_t i = 0; i < u->n_groups; i++)
        if (strcmp(u->groups[i], group) == 0)
            return true;
    return false;
}

/* Appends `g` (taking ownership) unless empty or already there. */
static void user_add_group(kl_user *u, char *g)
{
    if (*g == '\0' || user_in_group(u, g)) {
        free(g);
        return;
    }
    u->groups = xrealloc(u->groups, (u->n_groups + 1) * sizeof(*u->groups));
    u->groups[u->n_groups++] = g;
}

/* The groups of the file's 4th column, then the ones the server adds. */
static void user_fill_groups(kl_user *u, const char *listed)
{
    const char *p = listed;
    while (p != NULL && *p != '\0') {
        const char *comma = strchr(p, ',');
        size_t n = comma ? (size_t)(comma - p) : strlen(p);
        user_add_group(u, util_asprintf("%.*s", (int)n, p));
        p = comma ? comma + 1 : NULL;
    }
    /* system:serviceaccount:<ns>:<name>, both parts non-empty, no more colons. */
    if (util_has_prefix(u->name, SA_USER_PREFIX)) {
        const char *ns = u->name + strlen(SA_USER_PREFIX);
        const char *colon = strchr(ns, ':');
        if (colon != NULL && colon != ns && colon[1] != '\0' && strchr(colon + 1, ':') == NULL) {
            user_add_group(u, util_strdup(GROUP_SA_ALL));
            user_add_group(u, util_asprintf(GROUP_SA_ALL ":%.*s", (int)(colon - ns), ns));
        }
    }
    user_add_group(u, util_strdup(GROUP_AUTHENTICATED));
}

/* Checks one record and moves its token and user name into a new entry. */
static int tokens_add(kl_tokens *t, const char *path, fields *f, int line)
{
    if (f->n < 3)
        return util_err_set(-EINVAL,
                            "token file '%s', line %d: must have at least 3 columns (token, "
                            "user name, user uid), found %zu",
                            path, line, f->n);
    if (f->v[0][0] == '\0')
        return util_err_set(-EINVAL, "token file '%s', line %d: empty token", path, line);
    size_t len = strlen(f->v[0]);
    for (size_t i = 0; i < t->n; i++)
        if (t->v[i].len == len && memcmp(t->v[i].token, f->v[0], len) == 0)
            return util_err_set(-EINVAL,
                                "token file '%s', line %d: duplicate token (first on line %d)",
                                path, line, t->v[i].line);
    if (t->n == t->cap) {
        t->cap = t->cap ? t->cap * 2 : 16;
        t->v = xrealloc(t->v, t->cap * sizeof(*t->v));
    }
    token_entry *e = &t->v[t->n++];
    *e = (token_entry){.token = f->v[0], .len = len, .line = line};
    e->user.name = f->v[1];
    f->v[0] = NULL;
    f->v[1] = NULL;
    user_fill_groups(&e->user, f->n > 3 ? f->v[3] : NULL);
    return 0;
}

/* The whole file, or NULL with *r set to the error. */
static char *read_file(const char *path, size_t *len, int *r)
{
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        int e = errno;
        *r = util_err_set(-e, "open token file '%s': %s", path, strerror(e));
        return NULL;
    }
    size_t cap = 4096, used = 0, n;
    char *buf = xrealloc(NULL, cap);
    while ((n = fread(buf + used, 1, cap - used, fp)) > 0) {
        used += n;
        if (used == cap) {
            cap *= 2;
            buf = xrealloc(buf, cap);
        }
    }
    int bad = ferror(fp);
    fclose(fp);
    if (bad) {
        free(buf);
        *r = util_err_set(-EIO, "read token file '%s': I/O error", path);
        return NULL;
    }
    *len = used;
    return buf;
}

int kl_tokens_load(const char *path, kl_tokens **out)
{
    *out = NULL;
    size_t len = 0;
    int r = 0;
    char *text = read_file(path, &len, &r);
    if (text == NULL)
        return r;

    kl_tokens *t = util_calloc(1, sizeof(*t));
    csv c = {.p = text, .end = text + len, .path = path, .line_start = text, .line = 1};
    fields f = {0};
    int line = 0;
    while ((r = csv_record(&c, &f, &line)) > 0 && (r = tokens_add(t, path, &f, line)) == 0)
        ;
    fields_clear(&f);
    free(f.v);
    /* The file held secrets: keep them out of freed heap. */
    explicit_bzero(text, len);
    free(text);
    if (r < 0) {
        kl_tokens_free(t);
        return r;
    }
    *out = t;
    return 0;
}

/* Equal contents in time that depends on the lengths only. */
static bool equal_const_time(const char *a, size_t alen, const char *b, size_t blen)
{
    if (alen != blen)
        return false;
    volatile unsigned char diff = 0;
    for (size_t i = 0; i < alen; i++)
        diff |= (unsigned char)(a[i] ^ b[i]);
    return diff == 0;
}

const kl_user *kl_tokens_lookup(const kl_tokens *t, const char *token)
{
    if (t == NULL || token == NULL || *token == '\0')
        return NULL;
    size_t len = strlen(token);
    const kl_user *found = NULL;
    for (size_t i = 0; i < t->n; i++) {
        bool eq = equal_const_time(t->v[i].token, t->v[i].len, token, len);
        found = eq ? &t->v[i].user : found;
    }
    return found;
}

void kl_tokens_free(kl_tokens *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++) {
        token_entry *e = &t->v[i];
        explicit_bzero(e->token, e->len);
        free(e->token);
        free(e->user.name);
        for (size_t j = 0; j < e->user.n_groups; j++)
            free(e->user.groups[j]);
        free(e->user.groups);
    }
    free(t->v);
    free(t);
}

/* ---- RBAC ---------------------------------------------------------------------- */

/* The upstream system:discovery and system:public-info-viewer paths (GET only). */
static const char *const discovery_urls[] = {
    "/api",     "/api/*",    "/apis",    "/apis/*", "/openapi", "/openapi/*",
    "/version", "/version/", "/healthz", "/livez",  "/readyz",
};

static const char *nz(const char *s)
{
    return s ? s : "";
}

/* True when the string list holds `want` or the wildcard "*". */
static bool list_matches(const json_object *arr, const char *want)
{
    for (size_t i = 0, n = kobj_len(arr); i < n; i++) {
        const char *s = kobj_str_at(arr, i);
        if (s != NULL && (strcmp(s, "*") == 0 || strcmp(s, want) == 0))
            return true;
    }
    return false;
}

/* rule "r" matches resource r only; "r/s" only r's subresource s; "*"
 * everything; "x/s" with x == "*" the subresource s of any resource. */
static bool resource_matches(const json_object *rules, const char *resource, const char *sub)
{
    size_t rlen = strlen(resource);
    for (size_t i = 0, n = kobj_len(rules); i < n; i++) {
        const char *s = kobj_str_at(rules, i);
        if (s == NULL)
            continue;
        if (strcmp(s, "*") == 0)
            return true;
        if (*sub == '\0') {
            if (strcmp(s, resource) == 0)
                return true;
            continue;
        }
        if (strncmp(s, resource, rlen) == 0 && s[rlen] == '/' && strcmp(s + rlen + 1, sub) == 0)
            return true;
        if (s[0] == '*' && s[1] == '/' && strcmp(s + 2, sub) == 0)
            return true;
    }
    return false;
}

/* No names listed means every name; otherwise the request must name one. */
static bool resource_name_matches(const json_object *names, const char *name)
{
    size_t n = kobj_len(names);
    if (n == 0)
        return true;
    for (size_t i = 0; i < n; i++) {
        const char *s = kobj_str_at(names, i);
        if (s != NULL && strcmp(s, name) == 0)
            return true;
    }
    return false;
}

/* "*" matches all; "p*" (any number of trailing stars) is a prefix. */
static bool url_matches(const char *pattern, const char *path)
{
    if (strcmp(pattern, "*") == 0 || strcmp(pattern, path) == 0)
        return true;
    size_t n = strlen(pattern);
    if (n == 0 || pattern[n - 1] != '*')
        return false;
    while (n > 0 && pattern[n - 1] == '*')
        n--;
    return strncmp(pattern, path, n) == 0;
}

static bool rule_allows(const json_object *rule, const kl_attrs *a)
{
    if (!list_matches(kobj_get(rule, "verbs"), nz(a->verb)))
        return false;
    if (a->resource_request)
        return list_matches(kobj_get(rule, "apiGroups"), nz(a->group)) &&
               resource_matches(kobj_get(rule, "resources"), nz(a->resource), nz(a->subresource)) &&
               resource_name_matches(kobj_get(rule, "resourceNames"), nz(a->name));
    const json_object *urls = kobj_get(rule, "nonResourceURLs");
    for (size_t i = 0, n = kobj_len(urls); i < n; i++) {
        const char *s = kobj_str_at(urls, i);
        if (s != NULL && url_matches(s, nz(a->path)))
            return true;
    }
    return false;
}

/* A ServiceAccount subject's namespace defaults to the binding's (the
 * request's); a ClusterRoleBinding has none, so such a subject never matches. */
static bool subject_applies(const json_object *s, const kl_user *u, const char *binding_ns)
{
    const char *kind = kobj_str(s, "kind"), *name = kobj_str(s, "name");
    if (kind == NULL || name == NULL)
        return false;
    if (strcmp(kind, "User") == 0)
        return strcmp(u->name, name) == 0;
    if (strcmp(kind, "Group") == 0)
        return user_in_group(u, name);
    if (strcmp(kind, "ServiceAccount") != 0)
        return false;
    const char *ns = nz(kobj_str(s, "namespace"));
    if (*ns == '\0')
        ns = binding_ns;
    if (*ns == '\0')
        return false;
    /* u->name == "system:serviceaccount:" ns ":" name, without building it. */
    const char *p = u->name;
    size_t nslen = strlen(ns);
    if (!util_has_prefix(p, SA_USER_PREFIX))
        return false;
    p += strlen(SA_USER_PREFIX);
    return strncmp(p, ns, nslen) == 0 && p[nslen] == ':' && strcmp(p + nslen + 1, name) == 0;
}

typedef struct rbac_walk {
    const kl_rbac_view *v;
    const kl_user *u;
    const kl_attrs *a;
    const char *ns; /* the request namespace for RoleBindings, "" for cluster ones */
    bool allowed;
} rbac_walk;

/* The (Cluster)Role a binding refers to, or NULL when it does not exist. A
 * ClusterRoleBinding can only refer to a ClusterRole. */
static const json_object *role_of(const rbac_walk *w, const json_object *binding)
{
    const json_object *ref = kobj_get(binding, "roleRef");
    const char *kind = kobj_str(ref, "kind"), *name = kobj_str(ref, "name");
    if (kind == NULL || name == NULL || w->v->get == NULL)
        return NULL;
    if (strcmp(kind, "ClusterRole") == 0)
        return w->v->get(w->v->ud, "clusterroles", NULL, name);
    if (strcmp(kind, "Role") == 0 && *w->ns != '\0')
        return w->v->get(w->v->ud, "roles", w->ns, name);
    return NULL;
}

static bool visit_binding(void *fud, const json_object *binding)
{
    rbac_walk *w = fud;
    const json_object *subjects = kobj_get(binding, "subjects");
    bool applies = false;
    for (size_t i = 0, n = kobj_len(subjects); i < n && !applies; i++)
        applies = subject_applies(kobj_at(subjects, i), w->u, w->ns);
    if (!applies)
        return false;
    const json_object *rules = kobj_get(role_of(w, binding), "rules");
    for (size_t i = 0, n = kobj_len(rules); i < n; i++) {
        if (rule_allows(kobj_at(rules, i), w->a)) {
            w->allowed = true;
            return true;
        }
    }
    return false;
}

static bool discovery_allows(const kl_user *u, const kl_attrs *a)
{
    if (a->resource_request || strcmp(nz(a->verb), "get") != 0 ||
        !user_in_group(u, GROUP_AUTHENTICATED))
        return false;
    for (size_t i = 0; i < sizeof(discovery_urls) / sizeof(discovery_urls[0]); i++)
        if (url_matches(discovery_urls[i], nz(a->path)))
            return true;
    return false;
}

bool kl_rbac_allows(const kl_rbac_view *v, const kl_user *u, const kl_attrs *a)
{
    if (u == NULL || a == NULL)
        return false;
    if (user_in_group(u, GROUP_MASTERS) || discovery_allows(u, a))
        return true;
    if (v == NULL || v->each == NULL)
        return false;
    rbac_walk w = {.v = v, .u = u, .a = a, .ns = ""};
    v->each(v->ud, "clusterrolebindings", NULL, visit_binding, &w);
    if (!w.allowed && *nz(a->ns) != '\0') {
        w.ns = a->ns;
        v->each(v->ud, "rolebindings", a->ns, visit_binding, &w);
    }
    return w.allowed;
}

/* ---- 403 message -------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at p (1..4), or 0 when invalid. */
static size_t utf8_len(const unsigned char *p)
{
    size_t n = p[0] >= 0xf0 ? 4 : p[0] >= 0xe0 ? 3 : p[0] >= 0xc2 ? 2 : 0;
    if (n == 0 || p[0] > 0xf4)
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    /* Overlong 3/4-byte forms, surrogates and code points past U+10FFFF. */
    if ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0) ||
        (p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))
        return 0;
    return n;
}

/* Go's %q of a string: the messages quote user-supplied names this way. Other
 * non-printable code points than C0/C1 controls are kept as they are. */
static char *go_quote(const char *s)
{
    static const char hex[] = "0123456789abcdef";
    static const char plain[] = "\"\\\a\b\f\n\r\t\v", escaped[] = "\"\\abfnrtv";
    strbuf b = {0};
    sb_putc(&b, '"');
    for (const unsigned char *p = (const unsigned char *)s; *p != '\0';) {
        const char *short_esc = strchr(plain, *p);
        size_t n = *p < 0x80 ? 1 : utf8_len(p);
        if (short_esc != NULL) {
            sb_putc(&b, '\\');
            sb_putc(&b, escaped[short_esc - plain]);
            p++;
        } else if (*p < 0x20 || *p == 0x7f || n == 0) {
            sb_putc(&b, '\\');
            sb_putc(&b, 'x');
            sb_putc(&b, hex[*p >> 4]);
            sb_putc(&b, hex[*p & 0xf]);
            p++;
        } else if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0) {
            /* A C1 control, U+0080..U+009F. */
            sb_putc(&b, '\\');
            sb_putc(&b, 'u');
            sb_putc(&b, '0');
            sb_putc(&b, '0');
            sb_putc(&b, hex[p[1] >> 4]);
            sb_putc(&b, hex[p[1] & 0xf]);
            p += 2;
        } else {
            for (size_t i = 0; i < n; i++)
                sb_putc(&b, (char)*p++);
        }
    }
    sb_putc(&b, '"');
    return sb_take(&b);
}

/* The authorizer's half: `User "u" cannot verb ...`. */
static char *denial_text(const kl_user *u, const kl_attrs *a)
{
    char *user = go_quote(nz(u ? u->name : NULL));
    char *msg;
    if (!a->resource_request) {
        char *path = go_quote(nz(a->path));
        msg = util_asprintf("User %s cannot %s path %s", user, nz(a->verb), path);
        free(path);
    } else {
        char *res = *nz(a->subresource) ? util_asprintf("%s/%s", nz(a->resource), a->subresource)
                                        : util_strdup(nz(a->resource));
        char *qres = go_quote(res);
        char *group = go_quote(nz(a->group));
        if (*nz(a->ns) != '\0') {
            char *ns = go_quote(a->ns);
            msg = util_asprintf("User %s cannot %s resource %s in API group %s in the namespace %s",
                                user, nz(a->verb), qres, group, ns);
            free(ns);
        } else {
            msg =
                util_asprintf("User %s cannot %s resource %s in API group %s at the cluster scope",
                              user, nz(a->verb), qres, group);
        }
        free(group);
        free(qres);
        free(res);
    }
    free(user);
    return msg;
}

char *kl_forbidden_message(const kl_user *u, const kl_attrs *a)
{
    char *why = denial_text(u, a);
    const char *resource = nz(a->resource), *group = nz(a->group), *name = nz(a->name);
    char *msg;
    /* apierrors.NewForbidden over the GroupResource (no subresource). */
    if (*resource == '\0' && *group == '\0') {
        msg = util_asprintf("forbidden: %s", why);
    } else {
        char *qualified = *group ? util_asprintf("%s.%s", resource, group) : util_strdup(resource);
        if (*name == '\0') {
            msg = util_asprintf("%s is forbidden: %s", qualified, why);
        } else {
            char *qname = go_quote(name);
            msg = util_asprintf("%s %s is forbidden: %s", qualified, qname, why);
            free(qname);
        }
        free(qualified);
    }
    free(why);
    return msg;
}

/* ---- service-account tokens (TokenRequest) ------------------------------------------ */

/*
 * JWT-shaped (header.payload.signature, base64url without padding), signed
 * with HMAC-SHA256 under a key kube-lite draws at start: stateless, so a
 * token stays valid until it expires or kube-lite restarts, and verifying
 * needs no table. kube-apiserver signs with RS256 and a key pair; clients
 * treat the token as opaque, so only kube-lite itself must verify it.
 */

static char *b64url(const unsigned char *p, size_t len)
{
    char *out = xrealloc(NULL, 4 * ((len + 2) / 3) + 1);
    int n = EVP_EncodeBlock((unsigned char *)out, p, (int)len);
    size_t w = 0;
    for (int i = 0; i < n; i++) {
        char c = out[i];
        if (c == '=')
            break;
        out[w++] = c == '+' ? '-' : c == '/' ? '_' : c;
    }
    out[w] = '\0';
    return out;
}

/* Decodes base64url without padding; NULL when malformed. *len excludes
 * the NUL the result ends with. */
static unsigned char *b64url_decode(const char *s, size_t n, size_t *len)
{
    if (n % 4 == 1)
        return NULL;
    size_t padded = (n + 3) / 4 * 4;
    unsigned char *in = xrealloc(NULL, padded + 1);
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        bool ok = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                  c == '-' || c == '_';
        if (!ok) {
            free(in);
            return NULL;
        }
        in[i] = (unsigned char)(c == '-' ? '+' : c == '_' ? '/' : c);
    }
    for (size_t i = n; i < padded; i++)
        in[i] = '=';
    unsigned char *out = xrealloc(NULL, padded / 4 * 3 + 1);
    int m = padded ? EVP_DecodeBlock(out, in, (int)padded) : 0;
    free(in);
    if (m < 0) {
        free(out);
        return NULL;
    }
    size_t pad = padded - n;
    *len = (size_t)m - pad;
    out[*len] = '\0';
    return out;
}

static char *sign(const unsigned char key[KL_TOKEN_KEY_LEN], const char *data, size_t len)
{
    unsigned char mac[EVP_MAX_MD_SIZE];
    unsigned int mlen = 0;
    if (!HMAC(EVP_sha256(), key, KL_TOKEN_KEY_LEN, (const unsigned char *)data, len, mac, &mlen))
        abort();
    return b64url(mac, mlen);
}

char *kl_sa_token_mint(const unsigned char key[KL_TOKEN_KEY_LEN], const char *ns, const char *name,
                       const char *uid, const json_object *audiences, int64_t iat, int64_t exp)
{
    static const char header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
    json_object *claims = json_object_new_object();
    json_object *aud = json_object_new_array();
    for (size_t i = 0; i < kobj_len(audiences); i++)
        if (kobj_str_at(audiences, i))
            json_object_array_add(aud, json_object_new_string(kobj_str_at(audiences, i)));
    json_object_object_add(claims, "aud", aud);
    json_object_object_add(claims, "exp", json_object_new_int64(exp));
    json_object_object_add(claims, "iat", json_object_new_int64(iat));
    json_object_object_add(claims, "iss", json_object_new_string("https://kube-lite"));
    json_object *k8s = json_object_new_object();
    json_object_object_add(k8s, "namespace", json_object_new_string(ns));
    json_object *sa = json_object_new_object();
    json_object_object_add(sa, "name", json_object_new_string(name));
    json_object_object_add(sa, "uid", json_object_new_string(uid));
    json_object_object_add(k8s, "serviceaccount", sa);
    json_object_object_add(claims, "kubernetes.io", k8s);
    json_object_object_add(claims, "nbf", json_object_new_int64(iat));
    char *sub = util_asprintf(SA_USER_PREFIX "%s:%s", ns, name);
    json_object_object_add(claims, "sub", json_object_new_string(sub));
    free(sub);
    const char *payload = json_object_to_json_string_ext(
        claims, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    char *h = b64url((const unsigned char *)header, sizeof(header) - 1);
    char *p = b64url((const unsigned char *)payload, strlen(payload));
    json_object_put(claims);
    char *signed_part = util_asprintf("%s.%s", h, p);
    char *sig = sign(key, signed_part, strlen(signed_part));
    char *token = util_asprintf("%s.%s", signed_part, sig);
    free(h);
    free(p);
    free(signed_part);
    free(sig);
    return token;
}

int kl_sa_token_verify(const unsigned char key[KL_TOKEN_KEY_LEN], const char *token, int64_t now,
                       char **ns, char **name, char **uid)
{
    *ns = *name = *uid = NULL;
    const char *dot2 = token ? strrchr(token, '.') : NULL;
    const char *dot1 = token ? strchr(token, '.') : NULL;
    if (!dot1 || dot1 == dot2)
        return -EINVAL;
    char *sig = sign(key, token, (size_t)(dot2 - token));
    size_t slen = strlen(sig);
    bool ok = strlen(dot2 + 1) == slen && CRYPTO_memcmp(sig, dot2 + 1, slen) == 0;
    free(sig);
    if (!ok)
        return -EACCES;
    size_t plen = 0;
    unsigned char *payload = b64url_decode(dot1 + 1, (size_t)(dot2 - dot1 - 1), &plen);
    json_object *claims = payload ? json_tokener_parse((const char *)payload) : NULL;
    free(payload);
    int64_t exp = 0;
    json_object *k8s = kobj_obj(claims, "kubernetes.io"); /* a key with a dot */
    const char *cns = kobj_str(k8s, "namespace");
    json_object *sa = kobj_obj(k8s, "serviceaccount");
    const char *cname = kobj_str(sa, "name"), *cuid = kobj_str(sa, "uid");
    int rc = 0;
    if (!cns || !cname || !cuid || kobj_int64(claims, "exp", &exp) < 0)
        rc = -EINVAL;
    else if (exp <= now)
        rc = -EKEYEXPIRED;
    if (rc == 0) {
        *ns = util_strdup(cns);
        *name = util_strdup(cname);
        *uid = util_strdup(cuid);
    }
    json_object_put(claims);
    return rc;
}
