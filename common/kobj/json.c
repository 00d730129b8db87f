/*
 * JSON text to json-c trees and back, without json-c's tokener and printer.
 *
 * json-c's tokener runs a byte-at-a-time state machine and copies every
 * string through a growing buffer; its printer escapes byte by byte into
 * another. A sidecar parses every watch event, keeps it as text and parses
 * it again on each read, so the two were a third of all instructions spent
 * provisioning a volume. This reader is a recursive descent over the whole
 * text: a string without escapes is found with memchr() and copied once,
 * and it builds the very same json-c trees, so every getter keeps working.
 *
 * What it accepts is what json-c's strict mode accepted before it, checked
 * by a differential test: RFC 8259 plus the three liberties json-c takes
 * (raw control bytes but NUL inside strings, a fraction with no digits as in "1.",
 * and integers out of range clamped to the nearest 64-bit value). A lone
 * UTF-16 surrogate in a \u escape becomes U+FFFD, as with json-c.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kobj/kobj.h"
#include "util/util.h"

/* ---- reading --------------------------------------------------------------- */

/* Bytes that end a run of plain string bytes: the quote, the backslash
 * and NUL (refused). */
static const unsigned char str_stop[256] = {['"'] = 1, ['\\'] = 1, [0] = 1};

struct reader {
    const char *start, *p, *end;
    int depth;
    /* Keys and strings with escapes are assembled here. */
    char *buf;
    size_t cap;
    char small[256];
};

static bool is_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

static void skip_ws(struct reader *r)
{
    while (r->p < r->end && is_ws(*r->p))
        r->p++;
}

/* -EAGAIN: the text ended inside the value (more may come); -EINVAL: bad. */
static int fail(struct reader *r, const char *what)
{
    if (r->p >= r->end)
        return -EAGAIN;
    util_err_set(-EINVAL, "bad JSON at byte %zu: %s", (size_t)(r->p - r->start), what);
    return -EINVAL;
}

static void reserve(struct reader *r, size_t need)
{
    if (need <= r->cap)
        return;
    size_t cap = r->cap * 2 > need ? r->cap * 2 : need;
    char *nb = r->buf == r->small ? malloc(cap) : realloc(r->buf, cap);
    if (!nb)
        abort();
    if (r->buf == r->small)
        memcpy(nb, r->small, sizeof(r->small));
    r->buf = nb;
    r->cap = cap;
}

static int hex4(const char *p, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

static size_t put_utf8(char *o, unsigned cp)
{
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xC0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | cp >> 12);
        o[1] = (char)(0x80 | (cp >> 6 & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (char)(0xF0 | cp >> 18);
    o[1] = (char)(0x80 | (cp >> 12 & 0x3F));
    o[2] = (char)(0x80 | (cp >> 6 & 0x3F));
    o[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* One \u escape with its four hex digits (r->p just past the "\u"), a
 * surrogate pair taking two;
 * the code point's UTF-8 bytes go to o. */
static int unicode_escape(struct reader *r, char *o, size_t *n)
{
    unsigned cp, lo;
    size_t rem = (size_t)(r->end - r->p);
    if (rem < 4) {
        for (size_t i = 0; i < rem; i++)
            if (!strchr("0123456789abcdefABCDEF", r->p[i])) {
                r->p += i;
                return fail(r, "a \\u escape without four hex digits");
            }
        r->p = r->end;
        return -EAGAIN;
    }
    if (hex4(r->p, &cp) != 0)
        return fail(r, "a \\u escape without four hex digits");
    r->p += 4;
    rem -= 4;
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        /* A high surrogate pairs with a following low one; alone, like a
         * lone low surrogate, it stands for U+FFFD. Whether one follows is
         * unknown while the text ends within the next six bytes. */
        if (rem < 6 && (rem == 0 || (r->p[0] == '\\' && (rem < 2 || r->p[1] == 'u')))) {
            r->p = r->end;
            return -EAGAIN;
        }
        if (rem >= 6 && r->p[0] == '\\' && r->p[1] == 'u' && hex4(r->p + 2, &lo) == 0 &&
            lo >= 0xDC00 && lo <= 0xDFFF) {
            r->p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        } else {
            cp = 0xFFFD;
        }
    } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
        cp = 0xFFFD;
    }
    *n = put_utf8(o, cp);
    return 0;
}

/*
 * The raw bytes of a string are UTF-8, as every API server writes them (Go
 * encodes nothing else): invalid bytes come from a corrupted or hostile
 * answer, which is refused whole rather than cached and written back. Most
 * strings are ASCII, which eight bytes at a time find out.
 */
static bool utf8_ok(const char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        uint64_t w;
        if (i + 8 <= n) {
            memcpy(&w, p + i, 8);
            if ((w & 0x8080808080808080ull) == 0) {
                i += 8;
                continue;
            }
        }
        if ((unsigned char)p[i] < 0x80) {
            i++;
            continue;
        }
        unsigned rune;
        size_t k = util_utf8_decode(p + i, n - i, &rune);
        if (k == 0)
            return false;
        i += k;
    }
    return true;
}

/*
 * A string, r->p just past its opening quote. *s and *len describe its
 * bytes: in the text itself when it has no escapes, else in r->buf.
 */
static int read_string(struct reader *r, const char **s, size_t *len)
{
    *s = NULL;
    *len = 0;
    /* Most strings have no escape: two memchr() find that out. */
    const char *q = memchr(r->p, '"', (size_t)(r->end - r->p));
    if (!q) {
        r->p = r->end;
        return -EAGAIN;
    }
    const char *nul = memchr(r->p, '\0', (size_t)(q - r->p));
    if (nul) {
        /* json-c refuses it too; as a key it would cut the name short. */
        r->p = nul;
        return fail(r, "a NUL byte in a string");
    }
    if (!utf8_ok(r->p, (size_t)(q - r->p)))
        return fail(r, "invalid UTF-8 in a string");
    const char *bs = memchr(r->p, '\\', (size_t)(q - r->p));
    if (!bs) {
        *s = r->p;
        *len = (size_t)(q - r->p);
        r->p = q + 1;
        return 0;
    }
    q = bs;
    size_t n = (size_t)(q - r->p);
    reserve(r, n + 1);
    memcpy(r->buf, r->p, n);
    r->p = q;
    for (;;) {
        const char *run = r->p;
        while (r->p < r->end && !str_stop[(unsigned char)*r->p])
            r->p++;
        size_t k = (size_t)(r->p - run);
        if (r->p >= r->end)
            return -EAGAIN;
        if (!utf8_ok(run, k))
            return fail(r, "invalid UTF-8 in a string");
        reserve(r, n + k + 5);
        memcpy(r->buf + n, run, k);
        n += k;
        if (*r->p == '\0')
            return fail(r, "a NUL byte in a string");
        if (*r->p == '"') {
            r->p++;
            break;
        }
        /* A backslash. */
        if (++r->p >= r->end)
            return -EAGAIN;
        char c = *r->p++;
        switch (c) {
        case '"':
        case '\\':
        case '/':
            r->buf[n++] = c;
            break;
        case 'b':
            r->buf[n++] = '\b';
            break;
        case 'f':
            r->buf[n++] = '\f';
            break;
        case 'n':
            r->buf[n++] = '\n';
            break;
        case 'r':
            r->buf[n++] = '\r';
            break;
        case 't':
            r->buf[n++] = '\t';
            break;
        case 'u': {
            size_t k2 = 0;
            int rc = unicode_escape(r, r->buf + n, &k2);
            if (rc != 0)
                return rc;
            n += k2;
            break;
        }
        default:
            r->p--;
            return fail(r, "an unknown escape in a string");
        }
    }
    *s = r->buf;
    *len = n;
    return 0;
}

static json_object *checked(json_object *o)
{
    if (!o)
        abort(); /* json-c's constructors fail only when memory does */
    return o;
}

/* Digits of an integer (no sign) into a magnitude; false on overflow. */
static bool magnitude(const char *p, const char *e, uint64_t *out)
{
    uint64_t v = 0;
    for (; p < e; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

static int read_number(struct reader *r, json_object **out)
{
    const char *b = r->p, *p = r->p;
    bool neg = false, frac = false;
    if (*p == '-') {
        neg = true;
        p++;
    }
    const char *digits = p;
    while (p < r->end && *p >= '0' && *p <= '9')
        p++;
    const char *digits_end = p;
    if (p == digits) {
        r->p = p;
        return fail(r, "a number without digits");
    }
    if (*digits == '0' && p - digits > 1) {
        r->p = digits + 1;
        return fail(r, "a number with a leading zero");
    }
    if (p < r->end && *p == '.') {
        frac = true;
        p++;
        /* json-c takes "1." as a number; so does this reader. */
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
    }
    if (p < r->end && (*p == 'e' || *p == 'E')) {
        frac = true;
        p++;
        if (p < r->end && (*p == '+' || *p == '-'))
            p++;
        const char *ed = p;
        while (p < r->end && *p >= '0' && *p <= '9')
            p++;
        if (p == ed) {
            r->p = p;
            return fail(r, "an exponent without digits");
        }
    }
    r->p = p;
    if (!frac) {
        uint64_t m = UINT64_MAX;
        bool fits = magnitude(digits, digits_end, &m);
        /* Out of range: clamped, as json-c does. */
        if (neg)
            *out = checked(json_object_new_int64(
                !fits || m > (uint64_t)INT64_MAX + 1 ? INT64_MIN : (int64_t)(0 - m)));
        else if (!fits || m > (uint64_t)INT64_MAX)
            *out = checked(json_object_new_uint64(m));
        else
            *out = checked(json_object_new_int64((int64_t)m));
        return 0;
    }
    size_t n = (size_t)(p - b);
    reserve(r, n + 1);
    memcpy(r->buf, b, n);
    r->buf[n] = '\0';
    /* The text is kept, so the number is written back as it came. */
    *out = checked(json_object_new_double_s(strtod(r->buf, NULL), r->buf));
    return 0;
}

static int literal(struct reader *r, const char *word, size_t n)
{
    size_t have = (size_t)(r->end - r->p);
    size_t cmp = have < n ? have : n;
    if (memcmp(r->p, word, cmp) != 0) {
        size_t i = 0;
        while (i < cmp && r->p[i] == word[i])
            i++;
        r->p += i;
        return fail(r, "an unexpected character");
    }
    if (have < n) {
        r->p = r->end;
        return -EAGAIN;
    }
    r->p += n;
    return 0;
}

/*
 * Member names that Kubernetes objects repeat in every copy, sorted by
 * length and then bytes (test_kobj_json checks the order). A key found here
 * is added to its object as a constant and not copied: a watch event or a
 * cached object read again then costs one allocation less per member, and
 * one free less when the tree goes.
 */
struct common_key {
    const char *s;
    size_t n;
};
#define K(s)                                                                                       \
    {                                                                                              \
        s, sizeof(s) - 1                                                                           \
    }
static const struct common_key common_keys[] = {
    K("csi"),
    K("key"),
    K("uid"),
    K("code"),
    K("host"),
    K("kind"),
    K("name"),
    K("spec"),
    K("time"),
    K("type"),
    K("count"),
    K("items"),
    K("phase"),
    K("driver"),
    K("fsType"),
    K("labels"),
    K("limits"),
    K("nodeID"),
    K("object"),
    K("reason"),
    K("source"),
    K("status"),
    K("values"),
    K("address"),
    K("details"),
    K("drivers"),
    K("manager"),
    K("message"),
    K("storage"),
    K("apiGroup"),
    K("attached"),
    K("attacher"),
    K("capacity"),
    K("claimRef"),
    K("continue"),
    K("fieldsV1"),
    K("metadata"),
    K("nodeInfo"),
    K("nodeName"),
    K("operator"),
    K("readOnly"),
    K("requests"),
    K("required"),
    K("selector"),
    K("selfLink"),
    K("addresses"),
    K("component"),
    K("eventTime"),
    K("fieldPath"),
    K("namespace"),
    K("operation"),
    K("renewTime"),
    K("resources"),
    K("apiVersion"),
    K("conditions"),
    K("controller"),
    K("dataSource"),
    K("fieldsType"),
    K("finalizers"),
    K("generation"),
    K("parameters"),
    K("volumeMode"),
    K("volumeName"),
    K("accessModes"),
    K("acquireTime"),
    K("allocatable"),
    K("annotations"),
    K("attachError"),
    K("detachError"),
    K("matchLabels"),
    K("provisioner"),
    K("subresource"),
    K("mountOptions"),
    K("nodeAffinity"),
    K("topologyKeys"),
    K("volumeHandle"),
    K("dataSourceRef"),
    K("lastProbeTime"),
    K("lastTimestamp"),
    K("managedFields"),
    K("reclaimPolicy"),
    K("firstTimestamp"),
    K("holderIdentity"),
    K("involvedObject"),
    K("ownerReferences"),
    K("resourceVersion"),
    K("inlineVolumeSpec"),
    K("leaseTransitions"),
    K("matchExpressions"),
    K("storageClassName"),
    K("volumeAttributes"),
    K("allowedTopologies"),
    K("creationTimestamp"),
    K("deletionTimestamp"),
    K("nodeSelectorTerms"),
    K("reportingInstance"),
    K("volumeBindingMode"),
    K("allocatedResources"),
    K("attachmentMetadata"),
    K("blockOwnerDeletion"),
    K("lastTransitionTime"),
    K("nodeStageSecretRef"),
    K("remainingItemCount"),
    K("reportingComponent"),
    K("nodeExpandSecretRef"),
    K("allowVolumeExpansion"),
    K("leaseDurationSeconds"),
    K("nodePublishSecretRef"),
    K("persistentVolumeName"),
    K("kubernetes.io/hostname"),
    K("controllerExpandSecretRef"),
    K("volumeAttributesClassName"),
    K("controllerPublishSecretRef"),
    K("deletionGracePeriodSeconds"),
    K("topology.kubernetes.io/zone"),
    K("persistentVolumeReclaimPolicy"),
    K("topology.kubernetes.io/region"),
    K("csi.volume.kubernetes.io/nodeid"),
    K("pv.kubernetes.io/bind-completed"),
    K("pv.kubernetes.io/provisioned-by"),
    K("volume.kubernetes.io/selected-node"),
    K("pv.kubernetes.io/bound-by-controller"),
    K("volume.kubernetes.io/storage-provisioner"),
    K("storage.kubernetes.io/csiProvisionerIdentity"),
    K("volume.beta.kubernetes.io/storage-provisioner"),
    K("volume.kubernetes.io/provisioner-deletion-secret-name"),
    K("volume.kubernetes.io/provisioner-deletion-secret-namespace"),
};
#undef K

/* The interned copy of the key k (n bytes), or NULL. */
static const char *common_key(const char *k, size_t n)
{
    if (!k || n == 0)
        return NULL;
    size_t lo = 0, hi = sizeof(common_keys) / sizeof(common_keys[0]);
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const struct common_key *c = &common_keys[mid];
        int cmp = c->n != n ? (c->n < n ? -1 : 1) : memcmp(c->s, k, n);
        if (cmp == 0)
            return c->s;
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

/* Tests only (not in kobj.h): the i-th name of the table above (NULL past
 * its end), to check its order. */
const char *kobj__common_key(size_t i)
{
    return i < sizeof(common_keys) / sizeof(common_keys[0]) ? common_keys[i].s : NULL;
}

static int read_value(struct reader *r, json_object **out);

static int read_object(struct reader *r, json_object **out)
{
    json_object *o = checked(json_object_new_object());
    r->p++; /* '{' */
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') {
        r->p++;
        *out = o;
        return 0;
    }
    for (;;) {
        if (r->p >= r->end || *r->p != '"') {
            json_object_put(o);
            return fail(r, "an object key that is not a string");
        }
        r->p++;
        const char *k = NULL;
        size_t kl = 0;
        int rc = read_string(r, &k, &kl);
        if (rc == 0) {
            skip_ws(r);
            rc = r->p < r->end && *r->p == ':' ? 0 : fail(r, "no ':' after an object key");
        }
        json_object *v = NULL;
        if (rc == 0) {
            r->p++;
            const char *common = common_key(k, kl);
            /* json-c wants the key NUL-terminated; the value may reuse r->buf. */
            char small[64];
            char *key = common || kl < sizeof(small) ? small : malloc(kl + 1);
            if (!key)
                abort();
            if (!common) {
                if (kl > 0)
                    memcpy(key, k, kl);
                key[kl] = '\0';
            }
            rc = read_value(r, &v);
            if (rc == 0 && common &&
                json_object_object_add_ex(o, common, v, JSON_C_OBJECT_ADD_CONSTANT_KEY) != 0)
                abort();
            if (rc == 0 && !common && json_object_object_add(o, key, v) != 0)
                abort();
            if (key != small)
                free(key);
        }
        if (rc == 0) {
            skip_ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                skip_ws(r);
                continue;
            }
            if (r->p < r->end && *r->p == '}') {
                r->p++;
                *out = o;
                return 0;
            }
            rc = fail(r, "no ',' or '}' after an object member");
        }
        json_object_put(o);
        return rc;
    }
}

static int read_array(struct reader *r, json_object **out)
{
    json_object *a = checked(json_object_new_array_ext(4));
    r->p++; /* '[' */
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
        *out = a;
        return 0;
    }
    for (;;) {
        json_object *v = NULL;
        int rc = read_value(r, &v);
        if (rc == 0 && json_object_array_add(a, v) != 0)
            abort();
        if (rc == 0) {
            skip_ws(r);
            if (r->p < r->end && *r->p == ',') {
                r->p++;
                continue;
            }
            if (r->p < r->end && *r->p == ']') {
                r->p++;
                *out = a;
                return 0;
            }
            rc = fail(r, "no ',' or ']' after an array item");
        }
        json_object_put(a);
        return rc;
    }
}

static int read_value(struct reader *r, json_object **out)
{
    *out = NULL;
    skip_ws(r);
    if (r->p >= r->end)
        return -EAGAIN;
    const char *s = NULL;
    size_t n = 0;
    int rc;
    switch (*r->p) {
    case '{':
    case '[':
        if (r->depth >= KOBJ_JSON_DEPTH)
            return util_err_set(-EINVAL, "bad JSON at byte %zu: nested deeper than %d",
                                (size_t)(r->p - r->start), KOBJ_JSON_DEPTH);
        r->depth++;
        rc = *r->p == '{' ? read_object(r, out) : read_array(r, out);
        r->depth--;
        return rc;
    case '"':
        r->p++;
        rc = read_string(r, &s, &n);
        if (rc == 0)
            *out = checked(json_object_new_string_len(s, (int)n));
        return rc;
    case 't':
        rc = literal(r, "true", 4);
        if (rc == 0)
            *out = checked(json_object_new_boolean(1));
        return rc;
    case 'f':
        rc = literal(r, "false", 5);
        if (rc == 0)
            *out = checked(json_object_new_boolean(0));
        return rc;
    case 'n':
        return literal(r, "null", 4);
    default:
        if (*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))
            return read_number(r, out);
        return fail(r, "an unexpected character");
    }
}

int kobj_parse(const char *text, size_t len, size_t *used, json_object **out)
{
    *out = NULL;
    if (len > (size_t)INT32_MAX)
        return util_err_set(-EINVAL, "bad JSON: a text over 2 GiB");
    struct reader r = {.start = text, .p = text, .end = text + len};
    r.buf = r.small;
    r.cap = sizeof(r.small);
    int rc = read_value(&r, out);
    if (r.buf != r.small)
        free(r.buf);
    if (rc == 0 && used)
        *used = (size_t)(r.p - text);
    return rc;
}

json_object *kobj_parse_text(const char *text, size_t len)
{
    json_object *o = NULL;
    size_t used = 0;
    int rc = kobj_parse(text, len, &used, &o);
    if (rc == -EAGAIN)
        util_err_set(-EINVAL, "bad JSON: the text ends inside a value");
    if (rc != 0)
        return NULL;
    while (used < len && is_ws(text[used]))
        used++;
    if (used < len) {
        util_err_set(-EINVAL, "bad JSON at byte %zu: text after the value", used);
        json_object_put(o);
        return NULL;
    }
    return o;
}

/* ---- framing a stream ----------------------------------------------------- */

void kobj_frame_init(kobj_frame *f)
{
    memset(f, 0, sizeof(*f));
}

long kobj_frame_scan(kobj_frame *f, const char *p, size_t n)
{
    if (n > (size_t)INT32_MAX)
        n = (size_t)INT32_MAX;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (f->in_str) {
            if (f->esc)
                f->esc = false;
            else if (c == '\\')
                f->esc = true;
            else if (c == '"')
                f->in_str = false;
            continue;
        }
        switch (c) {
        case '{':
        case '[':
            if (f->depth >= KOBJ_JSON_DEPTH)
                return util_err_set(-EINVAL, "bad JSON: nested deeper than %d", KOBJ_JSON_DEPTH);
            f->depth++;
            break;
        case '}':
        case ']':
            if (f->depth == 0)
                return util_err_set(-EINVAL, "bad JSON: a '%c' that closes nothing", c);
            if (--f->depth == 0)
                return (long)(i + 1);
            break;
        case ' ':
        case '\n':
        case '\r':
        case '\t':
            break;
        case '"':
        default:
            if (f->depth == 0)
                return util_err_set(-EINVAL, "bad JSON: a stream value that is not an object");
            f->in_str = c == '"';
            break;
        }
    }
    return 0;
}

/* ---- writing ----------------------------------------------------------------- */

/* 0: the byte is written as it is; else the letter of its short escape,
 * or 'u' for \u00XX. */
static const char esc_of[256] = {
    ['\b'] = 'b',  ['\f'] = 'f', ['\n'] = 'n', ['\r'] = 'r', ['\t'] = 't', ['"'] = '"',
    ['\\'] = '\\', [0x00] = 'u', [0x01] = 'u', [0x02] = 'u', [0x03] = 'u', [0x04] = 'u',
    [0x05] = 'u',  [0x06] = 'u', [0x07] = 'u', [0x0B] = 'u', [0x0E] = 'u', [0x0F] = 'u',
    [0x10] = 'u',  [0x11] = 'u', [0x12] = 'u', [0x13] = 'u', [0x14] = 'u', [0x15] = 'u',
    [0x16] = 'u',  [0x17] = 'u', [0x18] = 'u', [0x19] = 'u', [0x1A] = 'u', [0x1B] = 'u',
    [0x1C] = 'u',  [0x1D] = 'u', [0x1E] = 'u', [0x1F] = 'u',
};

/* Whether any of the 8 bytes at p is below 0x20, a quote, a backslash or
 * not ASCII (the bit tricks find a zero or small byte in a word at once). */
static bool needs_escape8(const char *p)
{
    const uint64_t ones = 0x0101010101010101u, high = 0x8080808080808080u;
    uint64_t x;
    memcpy(&x, p, sizeof(x));
    uint64_t q = x ^ (ones * '"'), b = x ^ (ones * '\\');
    uint64_t small = (x - ones * 0x20) & ~x & high;
    uint64_t quote = (q - ones) & ~q & high;
    uint64_t slash = (b - ones) & ~b & high;
    return (small | quote | slash | (x & high)) != 0;
}

/*
 * A JSON string of the n bytes at s. Bytes that are not UTF-8 are written
 * as \ufffd, one per byte, as Go's encoding/json writes them: a driver's or
 * a user's text may hold any bytes, and a patch carrying them raw would give
 * the API an object this module's reader refuses (and Go's would change).
 */
static void put_string(util_buf *w, const char *s, size_t n)
{
    util_buf_put(w, "\"", 1);
    size_t i = 0;
    while (i < n) {
        size_t run = i;
        while (i + 8 <= n && !needs_escape8(s + i))
            i += 8;
        while (i < n && !esc_of[(unsigned char)s[i]] && (unsigned char)s[i] < 0x80)
            i++;
        util_buf_put(w, s + run, i - run);
        if (i == n)
            break;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            unsigned rune;
            size_t k = util_utf8_decode(s + i, n - i, &rune);
            if (k == 0) {
                util_buf_put(w, "\\ufffd", 6);
                i++;
            } else {
                util_buf_put(w, s + i, k);
                i += k;
            }
            continue;
        }
        i++;
        char e = esc_of[c];
        if (e == 'u') {
            static const char hex[] = "0123456789abcdef";
            char u[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            util_buf_put(w, u, sizeof(u));
        } else {
            char two[2] = {'\\', e};
            util_buf_put(w, two, 2);
        }
    }
    util_buf_put(w, "\"", 1);
}

static void put_u64(util_buf *w, uint64_t v, bool neg)
{
    char tmp[24];
    size_t i = sizeof(tmp);
    do {
        tmp[--i] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (neg)
        tmp[--i] = '-';
    util_buf_put(w, tmp + i, sizeof(tmp) - i);
}

static void put_value(util_buf *w, json_object *o)
{
    switch (o ? json_object_get_type(o) : json_type_null) {
    case json_type_null:
        util_buf_put(w, "null", 4);
        return;
    case json_type_boolean:
        if (json_object_get_boolean(o))
            util_buf_put(w, "true", 4);
        else
            util_buf_put(w, "false", 5);
        return;
    case json_type_int: {
        int64_t v = json_object_get_int64(o);
        /* Values above INT64_MAX are held unsigned: get_int64 clamps them. */
        if (v == INT64_MAX)
            put_u64(w, json_object_get_uint64(o), false);
        else
            put_u64(w, v < 0 ? 0 - (uint64_t)v : (uint64_t)v, v < 0);
        return;
    }
    case json_type_double: {
        /* Rare in Kubernetes objects: json-c's own text, which keeps the
         * text a number was parsed from. */
        size_t n = 0;
        const char *t = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &n);
        util_buf_put(w, t, n);
        return;
    }
    case json_type_string:
        put_string(w, json_object_get_string(o), (size_t)json_object_get_string_len(o));
        return;
    case json_type_array: {
        util_buf_put(w, "[", 1);
        size_t n = json_object_array_length(o);
        for (size_t i = 0; i < n; i++) {
            if (i)
                util_buf_put(w, ",", 1);
            put_value(w, json_object_array_get_idx(o, i));
        }
        util_buf_put(w, "]", 1);
        return;
    }
    case json_type_object: {
        util_buf_put(w, "{", 1);
        bool first = true;
        json_object_object_foreach(o, k, v)
        {
            if (!first)
                util_buf_put(w, ",", 1);
            first = false;
            put_string(w, k, strlen(k));
            util_buf_put(w, ":", 1);
            put_value(w, v);
        }
        util_buf_put(w, "}", 1);
        return;
    }
    }
}

char *kobj_to_text(const json_object *o, size_t *len)
{
    util_buf w = {0};
    /* json-c's iterators take non-const pointers; nothing is modified. */
    put_value(&w, (json_object *)o);
    if (len)
        *len = w.len;
    /* Exactly sized: informers keep these texts by the hundred thousand. */
    char *exact = realloc(w.buf, w.len + 1);
    if (exact)
        w.buf = exact;
    return w.buf;
}
