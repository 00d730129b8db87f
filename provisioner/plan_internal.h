/*
 * plan_internal: helpers shared by the plan*.c files and nobody else
 * (defined in plan_util.c; plan_warn_deprecated in plan.c).
 *
 * - plan_buf: a growable string for messages built piece by piece;
 * - Go formatting: upstream's messages print values with fmt's %q and %v,
 *   so the pieces that appear in them (quoted strings, string slices, maps,
 *   topology terms) are formatted the same way here;
 * - JSON readers that treat a missing key, a JSON null and a value of the
 *   wrong type alike (Go's zero value), and walk objects in sorted key order
 *   so output never depends on hash order.
 */
#ifndef CSISIDECAR_PLAN_INTERNAL_H
#define CSISIDECAR_PLAN_INTERNAL_H

#include "provisioner.h"
#include "kobj/kobj.h"

/* ---- strings ------------------------------------------------------------- */

typedef struct plan_buf {
    char *s;
    size_t len, cap;
} plan_buf;

void plan_buf_addn(plan_buf *b, const char *s, size_t n);
void plan_buf_add(plan_buf *b, const char *s);
void plan_buf_addf(plan_buf *b, const char *fmt, ...) UTIL_ATTR_PRINTF(2, 3);
/* Go's strconv.Quote (fmt %q of a string). */
void plan_buf_add_quoted(plan_buf *b, const char *s);
/* Hands over the string ("" when nothing was added) and resets the buffer. */
char *plan_buf_take(plan_buf *b);
void plan_buf_free(plan_buf *b);

/* Logs upstream's deprecation warning through cfg->warn. */
void plan_warn_deprecated(const prov_config *cfg, const char *old_key, const char *new_key);

/* FNV-1a, 32 bits, as 8 lower-case hex digits (capacity_plan.c). */
void plan_fnv32a_hex(const char *s, char out[9]);

/* ---- JSON ---------------------------------------------------------------- */

/* The keys of an object sorted bytewise; *n gets the count. Free the array
 * (not the keys, which belong to obj). NULL when obj is not an object. */
const char **plan_sorted_keys(const json_object *obj, size_t *n);

/* ---- topology terms ------------------------------------------------------ */

/* One key=value pair of a term; strings are borrowed from the inputs. */
typedef struct plan_seg {
    const char *key;
    const char *value;
} plan_seg;

/* A term: segments ANDed together, kept sorted by key then value. */
typedef struct plan_term {
    plan_seg *segs;
    size_t n;
} plan_term;

/* Go's %v of a term: "[{zone z1} {rack r1}]". */
void plan_buf_add_term(plan_buf *b, const plan_term *t);

#endif
