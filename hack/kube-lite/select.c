/*
 * select: label and field selectors as apimachinery parses and matches them
 * (labels/selector.go, fields/selector.go), with the same error texts, since
 * clients show them verbatim. Label selectors: a lexer that scans the whole
 * string first, then a recursive-descent parser over the tokens. Field
 * selectors: comma-split terms (backslash escapes), sorted like upstream so
 * that the first unsupported field reported is the same one.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kube-lite/kl.h"

/* ---- label selectors: lexer --------------------------------------------- */

/* Same order as apimachinery's Token iota: 0 doubles as "no token yet". */
typedef enum {
    T_ERROR = 0,
    T_EOS,
    T_CLOSE,
    T_COMMA,
    T_NOT,
    T_DEQ,
    T_EQ,
    T_GT,
    T_ID,
    T_IN,
    T_LT,
    T_NEQ,
    T_NOTIN,
    T_OPEN,
} tok_t;

typedef struct {
    tok_t tok;
    char *lit;
} item;

static const struct {
    const char *s;
    tok_t t;
} keywords[] = {
    {")", T_CLOSE}, {",", T_COMMA}, {"!", T_NOT},  {"==", T_DEQ},      {"=", T_EQ},   {">", T_GT},
    {"in", T_IN},   {"<", T_LT},    {"!=", T_NEQ}, {"notin", T_NOTIN}, {"(", T_OPEN},
};

static tok_t keyword(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof(keywords) / sizeof(keywords[0]); i++)
        if (strlen(keywords[i].s) == n && memcmp(keywords[i].s, s, n) == 0)
            return keywords[i].t;
    return T_ERROR;
}

static bool is_ws(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

static bool is_special(char c)
{
    return c == '=' || c == '!' || c == '(' || c == ')' || c == ',' || c == '>' || c == '<';
}

static char *dupn(const char *s, size_t n)
{
    char *p = util_calloc(n + 1, 1);
    memcpy(p, s, n);
    return p;
}

/* One token from s[*pos]; the literal is owned by the caller. */
static item lex(const char *s, size_t *pos)
{
    while (is_ws(s[*pos]))
        (*pos)++;
    char c = s[*pos];
    if (c == '\0')
        return (item){T_EOS, util_strdup("")};
    size_t start = *pos;
    if (is_special(c)) {
        /* Longest run of symbols that still spells a token ("!=", "=="). */
        tok_t last = T_ERROR;
        size_t last_len = 0;
        size_t n = 0;
        while (is_special(s[start + n])) {
            n++;
            tok_t t = keyword(s + start, n);
            if (t != T_ERROR) {
                last = t;
                last_len = n;
            } else if (last != T_ERROR) {
                break;
            }
        }
        if (last == T_ERROR) {
            *pos = start + n;
            char *sym = dupn(s + start, n);
            char *lit = util_asprintf("error expected: keyword found '%s'", sym);
            free(sym);
            return (item){T_ERROR, lit};
        }
        *pos = start + last_len;
        return (item){last, dupn(s + start, last_len)};
    }
    size_t n = 0;
    while (s[start + n] && !is_special(s[start + n]) && !is_ws(s[start + n]))
        n++;
    *pos = start + n;
    tok_t t = keyword(s + start, n);
    return (item){t != T_ERROR ? t : T_ID, dupn(s + start, n)};
}

/* ---- label selectors: parser -------------------------------------------- */

typedef enum { OP_IN, OP_NOTIN, OP_EQ, OP_NEQ, OP_EXISTS, OP_NOT_EXISTS, OP_GT, OP_LT } lop;

typedef struct {
    char *key;
    lop op;
    char **vals; /* sorted, distinct (a sets.String in apimachinery) */
    size_t n_vals;
} lreq;

struct kl_labelsel {
    lreq *r;
    size_t n;
};

typedef struct {
    item *items;
    size_t n, pos;
    char *err; /* first error, owned */
} parser;

/* In a values context the keywords "in"/"notin" are plain identifiers. */
static tok_t peek(const parser *p, const char **lit)
{
    const item *it = &p->items[p->pos];
    if (lit)
        *lit = it->lit;
    return (it->tok == T_IN || it->tok == T_NOTIN) ? T_ID : it->tok;
}

static tok_t next(parser *p, const char **lit)
{
    tok_t t = peek(p, lit);
    if (p->pos + 1 < p->n)
        p->pos++;
    return t;
}

/* The operator context sees keywords as themselves. */
static tok_t next_op(parser *p, const char **lit)
{
    const item *it = &p->items[p->pos];
    if (lit)
        *lit = it->lit;
    if (p->pos + 1 < p->n)
        p->pos++;
    return it->tok;
}

static void fail(parser *p, char *msg)
{
    if (p->err == NULL)
        p->err = msg;
    else
        free(msg);
}

static void free_req(lreq *r)
{
    free(r->key);
    for (size_t i = 0; i < r->n_vals; i++)
        free(r->vals[i]);
    free(r->vals);
}

/* Inserts v into the sorted distinct set. */
static void set_add(char ***vals, size_t *n, const char *v)
{
    size_t i = 0;
    while (i < *n && strcmp((*vals)[i], v) < 0)
        i++;
    if (i < *n && strcmp((*vals)[i], v) == 0)
        return;
    char **nv = realloc(*vals, (*n + 1) * sizeof(char *));
    if (nv == NULL) {
        fputs("kube-lite: out of memory\n", stderr);
        abort();
    }
    memmove(nv + i + 1, nv + i, (*n - i) * sizeof(char *));
    nv[i] = util_strdup(v);
    *vals = nv;
    (*n)++;
}

/* Go's strconv.ParseInt(s, 10, 64). */
static bool parse_int64(const char *s, int64_t *out)
{
    const char *d = s;
    if (*d == '+' || *d == '-')
        d++;
    if (!isdigit((unsigned char)*d))
        return false;
    for (const char *q = d; *q; q++)
        if (!isdigit((unsigned char)*q))
            return false;
    errno = 0;
    char *end = NULL;
    long long v = strtoll(s, &end, 10);
    if (errno == ERANGE || end == NULL || *end != '\0')
        return false;
    *out = (int64_t)v;
    return true;
}

/* A field.Error rendered "<field>: Invalid value: <%q value>: <detail>". */
static char *invalid(const char *field, const char *value, const char *detail)
{
    char *q = kl_quote(value);
    char *s = util_asprintf("%s: Invalid value: %s: %s", field, q, detail);
    free(q);
    return s;
}

/* NewRequirement's checks of the values, as one aggregate message or NULL:
 * distinct messages, bracketed when there are several. */
static char *requirement_errors(const lreq *r)
{
    char **errs = util_calloc(2 * r->n_vals + 1, sizeof(char *));
    size_t n = 0;

    for (size_t i = 0; i < r->n_vals && (r->op == OP_GT || r->op == OP_LT); i++) {
        int64_t v;
        if (!parse_int64(r->vals[i], &v)) {
            char *f = util_asprintf("values[%zu]", i);
            errs[n++] =
                invalid(f, r->vals[i], "for 'Gt', 'Lt' operators, the value must be an integer");
            free(f);
        }
    }
    for (size_t i = 0; i < r->n_vals; i++) {
        char *m = kl_label_value_msgs(r->vals[i]);
        if (m) {
            char *f = util_asprintf("values[%zu][%s]", i, r->key);
            errs[n++] = invalid(f, r->vals[i], m);
            free(f);
            free(m);
        }
    }
    size_t total = 3, shown = 0;
    for (size_t i = 0; i < n; i++)
        total += strlen(errs[i]) + 2;
    char *out = NULL;
    if (n > 0) {
        out = util_calloc(total, 1);
        for (size_t i = 0; i < n; i++) {
            bool dup = false;
            for (size_t j = 0; j < i && !dup; j++)
                dup = strcmp(errs[j], errs[i]) == 0;
            if (dup)
                continue;
            strcat(out, shown++ ? ", " : "");
            strcat(out, errs[i]);
        }
        if (shown > 1) {
            char *b = util_asprintf("[%s]", out);
            free(out);
            out = b;
        }
    }
    for (size_t i = 0; i < n; i++)
        free(errs[i]);
    free(errs);
    return out;
}

static const char binary_ops[] = "in, notin, =, ==, !=, gt, lt";

/* Parses "(a, b)" into r; false with p->err set on error. */
static bool parse_values(parser *p, lreq *r)
{
    const char *lit;
    if (next(p, &lit) != T_OPEN) {
        fail(p, util_asprintf("found '%s' expected: '('", lit));
        return false;
    }
    const char *first_lit;
    tok_t t = peek(p, &first_lit);
    if (t == T_CLOSE) {
        next(p, NULL);
        set_add(&r->vals, &r->n_vals, "");
        return true;
    }
    if (t != T_ID && t != T_COMMA) {
        fail(p, util_asprintf("found '%s', expected: ',', ')' or identifier", first_lit));
        return false;
    }
    for (;;) {
        t = next(p, &lit);
        if (t == T_ID) {
            set_add(&r->vals, &r->n_vals, lit);
            const char *l2;
            tok_t t2 = peek(p, &l2);
            if (t2 == T_COMMA)
                continue;
            if (t2 == T_CLOSE)
                break;
            fail(p, util_asprintf("found '%s', expected: ',' or ')'", l2));
            return false;
        } else if (t == T_COMMA) {
            /* "(,", ",)" and ",," each stand for an empty value. */
            if (r->n_vals == 0)
                set_add(&r->vals, &r->n_vals, "");
            tok_t t2 = peek(p, NULL);
            if (t2 == T_CLOSE) {
                set_add(&r->vals, &r->n_vals, "");
                break;
            }
            if (t2 == T_COMMA) {
                next(p, NULL);
                set_add(&r->vals, &r->n_vals, "");
            }
        } else {
            fail(p, util_asprintf("found '%s', expected: ',', or identifier", lit));
            return false;
        }
    }
    if (next(p, NULL) != T_CLOSE) {
        /* apimachinery names the token seen after '(' here. */
        fail(p, util_asprintf("found '%s', expected: ')'", first_lit));
        return false;
    }
    return true;
}

static bool parse_requirement(parser *p, lreq *r)
{
    const char *lit;
    tok_t t = next(p, &lit);
    bool not_exists = false;
    if (t == T_NOT) {
        not_exists = true;
        t = next(p, &lit);
    }
    if (t != T_ID) {
        fail(p, util_asprintf("found '%s', expected: identifier", lit));
        return false;
    }
    char *kerr = kl_qualified_name_msgs(lit);
    if (kerr) {
        /* The parser validates the key with a nil field path. */
        fail(p, invalid("<nil>", lit, kerr));
        free(kerr);
        return false;
    }
    r->key = util_strdup(lit);
    tok_t la = peek(p, NULL);
    if (not_exists || la == T_EOS || la == T_COMMA) {
        r->op = not_exists ? OP_NOT_EXISTS : OP_EXISTS;
        return true;
    }
    t = next_op(p, &lit);
    switch (t) {
    case T_IN:
        r->op = OP_IN;
        break;
    case T_NOTIN:
        r->op = OP_NOTIN;
        break;
    case T_EQ:
    case T_DEQ:
        r->op = OP_EQ;
        break;
    case T_NEQ:
        r->op = OP_NEQ;
        break;
    case T_GT:
        r->op = OP_GT;
        break;
    case T_LT:
        r->op = OP_LT;
        break;
    default:
        fail(p, util_asprintf("found '%s', expected: %s", lit, binary_ops));
        return false;
    }
    if (r->op == OP_IN || r->op == OP_NOTIN) {
        if (!parse_values(p, r))
            return false;
    } else {
        la = peek(p, NULL);
        if (la == T_EOS || la == T_COMMA) {
            set_add(&r->vals, &r->n_vals, "");
        } else {
            t = next(p, &lit);
            if (t != T_ID) {
                fail(p, util_asprintf("found '%s', expected: identifier", lit));
                return false;
            }
            set_add(&r->vals, &r->n_vals, lit);
        }
    }
    char *verr = requirement_errors(r);
    if (verr) {
        fail(p, verr);
        return false;
    }
    return true;
}

static void free_items(item *items, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(items[i].lit);
    free(items);
}

void kl_labelsel_free(kl_labelsel *sel)
{
    if (sel == NULL)
        return;
    for (size_t i = 0; i < sel->n; i++)
        free_req(&sel->r[i]);
    free(sel->r);
    free(sel);
}

int kl_labelsel_parse(const char *s, kl_labelsel **out)
{
    *out = NULL;
    if (s == NULL)
        s = "";

    /* Scan everything first, as apimachinery does. */
    parser p = {0};
    size_t cap = 8, pos = 0;
    p.items = util_calloc(cap, sizeof(item));
    for (;;) {
        if (p.n == cap) {
            cap *= 2;
            item *ni = realloc(p.items, cap * sizeof(item));
            if (ni == NULL) {
                fputs("kube-lite: out of memory\n", stderr);
                abort();
            }
            p.items = ni;
        }
        p.items[p.n] = lex(s, &pos);
        if (p.items[p.n++].tok == T_EOS)
            break;
    }

    kl_labelsel *sel = util_calloc(1, sizeof(*sel));
    size_t rcap = 0;
    for (;;) {
        const char *lit;
        tok_t t = peek(&p, &lit);
        if (t == T_EOS)
            break;
        if (t != T_ID && t != T_NOT) {
            fail(&p, util_asprintf("found '%s', expected: !, identifier, or 'end of string'", lit));
            break;
        }
        if (sel->n == rcap) {
            rcap = rcap ? rcap * 2 : 4;
            lreq *nr = realloc(sel->r, rcap * sizeof(lreq));
            if (nr == NULL) {
                fputs("kube-lite: out of memory\n", stderr);
                abort();
            }
            sel->r = nr;
        }
        lreq *r = &sel->r[sel->n];
        memset(r, 0, sizeof(*r));
        if (!parse_requirement(&p, r)) {
            free_req(r);
            char *wrapped = util_asprintf("unable to parse requirement: %s", p.err);
            free(p.err);
            p.err = wrapped;
            break;
        }
        sel->n++;
        t = next(&p, &lit);
        if (t == T_EOS)
            break;
        if (t != T_COMMA) {
            fail(&p, util_asprintf("found '%s', expected: ',' or 'end of string'", lit));
            break;
        }
        const char *l2;
        tok_t t2 = peek(&p, &l2);
        if (t2 != T_ID && t2 != T_NOT) {
            fail(&p, util_asprintf("found '%s', expected: identifier after ','", l2));
            break;
        }
    }
    free_items(p.items, p.n);
    if (p.err) {
        int rc = util_err_set(-EINVAL, "%s", p.err);
        free(p.err);
        kl_labelsel_free(sel);
        return rc;
    }
    *out = sel;
    return 0;
}

static const char *label_get(const json_object *labels, const char *key)
{
    json_object *v = NULL;
    if (labels == NULL || !json_object_is_type(labels, json_type_object) ||
        !json_object_object_get_ex(labels, key, &v))
        return NULL;
    if (json_object_is_type(v, json_type_string))
        return json_object_get_string(v);
    /* Labels are strings; anything else reads as an empty value. */
    return "";
}

static bool has_value(const lreq *r, const char *v)
{
    for (size_t i = 0; i < r->n_vals; i++)
        if (strcmp(r->vals[i], v) == 0)
            return true;
    return false;
}

bool kl_labelsel_match(const kl_labelsel *sel, const json_object *labels)
{
    if (sel == NULL)
        return true;
    for (size_t i = 0; i < sel->n; i++) {
        const lreq *r = &sel->r[i];
        const char *v = label_get(labels, r->key);
        bool ok;
        switch (r->op) {
        case OP_IN:
        case OP_EQ:
            ok = v != NULL && has_value(r, v);
            break;
        case OP_NOTIN:
        case OP_NEQ:
            /* A missing key satisfies != and notin. */
            ok = v == NULL || !has_value(r, v);
            break;
        case OP_EXISTS:
            ok = v != NULL;
            break;
        case OP_NOT_EXISTS:
            ok = v == NULL;
            break;
        case OP_GT:
        case OP_LT: {
            int64_t have, want;
            ok = v != NULL && r->n_vals == 1 && parse_int64(v, &have) &&
                 parse_int64(r->vals[0], &want) && (r->op == OP_GT ? have > want : have < want);
            break;
        }
        default:
            ok = false;
            break;
        }
        if (!ok)
            return false;
    }
    return true;
}

/* ---- field selectors ----------------------------------------------------- */

typedef struct {
    char *raw; /* the term as written, the sort key */
    char *field;
    char *value; /* unescaped */
    bool neq;
} fterm;

struct kl_fieldsel {
    fterm *t;
    size_t n;
};

void kl_fieldsel_free(kl_fieldsel *sel)
{
    if (sel == NULL)
        return;
    for (size_t i = 0; i < sel->n; i++) {
        free(sel->t[i].raw);
        free(sel->t[i].field);
        free(sel->t[i].value);
    }
    free(sel->t);
    free(sel);
}

static int cmp_term(const void *a, const void *b)
{
    return strcmp(((const fterm *)a)->raw, ((const fterm *)b)->raw);
}

/* UnescapeValue: \\ \, \= are escapes; a bare , or = is an error. */
static int unescape(const char *s, char **out)
{
    size_t n = strlen(s);
    char *v = util_calloc(n + 1, 1);
    size_t o = 0;
    bool in_slash = false;
    for (const char *p = s; *p; p++) {
        char c = *p;
        if (in_slash) {
            if (c != '\\' && c != ',' && c != '=') {
                free(v);
                /* Go prints the rune that follows the backslash. */
                size_t l = 1;
                while (p[l] && ((unsigned char)p[l] & 0xc0) == 0x80)
                    l++;
                return util_err_set(
                    -EINVAL, "invalid field selector: invalid escape sequence: \\%.*s", (int)l, p);
            }
            v[o++] = c;
            in_slash = false;
            continue;
        }
        if (c == '\\') {
            in_slash = true;
        } else if (c == ',' || c == '=') {
            free(v);
            /* %v of a Go rune is its number. */
            return util_err_set(-EINVAL, "invalid field selector: unescaped character in value: %d",
                                c);
        } else {
            v[o++] = c;
        }
    }
    if (in_slash) {
        free(v);
        return util_err_set(-EINVAL, "invalid field selector: invalid escape sequence: \\");
    }
    *out = v;
    return 0;
}

int kl_fieldsel_parse(const char *s, kl_fieldsel **out)
{
    *out = NULL;
    if (s == NULL)
        s = "";
    kl_fieldsel *sel = util_calloc(1, sizeof(*sel));
    size_t len = strlen(s);

    /* Split on commas not escaped by a backslash. */
    sel->t = util_calloc(len + 1, sizeof(fterm));
    size_t start = 0;
    bool in_slash = false;
    for (size_t i = 0; i <= len && len > 0; i++) {
        if (i < len && in_slash) {
            in_slash = false;
            continue;
        }
        if (i < len && s[i] == '\\') {
            in_slash = true;
            continue;
        }
        if (i == len || s[i] == ',') {
            if (i > start)
                sel->t[sel->n++].raw = dupn(s + start, i - start);
            start = i + 1;
        }
    }
    qsort(sel->t, sel->n, sizeof(fterm), cmp_term);

    for (size_t i = 0; i < sel->n; i++) {
        fterm *t = &sel->t[i];
        /* The first operator from the left, "!=" and "==" before "=". */
        const char *op = NULL;
        size_t op_len = 0;
        for (const char *p = t->raw; *p && op == NULL; p++) {
            if (strncmp(p, "!=", 2) == 0 || strncmp(p, "==", 2) == 0) {
                op = p;
                op_len = 2;
            } else if (*p == '=') {
                op = p;
                op_len = 1;
            }
        }
        if (op == NULL) {
            int rc =
                util_err_set(-EINVAL, "invalid selector: '%s'; can't understand '%s'", s, t->raw);
            kl_fieldsel_free(sel);
            return rc;
        }
        t->neq = op[0] == '!';
        t->field = dupn(t->raw, (size_t)(op - t->raw));
        int rc = unescape(op + op_len, &t->value);
        if (rc < 0) {
            kl_fieldsel_free(sel);
            return rc;
        }
    }
    *out = sel;
    return 0;
}

int kl_fieldsel_check(const kl_fieldsel *sel, const kl_type *t)
{
    if (sel == NULL)
        return 0;
    /* Types with their own conversion function (and CRs) list every field;
     * the rest use the default, which knows metadata.name and
     * metadata.namespace even for cluster-scoped types. */
    bool own = t->custom || t->fields != NULL;
    for (size_t i = 0; i < sel->n; i++) {
        const char *f = sel->t[i].field;
        bool ok = strcmp(f, "metadata.name") == 0 ||
                  (strcmp(f, "metadata.namespace") == 0 && (!own || t->namespaced));
        for (size_t j = 0; !ok && t->fields && t->fields[j]; j++)
            ok = strcmp(f, t->fields[j]) == 0;
        if (ok)
            continue;
        if (own)
            return util_err_set(-EINVAL, "field label not supported: %s", f);
        char *q = kl_quote(f);
        int rc = util_err_set(
            -EINVAL,
            "%s is not a known field selector: only \"metadata.name\", \"metadata.namespace\"", q);
        free(q);
        return rc;
    }
    return 0;
}

/* The JSON value at a dotted path, or NULL. */
static json_object *lookup(const json_object *obj, const char *path)
{
    json_object *cur = (json_object *)obj;
    const char *p = path;
    while (cur != NULL) {
        const char *dot = strchr(p, '.');
        size_t n = dot ? (size_t)(dot - p) : strlen(p);
        char *key = dupn(p, n);
        json_object *next_obj = NULL;
        bool found = json_object_is_type(cur, json_type_object) &&
                     json_object_object_get_ex(cur, key, &next_obj);
        free(key);
        if (!found)
            return NULL;
        cur = next_obj;
        if (dot == NULL)
            return cur;
        p = dot + 1;
    }
    return NULL;
}

/* A field's value as the selector compares it, written into buf. */
static const char *scalar(const json_object *v, const char *missing, char *buf, size_t len)
{
    if (v == NULL)
        return missing;
    switch (json_object_get_type(v)) {
    case json_type_string:
        return json_object_get_string((json_object *)v);
    case json_type_boolean:
        return json_object_get_boolean(v) ? "true" : "false";
    case json_type_int:
        snprintf(buf, len, "%" PRId64, json_object_get_int64(v));
        return buf;
    case json_type_double:
        snprintf(buf, len, "%.17g", json_object_get_double(v));
        return buf;
    default:
        return "";
    }
}

static bool term_match(const fterm *t, const json_object *obj)
{
    char buf[64];
    const char *f = t->field;

    if (strcmp(f, "status.podIPs") == 0) {
        /* Any of the pod's IPs. */
        json_object *ips = lookup(obj, "status.podIPs");
        bool any = false;
        size_t n = json_object_is_type(ips, json_type_array) ? json_object_array_length(ips) : 0;
        for (size_t i = 0; i < n && !any; i++) {
            json_object *ip = lookup(json_object_array_get_idx(ips, i), "ip");
            any = strcmp(scalar(ip, "", buf, sizeof(buf)), t->value) == 0;
        }
        if (n == 0)
            any = t->value[0] == '\0';
        return t->neq ? !any : any;
    }

    const char *missing = "";
    json_object *v;
    if (strcmp(f, "spec.host") == 0) {
        v = lookup(obj, "spec.nodeName");
    } else if (strcmp(f, "source") == 0) {
        /* core/v1 Event: source.component, else reportingComponent. */
        v = lookup(obj, "source.component");
        if (v == NULL ||
            (json_object_is_type(v, json_type_string) && json_object_get_string_len(v) == 0))
            v = lookup(obj, "reportingComponent");
    } else if (strcmp(f, "status.podIP") == 0) {
        v = lookup(obj, "status.podIP");
        if (v == NULL) {
            json_object *ips = lookup(obj, "status.podIPs");
            if (json_object_is_type(ips, json_type_array) && json_object_array_length(ips) > 0)
                v = lookup(json_object_array_get_idx(ips, 0), "ip");
        }
    } else {
        v = lookup(obj, f);
        /* Go bools default to false, so an absent one selects as "false". */
        if (strcmp(f, "spec.hostNetwork") == 0 || strcmp(f, "spec.unschedulable") == 0)
            missing = "false";
    }
    bool eq = strcmp(scalar(v, missing, buf, sizeof(buf)), t->value) == 0;
    return t->neq ? !eq : eq;
}

bool kl_fieldsel_match(const kl_fieldsel *sel, const json_object *obj)
{
    if (sel == NULL)
        return true;
    for (size_t i = 0; i < sel->n; i++)
        if (!term_match(&sel->t[i], obj))
            return false;
    return true;
}

const char *kl_fieldsel_name(const kl_fieldsel *sel)
{
    if (sel == NULL)
        return NULL;
    for (size_t i = 0; i < sel->n; i++)
        if (!sel->t[i].neq && strcmp(sel->t[i].field, "metadata.name") == 0)
            return sel->t[i].value;
    return NULL;
}
