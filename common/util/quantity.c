/*
 * quantity: Kubernetes resource.Quantity text as the integer Go's
 * Quantity.Value() gives, and integers printed the way the API server prints
 * a BinarySI quantity. The one implementation every sidecar and kube-lite
 * use, so a size never means two things in one cluster.
 *
 * The grammar is apimachinery's: [+-] digits [. digits] suffix, where the
 * suffix is binary (Ki..Ei), decimal (n u m "" k M G T P E) or an exponent
 * (e/E and a signed int64 that Go narrows to int32, so it wraps). The value
 * is computed exactly on the decimal digits, whatever their number, so no
 * digit is ever lost to a fixed-width mantissa; upstream reaches the same
 * numbers through an int64 fast path or inf.Dec.
 *
 * Rounding and bounds, as Go:
 *   - a fraction rounds away from zero ("1500m" 2, "-1500m" -2, "1n" 1);
 *   - a binary quantity's magnitude is capped at 2^63-1 when parsed, so "8Ei"
 *     is INT64_MAX and "-8Ei" is -INT64_MAX (not INT64_MIN);
 *   - a decimal quantity beyond int64 saturates at INT64_MAX / INT64_MIN
 *     (Go's Value() wraps there, an undefined result upstream is settling on
 *     the same rails), and "-9223372036854775808" is INT64_MIN exactly;
 *   - a number without any digit is 0 where Go takes its int64 path ("Gi",
 *     "-") and "unable to parse numeric part" where it takes inf.Dec's
 *     ("Ei", ".e-10"), because inf.Dec refuses a number without digits.
 */
#include "util.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#define QTY_ERR_FORMAT                                                                             \
    "quantities must match the regular expression "                                                \
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
#define QTY_ERR_SUFFIX  "unable to parse quantity's suffix"
#define QTY_ERR_NUMERIC "unable to parse numeric part of quantity"

static bool is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* The text cut like parseQuantityString: sign, integer digits (leading zeros
 * dropped), fraction digits, suffix. Pointers are into the text. */
typedef struct qty_parts {
    bool negative;
    bool any_digit; /* the number part holds at least one digit */
    const char *num;
    size_t num_len;
    const char *frac;
    size_t frac_len;
    const char *suffix;
    size_t suffix_len;
} qty_parts;

static int qty_split(const char *s, qty_parts *q)
{
    size_t end = strlen(s), pos = 0;

    memset(q, 0, sizeof(*q));
    q->suffix = s + end;
    if (s[0] == '-' || s[0] == '+') {
        q->negative = s[0] == '-';
        pos++;
    }
    while (pos < end && s[pos] == '0') {
        q->any_digit = true;
        pos++;
    }
    size_t start = pos;
    while (pos < end && is_digit(s[pos]))
        pos++;
    q->num = s + start;
    q->num_len = pos - start;
    q->any_digit = q->any_digit || q->num_len > 0;
    if (pos < end && s[pos] == '.') {
        pos++;
        start = pos;
        while (pos < end && is_digit(s[pos]))
            pos++;
        q->frac = s + start;
        q->frac_len = pos - start;
        q->any_digit = q->any_digit || q->frac_len > 0;
    }
    /* The suffix: letters of "eEinumkKMGTP", an optional sign, digits; what
     * it means is decided by qty_suffix. */
    size_t suffix_start = pos;
    while (pos < end && strchr("eEinumkKMGTP", s[pos]) != NULL)
        pos++;
    if (pos < end && (s[pos] == '-' || s[pos] == '+'))
        pos++;
    while (pos < end && is_digit(s[pos]))
        pos++;
    if (pos < end)
        return util_err_set(-EINVAL, QTY_ERR_FORMAT);
    q->suffix = s + suffix_start;
    q->suffix_len = end - suffix_start;
    return 0;
}

/* quantitySuffixer.interpret: the base (2 or 10) and its exponent. */
static int qty_suffix(const char *sfx, size_t n, int *base, int32_t *exp)
{
    static const struct {
        const char *s;
        int base;
        int32_t exp;
    } table[] = {
        {"Ki", 2, 10}, {"Mi", 2, 20}, {"Gi", 2, 30}, {"Ti", 2, 40}, {"Pi", 2, 50}, {"Ei", 2, 60},
        {"n", 10, -9}, {"u", 10, -6}, {"m", 10, -3}, {"", 10, 0},   {"k", 10, 3},  {"M", 10, 6},
        {"G", 10, 9},  {"T", 10, 12}, {"P", 10, 15}, {"E", 10, 18},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (strlen(table[i].s) == n && strncmp(table[i].s, sfx, n) == 0) {
            *base = table[i].base;
            *exp = table[i].exp;
            return 0;
        }
    }
    if (n < 2 || (sfx[0] != 'e' && sfx[0] != 'E'))
        return util_err_set(-EINVAL, QTY_ERR_SUFFIX);
    /* strconv.ParseInt(s[1:], 10, 64): beyond int64 is an error ... */
    size_t i = 1;
    bool neg = false;
    if (sfx[i] == '+' || sfx[i] == '-') {
        neg = sfx[i] == '-';
        i++;
    }
    if (i >= n)
        return util_err_set(-EINVAL, QTY_ERR_SUFFIX);
    uint64_t v = 0;
    for (; i < n; i++) {
        if (!is_digit(sfx[i]))
            return util_err_set(-EINVAL, QTY_ERR_SUFFIX);
        unsigned d = (unsigned)(sfx[i] - '0');
        if (v > ((uint64_t)INT64_MAX + 1 - d) / 10)
            return util_err_set(-EINVAL, QTY_ERR_SUFFIX);
        v = v * 10 + d;
    }
    if (!neg && v > (uint64_t)INT64_MAX)
        return util_err_set(-EINVAL, QTY_ERR_SUFFIX);
    /* ... and within it Go's int32(parsed) keeps the low 32 bits:
     * "1E-4294967295" is 1e1. */
    uint64_t as_u = neg ? (uint64_t)0 - v : v;
    *base = 10;
    *exp = (int32_t)(uint32_t)as_u;
    return 0;
}

/* Whether Go parses this digit-less number through inf.Dec (which refuses
 * it) rather than its int64 path (which reads it as 0): ParseQuantity's
 * fast path takes decimal scales down to nano and binary suffixes whose
 * estimated precision stays >= 0 (Ki..Ti). */
static bool qty_digitless_is_error(int base, int32_t exp)
{
    if (base == 10)
        return exp < -9;
    return exp > 40;
}

/* d[first..end) (decimal digits, most significant first) *= 2^shift, in
 * place, for shift <= 60; the buffer has room for the carry in front. A
 * digit times 2^60 plus a carry below 2^60 stays below 10 * 2^60 < 2^64. */
static void digits_shift(unsigned char *d, size_t *first, size_t end, int32_t shift)
{
    uint64_t m = (uint64_t)1 << shift;
    uint64_t carry = 0;
    for (size_t i = end; i > *first; i--) {
        uint64_t v = d[i - 1] * m + carry;
        d[i - 1] = (unsigned char)(v % 10);
        carry = v / 10;
    }
    while (carry != 0) {
        d[--*first] = (unsigned char)(carry % 10);
        carry /= 10;
    }
}

/*
 * |value| rounded away from zero: *mag, or *overflow when it exceeds
 * UINT64_MAX. The value is digits (nd significant ones, no leading or
 * trailing zero) * 10^e10 * 2^e2.
 */
static void qty_magnitude(const qty_parts *q, size_t lead, size_t nd, int64_t e10, int32_t e2,
                          uint64_t *mag, bool *overflow)
{
    *mag = 0;
    *overflow = false;
    /* 10^(nd-1+e10) <= value: from 10^19 on it is beyond int64 (and the
     * callers' caps), whatever 2^e2 adds. */
    if ((int64_t)nd - 1 + e10 >= 19) {
        *overflow = true;
        return;
    }
    /* value < 10^(nd+e10) * 2^60 < 10^(nd+e10+19): below 1, so it rounds
     * up to 1. */
    if ((int64_t)nd + e10 <= -19) {
        *mag = 1;
        return;
    }
    /* Here nd+e10 is within (-19, 20): materialise the digits times 2^e2
     * (at most 19 digits more) and read the integer part. */
    unsigned char small[96];
    size_t room = 20, cap = nd + room;
    unsigned char *d = cap <= sizeof(small) ? small : util_calloc(cap, 1);
    size_t first = room, end = room + nd, k = 0;
    for (size_t i = lead; k < nd; i++) {
        char c = i < q->num_len ? q->num[i] : q->frac[i - q->num_len];
        d[room + k++] = (unsigned char)(c - '0');
    }
    if (e2 > 0)
        digits_shift(d, &first, end, e2);
    size_t len = end - first;
    size_t int_len = len;
    bool frac = false;
    if (e10 < 0) {
        uint64_t drop = (uint64_t)-e10;
        int_len = drop >= len ? 0 : len - (size_t)drop;
        for (size_t i = first + int_len; i < end; i++)
            frac = frac || d[i] != 0;
    }
    uint64_t v = 0;
    for (size_t i = 0; i < int_len && !*overflow; i++) {
        unsigned dig = d[first + i];
        if (v > (UINT64_MAX - dig) / 10)
            *overflow = true;
        else
            v = v * 10 + dig;
    }
    for (int64_t i = 0; i < e10 && !*overflow; i++) {
        if (v > UINT64_MAX / 10)
            *overflow = true;
        else
            v *= 10;
    }
    if (d != small)
        free(d);
    if (!*overflow && frac) {
        if (v == UINT64_MAX)
            *overflow = true;
        else
            v++;
    }
    *mag = v;
}

int util_quantity_parse(const char *s, int64_t *out)
{
    *out = 0;
    if (s == NULL || s[0] == '\0')
        return util_err_set(-EINVAL, QTY_ERR_FORMAT);
    qty_parts q;
    int r = qty_split(s, &q);
    if (r < 0)
        return r;
    int base = 10;
    int32_t exp = 0;
    r = qty_suffix(q.suffix, q.suffix_len, &base, &exp);
    if (r < 0)
        return r;
    if (!q.any_digit && qty_digitless_is_error(base, exp))
        return util_err_set(-EINVAL, QTY_ERR_NUMERIC);

    /* Significant digits of num.frac: skip zeros in front (num has none, a
     * fraction after an empty num may) and move trailing ones into e10. */
    size_t total = q.num_len + q.frac_len, lead = 0, tail = total;
    while (lead < total && (lead < q.num_len ? q.num[lead] : q.frac[lead - q.num_len]) == '0')
        lead++;
    while (tail > lead &&
           (tail - 1 < q.num_len ? q.num[tail - 1] : q.frac[tail - 1 - q.num_len]) == '0')
        tail--;
    if (tail == lead)
        return 0; /* zero, whatever the sign and suffix */
    size_t nd = tail - lead;
    int64_t e10 = (int64_t)(total - tail) - (int64_t)q.frac_len;
    int32_t e2 = 0;
    if (base == 2)
        e2 = exp;
    else
        e10 += exp;

    uint64_t mag = 0;
    bool overflow = false;
    qty_magnitude(&q, lead, nd, e10, e2, &mag, &overflow);
    if (base == 2 || !q.negative) {
        /* Binary: capped at 2^63-1 in magnitude when parsed. Decimal and
         * positive: saturates at INT64_MAX. */
        if (overflow || mag > (uint64_t)INT64_MAX)
            mag = (uint64_t)INT64_MAX;
        *out = q.negative ? -(int64_t)mag : (int64_t)mag;
    } else if (overflow || mag >= (uint64_t)INT64_MAX + 1) {
        *out = INT64_MIN;
    } else {
        *out = -(int64_t)mag;
    }
    return 0;
}

void util_quantity_format(int64_t v, char *buf, size_t len)
{
    if (v == 0) {
        snprintf(buf, len, "0");
        return;
    }
    if (v == INT64_MIN) {
        /* Go's removeInt64Factors cannot negate it and leaves it as is. */
        snprintf(buf, len, "%" PRId64, v);
        return;
    }
    bool neg = v < 0;
    int64_t a = neg ? -v : v;
    const char *suffix = "";
    if (a < 1024) {
        /* BinarySI below 1024 prints as DecimalSI: factors of ten come out
         * in steps of three, which below 1024 can only give "k". */
        int times = 0;
        while (a >= 10 && a % 10 == 0) {
            a /= 10;
            times++;
        }
        if (times % 3 == 1) {
            a *= 10;
            times--;
        } else if (times % 3 == 2) {
            a *= 100;
            times -= 2;
        }
        suffix = times == 3 ? "k" : "";
    } else {
        static const char *const bin[] = {"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"};
        int times = 0;
        while (a >= 1024 && a % 1024 == 0 && times < 6) {
            a /= 1024;
            times++;
        }
        suffix = bin[times];
    }
    snprintf(buf, len, "%s%" PRId64 "%s", neg ? "-" : "", a, suffix);
}
