/*
 * Request sanity both example drivers check before any handler runs:
 * proto3 strings must be UTF-8 (Go's gRPC refuses such requests outright),
 * and checking every string of a request once keeps the drivers' JSON
 * state files valid whatever a caller sends.
 */
#include <protobuf-c/protobuf-c.h>

#include "drvkit/drvkit.h"

static bool utf8_valid(const char *str)
{
    const unsigned char *s = (const unsigned char *)str;
    while (*s) {
        unsigned c = *s;
        int n;
        unsigned min;
        if (c < 0x80) {
            s++;
            continue;
        } else if ((c & 0xe0) == 0xc0) {
            n = 1, min = 0x80, c &= 0x1f;
        } else if ((c & 0xf0) == 0xe0) {
            n = 2, min = 0x800, c &= 0x0f;
        } else if ((c & 0xf8) == 0xf0) {
            n = 3, min = 0x10000, c &= 0x07;
        } else {
            return false;
        }
        for (int i = 1; i <= n; i++) {
            if ((s[i] & 0xc0) != 0x80)
                return false;
            c = (c << 6) | (s[i] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
            return false;
        s += n + 1;
    }
    return true;
}

bool drvkit_strings_valid(const ProtobufCMessage *m)
{
    const ProtobufCMessageDescriptor *desc = m->descriptor;
    const char *base = (const char *)m;
    for (unsigned i = 0; i < desc->n_fields; i++) {
        const ProtobufCFieldDescriptor *f = &desc->fields[i];
        if (f->type != PROTOBUF_C_TYPE_STRING && f->type != PROTOBUF_C_TYPE_MESSAGE)
            continue;
        if (f->label == PROTOBUF_C_LABEL_REPEATED) {
            size_t n = *(const size_t *)(base + f->quantifier_offset);
            void *const *arr = *(void *const *const *)(base + f->offset);
            for (size_t j = 0; j < n; j++) {
                if (f->type == PROTOBUF_C_TYPE_STRING ? !utf8_valid(arr[j])
                                                      : !drvkit_strings_valid(arr[j]))
                    return false;
            }
            continue;
        }
        if ((f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF) &&
            *(const uint32_t *)(base + f->quantifier_offset) != f->id)
            continue;
        const void *v = *(const void *const *)(base + f->offset);
        if (!v)
            continue;
        if (f->type == PROTOBUF_C_TYPE_STRING ? !utf8_valid(v) : !drvkit_strings_valid(v))
            return false;
    }
    return true;
}
