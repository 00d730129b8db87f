/*
 * Renders protobuf-c messages as compact JSON-like text for -v=5 logs.
 *
 * Walks the message through its descriptor, so it works for every CSI,
 * registration and COSI message without per-type code. Fields at their zero
 * value are left out (as Go's JSON encoding of a proto3 struct does), and
 * the values of sensitive fields are replaced, as the table below says.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "csi/csi.h"

#define STRIPPED "\"***stripped***\""

static void sb_puts(util_buf *b, const char *s)
{
    util_buf_put(b, s, strlen(s));
}

static void sb_printf(util_buf *b, const char *fmt, ...) UTIL_ATTR_PRINTF(2, 3);
static void sb_printf(util_buf *b, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    if (n > 0)
        util_buf_put(b, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void sb_quote(util_buf *b, const char *s, size_t n)
{
    util_buf_put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            char esc[2] = {'\\', (char)c};
            util_buf_put(b, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            sb_printf(b, "\\u%04x", c);
        } else {
            util_buf_put(b, (const char *)&c, 1);
        }
    }
    util_buf_put(b, "\"", 1);
}

/*
 * Fields whose values never reach a log. protobuf-c drops custom field
 * options (csi_secret, cosi_secret), so the list is kept here; a message
 * name of NULL matches in every message. `keys_shown`: a map whose keys are
 * printed and whose values are not.
 */
static const struct sensitive {
    const char *msg; /* full proto name, NULL: any message */
    const char *field;
    bool keys_shown;
} sensitive_fields[] = {
    /* CSI: every secrets map (csi_secret); COSI: CredentialDetails.secrets. */
    {NULL, "secrets", false},
    /* CSI: mount options may carry credentials (cifs "password="). */
    {NULL, "mount_flags", false},
    /* COSI: the protocol names ("s3", "azure") help when a sidecar refuses a
     * grant; what each holds is the credential. */
    {"cosi.v1alpha1.DriverGrantBucketAccessResponse", "credentials", true},
};

static const struct sensitive *sensitive_rule(const ProtobufCMessageDescriptor *d,
                                              const ProtobufCFieldDescriptor *f)
{
    for (size_t i = 0; i < sizeof(sensitive_fields) / sizeof(sensitive_fields[0]); i++) {
        const struct sensitive *sv = &sensitive_fields[i];
        if (strcmp(f->name, sv->field) == 0 && (!sv->msg || strcmp(d->name, sv->msg) == 0))
            return sv;
    }
    return NULL;
}

static size_t elem_size(ProtobufCType t)
{
    switch (t) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
    case PROTOBUF_C_TYPE_FLOAT:
        return 4;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
    case PROTOBUF_C_TYPE_DOUBLE:
        return 8;
    case PROTOBUF_C_TYPE_BOOL:
        return sizeof(protobuf_c_boolean);
    case PROTOBUF_C_TYPE_ENUM:
        return sizeof(int);
    case PROTOBUF_C_TYPE_STRING:
        return sizeof(char *);
    case PROTOBUF_C_TYPE_BYTES:
        return sizeof(ProtobufCBinaryData);
    case PROTOBUF_C_TYPE_MESSAGE:
        return sizeof(ProtobufCMessage *);
    }
    return 0;
}

/* True when a singular proto3 value is its type's zero (left out of text). */
static bool is_zero(const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        return !s || !*s;
    }
    case PROTOBUF_C_TYPE_BYTES:
        return ((const ProtobufCBinaryData *)p)->len == 0;
    case PROTOBUF_C_TYPE_MESSAGE:
        return *(ProtobufCMessage *const *)p == NULL;
    default: {
        static const char zeros[8];
        return memcmp(p, zeros, elem_size(f->type)) == 0;
    }
    }
}

static void render_msg(util_buf *b, const ProtobufCMessage *m);

static void render_value(util_buf *b, const ProtobufCFieldDescriptor *f, const void *p)
{
    switch (f->type) {
    case PROTOBUF_C_TYPE_INT32:
    case PROTOBUF_C_TYPE_SINT32:
    case PROTOBUF_C_TYPE_SFIXED32:
        sb_printf(b, "%" PRId32, *(const int32_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT32:
    case PROTOBUF_C_TYPE_FIXED32:
        sb_printf(b, "%" PRIu32, *(const uint32_t *)p);
        break;
    case PROTOBUF_C_TYPE_INT64:
    case PROTOBUF_C_TYPE_SINT64:
    case PROTOBUF_C_TYPE_SFIXED64:
        sb_printf(b, "%" PRId64, *(const int64_t *)p);
        break;
    case PROTOBUF_C_TYPE_UINT64:
    case PROTOBUF_C_TYPE_FIXED64:
        sb_printf(b, "%" PRIu64, *(const uint64_t *)p);
        break;
    case PROTOBUF_C_TYPE_FLOAT:
        sb_printf(b, "%g", (double)*(const float *)p);
        break;
    case PROTOBUF_C_TYPE_DOUBLE:
        sb_printf(b, "%g", *(const double *)p);
        break;
    case PROTOBUF_C_TYPE_BOOL:
        sb_puts(b, *(const protobuf_c_boolean *)p ? "true" : "false");
        break;
    case PROTOBUF_C_TYPE_ENUM: {
        int v = *(const int *)p;
        const ProtobufCEnumValue *ev =
            protobuf_c_enum_descriptor_get_value((const ProtobufCEnumDescriptor *)f->descriptor, v);
        if (ev)
            sb_printf(b, "\"%s\"", ev->name);
        else
            sb_printf(b, "%d", v);
        break;
    }
    case PROTOBUF_C_TYPE_STRING: {
        const char *s = *(char *const *)p;
        sb_quote(b, s ? s : "", s ? strlen(s) : 0);
        break;
    }
    case PROTOBUF_C_TYPE_BYTES: {
        const ProtobufCBinaryData *bd = p;
        sb_printf(b, "\"<%zu bytes>\"", bd->len);
        break;
    }
    case PROTOBUF_C_TYPE_MESSAGE: {
        const ProtobufCMessage *sub = *(ProtobufCMessage *const *)p;
        if (sub)
            render_msg(b, sub);
        else
            sb_puts(b, "null");
        break;
    }
    }
}

/* A map field is a repeated message whose type is a generated *Entry with
 * exactly the fields key (1) and value (2). */
static bool is_map(const ProtobufCFieldDescriptor *f)
{
    if (f->label != PROTOBUF_C_LABEL_REPEATED || f->type != PROTOBUF_C_TYPE_MESSAGE)
        return false;
    const ProtobufCMessageDescriptor *d = f->descriptor;
    size_t nl = strlen(d->name);
    return d->n_fields == 2 && nl > 5 && strcmp(d->name + nl - 5, "Entry") == 0 &&
           strcmp(d->fields[0].name, "key") == 0 && strcmp(d->fields[1].name, "value") == 0;
}

static void render_map(util_buf *b, const ProtobufCFieldDescriptor *f, size_t n,
                       ProtobufCMessage *const *entries, bool strip_values)
{
    const ProtobufCMessageDescriptor *d = f->descriptor;
    sb_puts(b, "{");
    for (size_t i = 0; i < n; i++) {
        const char *e = (const char *)entries[i];
        if (i)
            sb_puts(b, ",");
        const char *key = *(char *const *)(e + d->fields[0].offset);
        sb_quote(b, key ? key : "", key ? strlen(key) : 0);
        sb_puts(b, ":");
        if (strip_values)
            sb_puts(b, STRIPPED);
        else
            render_value(b, &d->fields[1], e + d->fields[1].offset);
    }
    sb_puts(b, "}");
}

static void render_msg(util_buf *b, const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *d = m->descriptor;
    const char *base = (const char *)m;
    bool first = true;
    sb_puts(b, "{");
    for (unsigned i = 0; i < d->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &d->fields[i];
        const void *p = base + f->offset;
        size_t n = 0;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            n = *(const size_t *)(base + f->quantifier_offset);
            if (n == 0)
                continue;
        } else if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) {
            if (*(const uint32_t *)(base + f->quantifier_offset) != f->id)
                continue;
        } else if (f->label == PROTOBUF_C_LABEL_OPTIONAL && f->quantifier_offset &&
                   f->type != PROTOBUF_C_TYPE_MESSAGE && f->type != PROTOBUF_C_TYPE_STRING) {
            if (!*(const protobuf_c_boolean *)(base + f->quantifier_offset))
                continue;
        } else if (is_zero(f, p)) {
            continue;
        }
        if (!first)
            sb_puts(b, ",");
        first = false;
        sb_quote(b, f->name, strlen(f->name));
        sb_puts(b, ":");
        const struct sensitive *sv = sensitive_rule(d, f);
        if (sv && !(sv->keys_shown && is_map(f))) {
            sb_puts(b, STRIPPED);
        } else if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            const char *arr = *(char *const *)p;
            if (is_map(f)) {
                render_map(b, f, n, (ProtobufCMessage *const *)arr, sv != NULL);
                continue;
            }
            size_t es = elem_size(f->type);
            sb_puts(b, "[");
            for (size_t k = 0; k < n; k++) {
                if (k)
                    sb_puts(b, ",");
                render_value(b, f, arr + k * es);
            }
            sb_puts(b, "]");
        } else {
            render_value(b, f, p);
        }
    }
    sb_puts(b, "}");
}

char *csi_msg_to_text(const ProtobufCMessage *msg, size_t max_len)
{
    util_buf b = {0};
    if (!msg)
        sb_puts(&b, "null");
    else
        render_msg(&b, msg);
    if (max_len > 0 && b.len > max_len) {
        /* The marker only where it fits: a tiny cap must not write past
         * a short text. */
        static const char more[] = "...";
        if (max_len >= sizeof(more))
            memcpy(b.buf + max_len - (sizeof(more) - 1), more, sizeof(more) - 1);
        b.buf[max_len] = '\0';
    }
    return b.buf;
}
