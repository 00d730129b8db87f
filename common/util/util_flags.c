/*
 * util_flags: command-line flags with Go's `flag` package rules and texts,
 * so that manifests written for the upstream Go sidecars work unchanged and
 * users see the same usage and error lines. A flag set is a growing array
 * of definitions; values are written straight into the caller's variables.
 */
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum flag_kind {
    FLAG_BOOL,
    FLAG_INT,
    FLAG_INT64,
    FLAG_DOUBLE,
    FLAG_STRING,
    FLAG_DURATION,
    FLAG_DEPRECATED,
};

struct flag_def {
    char *name; /* owned */
    char *help; /* owned */
    enum flag_kind kind;
    void *dst; /* caller's variable; NULL for deprecated flags */
    union {
        bool b;
        int i;
        int64_t i64;
        double d;
        const char *s; /* not owned, like the value itself */
        util_duration dur;
    } def;            /* the default, for usage */
    bool takes_value; /* deprecated flags only */
    bool builtin;     /* our own -version; a program's flag replaces it */
    bool set;
};

struct util_flags {
    char *prog;    /* owned */
    char *version; /* owned; NULL: no built-in -version */
    struct flag_def *defs;
    size_t n, cap;
    bool show_version; /* target of the built-in -version */
    /* A scope (util_flags_scope) holds no flags: it names them in `parent`. */
    util_flags *parent;
    char *prefix;        /* owned; a scope's */
    util_flags **scopes; /* owned; the root's */
    size_t n_scopes;
};

/* The flag set a name lives in, and its full name there ("<prefix><name>";
 * *owned to free when it had to be made). */
static util_flags *in_root(const util_flags *f, const char *name, const char **full, char **owned)
{
    *owned = NULL;
    *full = name;
    if (f->parent == NULL)
        return (util_flags *)f;
    *owned = util_asprintf("%s%s", f->prefix, name);
    *full = *owned;
    return f->parent;
}

static const char ERR_PARSE[] = "parse error";
static const char ERR_RANGE[] = "value out of range";

/* ---- value parsing (strconv rules) ------------------------------------- */

/* Go's underscoreOK: '_' only between digits or after a base prefix. */
static bool underscores_ok(const char *s)
{
    char saw = '^';
    bool hex = false;
    size_t i = 0;

    if (*s == '+' || *s == '-')
        s++;
    if (s[0] == '0' &&
        (s[1] == 'b' || s[1] == 'B' || s[1] == 'o' || s[1] == 'O' || s[1] == 'x' || s[1] == 'X')) {
        i = 2;
        saw = '0'; /* the prefix counts as a digit */
        hex = s[1] == 'x' || s[1] == 'X';
    }
    for (; s[i] != '\0'; i++) {
        char c = s[i];
        char lc = (char)(c | 0x20);
        if ((c >= '0' && c <= '9') || (hex && lc >= 'a' && lc <= 'f')) {
            saw = '0';
            continue;
        }
        if (c == '_') {
            if (saw != '0')
                return false;
            saw = '_';
            continue;
        }
        if (saw == '_')
            return false;
        saw = '!';
    }
    return saw != '_';
}

/* strconv.ParseUint(s, 0, 64): 0x/0o/0b prefixes, leading 0 is octal. */
static int parse_uint_base0(const char *s, uint64_t *out)
{
    const char *p = s;
    unsigned base = 10;
    bool underscores = false;
    uint64_t n = 0;

    if (*s == '\0')
        return -EINVAL;
    if (s[0] == '0') {
        char c = (char)(s[1] | 0x20);
        bool prefixed = s[1] != '\0' && s[2] != '\0';
        if (prefixed && c == 'b') {
            base = 2;
            p += 2;
        } else if (prefixed && c == 'o') {
            base = 8;
            p += 2;
        } else if (prefixed && c == 'x') {
            base = 16;
            p += 2;
        } else {
            base = 8;
            p += 1;
        }
    }

    const uint64_t cutoff = UINT64_MAX / base + 1;
    for (; *p != '\0'; p++) {
        char c = *p;
        char lc = (char)(c | 0x20);
        unsigned d;

        if (c == '_') {
            underscores = true;
            continue;
        } else if (c >= '0' && c <= '9') {
            d = (unsigned)(c - '0');
        } else if (lc >= 'a' && lc <= 'z') {
            d = (unsigned)(lc - 'a') + 10;
        } else {
            return -EINVAL;
        }
        if (d >= base)
            return -EINVAL;
        if (n >= cutoff)
            return -ERANGE;
        n *= base;
        if (n + d < n)
            return -ERANGE;
        n += d;
    }
    if (underscores && !underscores_ok(s))
        return -EINVAL;
    *out = n;
    return 0;
}

/* strconv.ParseInt(s, 0, 64), then narrowed to [lo, hi]. */
static int parse_int(const char *s, int64_t lo, int64_t hi, int64_t *out)
{
    bool neg = false;
    uint64_t un;
    int64_t v;

    if (*s == '+' || *s == '-') {
        neg = *s == '-';
        s++;
    }
    int rc = parse_uint_base0(s, &un);
    if (rc < 0)
        return rc;
    if (neg) {
        if (un > (uint64_t)1 << 63)
            return -ERANGE;
        v = un == (uint64_t)1 << 63 ? INT64_MIN : -(int64_t)un;
    } else {
        if (un > (uint64_t)INT64_MAX)
            return -ERANGE;
        v = (int64_t)un;
    }
    if (v < lo || v > hi)
        return -ERANGE;
    *out = v;
    return 0;
}

/* strtod, but the whole string must be a number (Go rejects " 1" too);
 * like Go, only overflow to infinity is a range error, not underflow. */
static int parse_double(const char *s, double *out)
{
    char *end;

    if (*s == '\0' || *s == ' ' || (*s >= '\t' && *s <= '\r'))
        return -EINVAL;
    errno = 0;
    double v = strtod(s, &end);
    if (*end != '\0')
        return -EINVAL;
    if (errno == ERANGE && isinf(v))
        return -ERANGE;
    *out = v;
    return 0;
}

/* strconv.ParseBool. */
static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"1", "t", "T", "TRUE", "true", "True"};
    static const char *const no[] = {"0", "f", "F", "FALSE", "false", "False"};

    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++) {
        if (strcmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -EINVAL;
}

/* ---- text helpers ------------------------------------------------------- */

/* Go's %q for the bytes we are likely to meet; caller frees. */
static char *quote(const char *s)
{
    char *q = util_calloc(strlen(s) * 4 + 3, 1);
    char *w = q;

    *w++ = '"';
    for (; *s != '\0'; s++) {
        unsigned char c = (unsigned char)*s;
        const char *esc = NULL;

        switch (c) {
        case '"':
            esc = "\\\"";
            break;
        case '\\':
            esc = "\\\\";
            break;
        case '\a':
            esc = "\\a";
            break;
        case '\b':
            esc = "\\b";
            break;
        case '\f':
            esc = "\\f";
            break;
        case '\n':
            esc = "\\n";
            break;
        case '\r':
            esc = "\\r";
            break;
        case '\t':
            esc = "\\t";
            break;
        case '\v':
            esc = "\\v";
            break;
        default:
            break;
        }
        if (esc != NULL) {
            memcpy(w, esc, 2);
            w += 2;
        } else if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            *w++ = '\\';
            *w++ = 'x';
            *w++ = hex[c >> 4];
            *w++ = hex[c & 0xf];
        } else {
            *w++ = (char)c;
        }
    }
    *w++ = '"';
    *w = '\0';
    return q;
}

/* strconv.FormatFloat(v, 'g', -1, 64): shortest digits that read back as
 * v, exponent form only below 1e-4 or from 1e+06 up. */
static void format_double(double v, char *buf, size_t len)
{
    char tmp[40];
    int prec;

    if (isnan(v)) {
        snprintf(buf, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (prec = 1; prec < 17; prec++) {
        snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, v);
        if (strtod(tmp, NULL) == v)
            break;
    }
    snprintf(tmp, sizeof(tmp), "%.*e", prec - 1, v);
    int exp = atoi(strchr(tmp, 'e') + 1);
    if (exp < -4 || exp >= 6)
        snprintf(buf, len, "%s", tmp);
    else
        snprintf(buf, len, "%.*f", prec - 1 - exp > 0 ? prec - 1 - exp : 0, v);
}

/* ---- the flag set ------------------------------------------------------- */

util_flags *util_flags_new(const char *prog, const char *version)
{
    util_flags *f = util_calloc(1, sizeof(*f));

    f->prog = util_strdup(prog != NULL ? prog : "");
    f->version = util_strdup(version);
    if (version != NULL) {
        /* Upstream sidecars all define -version; keep it in usage too. */
        util_flags_bool(f, "version", &f->show_version, "Show version.");
        f->defs[f->n - 1].builtin = true;
    }
    return f;
}

void util_flags_free(util_flags *f)
{
    if (f == NULL || f->parent != NULL)
        return;
    for (size_t i = 0; i < f->n_scopes; i++) {
        free(f->scopes[i]->prefix);
        free(f->scopes[i]);
    }
    free(f->scopes);
    for (size_t i = 0; i < f->n; i++) {
        free(f->defs[i].name);
        free(f->defs[i].help);
    }
    free(f->defs);
    free(f->version);
    free(f->prog);
    free(f);
}

static struct flag_def *find_n(const util_flags *f, const char *name, size_t len)
{
    for (size_t i = 0; i < f->n; i++) {
        if (strlen(f->defs[i].name) == len && memcmp(f->defs[i].name, name, len) == 0)
            return &f->defs[i];
    }
    return NULL;
}

static struct flag_def *find(const util_flags *f, const char *name)
{
    return find_n(f, name, strlen(name));
}

/* Adds a definition (or takes over the built-in -version) and points *out
 * at it; returns 0 or a negative errno. */
static int add_root(util_flags *f, const char *name, enum flag_kind kind, void *dst,
                    const char *help, struct flag_def **out);

static int add(util_flags *f, const char *name, enum flag_kind kind, void *dst, const char *help,
               struct flag_def **out)
{
    if (f == NULL || name == NULL)
        return util_err_set(-EINVAL, "flag: missing flag set or name");
    const char *full;
    char *owned;
    util_flags *root = in_root(f, name, &full, &owned);
    int rc = add_root(root, full, kind, dst, help, out);
    free(owned);
    return rc;
}

static int add_root(util_flags *f, const char *name, enum flag_kind kind, void *dst,
                    const char *help, struct flag_def **out)
{
    /* Go panics on these: "-x" could never be given, "a=b" never parsed. */
    if (name[0] == '\0' || name[0] == '-' || strchr(name, '=') != NULL)
        return util_err_set(-EINVAL, "flag %s: bad flag name", name);
    if (dst == NULL && kind != FLAG_DEPRECATED)
        return util_err_set(-EINVAL, "flag %s: no destination", name);

    struct flag_def *d = find(f, name);
    if (d != NULL && !d->builtin)
        return util_err_set(-EEXIST, "flag redefined: %s", name);
    if (d != NULL) {
        free(d->name);
        free(d->help);
    } else {
        if (f->n == f->cap) {
            size_t cap = f->cap ? f->cap * 2 : 16;
            struct flag_def *defs = realloc(f->defs, cap * sizeof(*defs));
            if (defs == NULL) {
                fputs("util: out of memory\n", stderr);
                abort();
            }
            f->defs = defs;
            f->cap = cap;
        }
        d = &f->defs[f->n++];
    }
    memset(d, 0, sizeof(*d));
    d->name = util_strdup(name);
    d->help = util_strdup(help != NULL ? help : "");
    d->kind = kind;
    d->dst = dst;
    *out = d;
    return 0;
}

int util_flags_bool(util_flags *f, const char *name, bool *dst, const char *help)
{
    struct flag_def *d = NULL;
    int rc = add(f, name, FLAG_BOOL, dst, help, &d);
    if (rc == 0 && d != NULL)
        d->def.b = *dst;
    return rc;
}

int util_flags_int(util_flags *f, const char *name, int *dst, const char *help)
{
    struct flag_def *d = NULL;
    int rc = add(f, name, FLAG_INT, dst, help, &d);
    if (rc == 0 && d != NULL)
        d->def.i = *dst;
    return rc;
}

int util_flags_int64(util_flags *f, const char *name, int64_t *dst, const char *help)
{
    struct flag_def *d = NULL;
    int rc = add(f, name, FLAG_INT64, dst, help, &d);
    if (rc == 0 && d != NULL)
        d->def.i64 = *dst;
    return rc;
}

int util_flags_double(util_flags *f, const char *name, double *dst, const char *help)
{
    struct flag_def *d = NULL;
    int rc = add(f, name, FLAG_DOUBLE, dst, help, &d);
    if (rc == 0 && d != NULL)
        d->def.d = *dst;
    return rc;
}

int util_flags_string(util_flags *f, const char *name, const char **dst, const char *help)
{
    struct flag_def *d = NULL;
    int rc = add(f, name, FLAG_STRING, (void *)dst, help, &d);
    if (rc == 0 && d != NULL)
        d->def.s = *dst;
    return rc;
}

int util_flags_duration(util_flags *f, const char *name, util_duration *dst, const char *help)
{
    struct flag_def *d = NULL;
    int rc = add(f, name, FLAG_DURATION, dst, help, &d);
    if (rc == 0 && d != NULL)
        d->def.dur = *dst;
    return rc;
}

int util_flags_redefault(util_flags *f, const char *name)
{
    if (f == NULL || name == NULL)
        return -ENOENT;
    const char *full;
    char *owned;
    const util_flags *root = in_root(f, name, &full, &owned);
    struct flag_def *d = find(root, full);
    free(owned);
    if (d == NULL || d->dst == NULL)
        return -ENOENT;
    switch (d->kind) {
    case FLAG_BOOL:
        d->def.b = *(const bool *)d->dst;
        break;
    case FLAG_INT:
        d->def.i = *(const int *)d->dst;
        break;
    case FLAG_INT64:
        d->def.i64 = *(const int64_t *)d->dst;
        break;
    case FLAG_DOUBLE:
        d->def.d = *(const double *)d->dst;
        break;
    case FLAG_STRING:
        d->def.s = *(const char *const *)d->dst;
        break;
    case FLAG_DURATION:
        d->def.dur = *(const util_duration *)d->dst;
        break;
    default:
        break;
    }
    return 0;
}

int util_flags_deprecated(util_flags *f, const char *name, bool takes_value, const char *help)
{
    struct flag_def *d = NULL;
    int rc = add(f, name, FLAG_DEPRECATED, NULL, help, &d);
    if (rc == 0 && d != NULL)
        d->takes_value = takes_value;
    return rc;
}

/* Booleans never take the next argument as their value. */
static bool is_boolish(const struct flag_def *d)
{
    return d->kind == FLAG_BOOL || (d->kind == FLAG_DEPRECATED && !d->takes_value);
}

/* Stores `value` into d's variable; returns 0, or the Go error text. */
static const char *set_value(struct flag_def *d, const char *value)
{
    int64_t i64 = 0;
    double dbl = 0;
    util_duration dur = 0;
    int rc = 0;

    switch (d->kind) {
    case FLAG_BOOL:
        rc = parse_bool(value, (bool *)d->dst);
        break;
    case FLAG_INT:
        rc = parse_int(value, INT_MIN, INT_MAX, &i64);
        if (rc == 0)
            *(int *)d->dst = (int)i64;
        break;
    case FLAG_INT64:
        rc = parse_int(value, INT64_MIN, INT64_MAX, &i64);
        if (rc == 0)
            *(int64_t *)d->dst = i64;
        break;
    case FLAG_DOUBLE:
        rc = parse_double(value, &dbl);
        if (rc == 0)
            *(double *)d->dst = dbl;
        break;
    case FLAG_STRING:
        *(const char **)d->dst = value;
        break;
    case FLAG_DURATION:
        /* Go's flag reports every duration failure as a parse error. */
        rc = util_duration_parse(value, &dur) == 0 ? 0 : -EINVAL;
        if (rc == 0)
            *(util_duration *)d->dst = dur;
        break;
    case FLAG_DEPRECATED: {
        bool ignored;
        if (!d->takes_value)
            rc = parse_bool(value, &ignored);
        break;
    }
    }
    if (rc == -ERANGE)
        return ERR_RANGE;
    return rc < 0 ? ERR_PARSE : NULL;
}

/* Go's failf text for a value that did not parse. */
static int bad_value(const struct flag_def *d, const char *value, const char *why)
{
    char *q = quote(value);
    if (is_boolish(d))
        util_err_set(-EINVAL, "invalid boolean value %s for -%s: %s", q, d->name, why);
    else
        util_err_set(-EINVAL, "invalid value %s for flag -%s: %s", q, d->name, why);
    free(q);
    return -EINVAL;
}

/* One argv entry (and maybe the next), like Go's FlagSet.parseOne.
 * Returns 0 to go on, 1 to stop (not a flag, or "--"), or a negative
 * errno; an undefined -h/-help sets *help instead. */
static int parse_one(util_flags *f, int argc, char **argv, int *i, bool *help)
{
    const char *s = argv[*i];

    if (s == NULL || s[0] != '-' || s[1] == '\0')
        return 1; /* positional, including a lone "-" */
    const char *name = s + 1;
    if (s[1] == '-') {
        name++;
        if (s[2] == '\0') {
            (*i)++; /* "--" ends the flags and is consumed */
            return 1;
        }
    }
    if (name[0] == '\0' || name[0] == '-' || name[0] == '=')
        return util_err_set(-EINVAL, "bad flag syntax: %s", s);
    (*i)++;

    /* The value starts after the first '=' that is not the name's first byte. */
    const char *eq = strchr(name + 1, '=');
    size_t name_len = eq != NULL ? (size_t)(eq - name) : strlen(name);
    const char *value = eq != NULL ? eq + 1 : NULL;

    struct flag_def *d = find_n(f, name, name_len);
    if (d == NULL) {
        if ((name_len == 4 && memcmp(name, "help", 4) == 0) || (name_len == 1 && name[0] == 'h')) {
            *help = true;
            return 0;
        }
        return util_err_set(-EINVAL, "flag provided but not defined: -%.*s", (int)name_len, name);
    }

    if (is_boolish(d)) {
        if (value == NULL)
            value = "true";
    } else if (value == NULL) {
        if (*i >= argc || argv[*i] == NULL)
            return util_err_set(-EINVAL, "flag needs an argument: -%s", d->name);
        value = argv[(*i)++]; /* even if it looks like a flag, as Go does */
    }
    const char *why = set_value(d, value);
    if (why != NULL)
        return bad_value(d, value, why);

    if (d->kind == FLAG_DEPRECATED && !d->set) {
        if (f->prog[0] != '\0')
            fprintf(stderr, "%s: ", f->prog);
        fprintf(stderr, "flag --%s is deprecated and has no effect\n", d->name);
    }
    d->set = true;
    return 0;
}

int util_flags_parse(util_flags *f, int argc, char **argv, int *first_arg)
{
    if (f != NULL && f->parent != NULL)
        f = f->parent;
    int i = 1;
    int rc = 0;
    bool help = false;

    if (f == NULL || (argc > 1 && argv == NULL))
        return util_err_set(-EINVAL, "flag: missing flag set or arguments");

    while (i < argc && rc == 0 && !help)
        rc = parse_one(f, argc, argv, &i, &help);
    if (first_arg != NULL)
        *first_arg = i < argc ? i : argc;
    if (rc < 0)
        return rc;

    if (help) {
        util_flags_usage(f, stdout);
        fflush(stdout);
        return UTIL_FLAGS_EXIT_0;
    }
    /* Like upstream: -version is looked at only once every flag parsed. */
    struct flag_def *v = find(f, "version");
    if (v != NULL && v->builtin && f->show_version) {
        printf("%s %s\n", f->prog, f->version);
        fflush(stdout);
        return UTIL_FLAGS_EXIT_0;
    }
    return UTIL_FLAGS_OK;
}

bool util_flags_is_set(const util_flags *f, const char *name)
{
    if (f == NULL || name == NULL)
        return false;
    const char *full;
    char *owned;
    const util_flags *root = in_root(f, name, &full, &owned);
    const struct flag_def *d = find(root, full);
    free(owned);
    return d != NULL && d->set;
}

/* ---- scopes -------------------------------------------------------------- */

util_flags *util_flags_scope(util_flags *f, const char *prefix)
{
    if (f == NULL || prefix == NULL)
        return NULL;
    while (f->parent != NULL)
        f = f->parent;
    util_flags *sc = util_calloc(1, sizeof(*sc));
    sc->parent = f;
    sc->prefix = util_strdup(prefix);
    sc->prog = f->prog;
    util_flags **scopes = realloc(f->scopes, (f->n_scopes + 1) * sizeof(util_flags *));
    if (scopes == NULL) {
        fputs("util: out of memory\n", stderr);
        abort();
    }
    f->scopes = scopes;
    f->scopes[f->n_scopes++] = sc;
    return sc;
}

static size_t kind_size(enum flag_kind kind)
{
    switch (kind) {
    case FLAG_BOOL:
        return sizeof(bool);
    case FLAG_INT:
        return sizeof(int);
    case FLAG_INT64:
        return sizeof(int64_t);
    case FLAG_DOUBLE:
        return sizeof(double);
    case FLAG_STRING:
        return sizeof(const char *);
    case FLAG_DURATION:
        return sizeof(util_duration);
    default:
        return 0;
    }
}

int util_flags_inherit(util_flags *scope)
{
    if (scope == NULL || scope->parent == NULL)
        return 0;
    const util_flags *root = scope->parent;
    size_t plen = strlen(scope->prefix);
    int n = 0;
    for (size_t i = 0; i < root->n; i++) {
        const struct flag_def *d = &root->defs[i];
        if (d->set || d->dst == NULL || strncmp(d->name, scope->prefix, plen) != 0)
            continue;
        const struct flag_def *g = find(root, d->name + plen);
        if (g == NULL || !g->set || g->kind != d->kind || g->dst == NULL)
            continue;
        memcpy(d->dst, g->dst, kind_size(d->kind));
        n++;
    }
    return n;
}

const char *util_flags_scope_first_set(const util_flags *scope)
{
    if (scope == NULL || scope->parent == NULL)
        return NULL;
    const util_flags *root = scope->parent;
    size_t plen = strlen(scope->prefix);
    for (size_t i = 0; i < root->n; i++) {
        if (root->defs[i].set && strncmp(root->defs[i].name, scope->prefix, plen) == 0)
            return root->defs[i].name;
    }
    return NULL;
}

/* ---- usage -------------------------------------------------------------- */

static int by_name(const void *a, const void *b)
{
    const struct flag_def *const *x = a;
    const struct flag_def *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

/* Go's type word after "-name"; "" for booleans. */
static const char *type_name(const struct flag_def *d)
{
    switch (d->kind) {
    case FLAG_BOOL:
        return "";
    case FLAG_INT:
    case FLAG_INT64:
        return "int";
    case FLAG_DOUBLE:
        return "float";
    case FLAG_STRING:
        return "string";
    case FLAG_DURATION:
        return "duration";
    case FLAG_DEPRECATED:
        return d->takes_value ? "value" : "";
    }
    return "value";
}

/* Writes help text, continuing new lines under the tab as Go does. */
static void put_help(const char *s, size_t len, FILE *out)
{
    for (size_t k = 0; k < len; k++) {
        if (s[k] == '\n')
            fputs("\n    \t", out);
        else
            fputc(s[k], out);
    }
}

/* Prints " (default X)" unless the default is the type's zero value. */
static void put_default(const struct flag_def *d, FILE *out)
{
    char buf[64];

    switch (d->kind) {
    case FLAG_BOOL:
        if (d->def.b)
            fputs(" (default true)", out);
        return;
    case FLAG_INT:
        if (d->def.i != 0)
            fprintf(out, " (default %d)", d->def.i);
        return;
    case FLAG_INT64:
        if (d->def.i64 != 0)
            fprintf(out, " (default %" PRId64 ")", d->def.i64);
        return;
    case FLAG_DOUBLE:
        format_double(d->def.d, buf, sizeof(buf));
        if (strcmp(buf, "0") != 0)
            fprintf(out, " (default %s)", buf);
        return;
    case FLAG_STRING:
        if (d->def.s != NULL && d->def.s[0] != '\0') {
            char *q = quote(d->def.s);
            fprintf(out, " (default %s)", q);
            free(q);
        }
        return;
    case FLAG_DURATION:
        if (d->def.dur != 0) {
            util_duration_format(d->def.dur, buf, sizeof(buf));
            fprintf(out, " (default %s)", buf);
        }
        return;
    case FLAG_DEPRECATED:
        return;
    }
}

static void put_flag(const struct flag_def *d, FILE *out)
{
    const char *help = d->help;
    const char *tick = strchr(help, '`');
    const char *tick2 = tick != NULL ? strchr(tick + 1, '`') : NULL;
    const char *word = type_name(d);
    size_t word_len = strlen(word);

    /* A `quoted` word in the help names the value; the quotes are dropped. */
    if (tick2 != NULL) {
        word = tick + 1;
        word_len = (size_t)(tick2 - word);
    }
    fprintf(out, "  -%s", d->name);
    if (word_len > 0)
        fprintf(out, " %.*s", (int)word_len, word);
    /* Go keeps one-letter booleans on one line: "  -v\tusage". */
    bool one_line = 3 + strlen(d->name) + (word_len > 0 ? word_len + 1 : 0) <= 4;
    fputs(one_line ? "\t" : "\n    \t", out);
    if (tick2 != NULL) {
        put_help(help, (size_t)(tick - help), out);
        put_help(word, word_len, out);
        put_help(tick2 + 1, strlen(tick2 + 1), out);
    } else {
        put_help(help, strlen(help), out);
    }
    put_default(d, out);
    fputc('\n', out);
}

void util_flags_usage(const util_flags *f, FILE *out)
{
    if (f != NULL && f->parent != NULL)
        f = f->parent;
    if (f == NULL || out == NULL)
        return;
    if (f->prog[0] != '\0')
        fprintf(out, "Usage of %s:\n", f->prog);
    else
        fputs("Usage:\n", out);

    const struct flag_def **sorted = util_calloc(f->n, sizeof(const struct flag_def *));
    for (size_t i = 0; i < f->n; i++)
        sorted[i] = &f->defs[i];
    qsort(sorted, f->n, sizeof(const struct flag_def *), by_name);
    for (size_t i = 0; i < f->n; i++)
        put_flag(sorted[i], out);
    free(sorted);
}

int util_flags_parse_or_exit(util_flags *f, int argc, char **argv)
{
    int first = argc;
    int rc = util_flags_parse(f, argc, argv, &first);

    if (rc < 0) {
        const char *prog = f != NULL ? f->prog : "";
        if (prog[0] != '\0')
            fprintf(stderr, "%s: %s\n", prog, util_err_last());
        else
            fprintf(stderr, "%s\n", util_err_last());
        exit(1);
    }
    if (rc == UTIL_FLAGS_EXIT_0)
        exit(0);
    return first;
}
