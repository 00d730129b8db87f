/*
 * kobj: reading and patching Kubernetes objects held as json-c trees.
 *
 * Everything a sidecar reads comes from the API server, the driver or a
 * file, so no value is trusted to have the type the schema promises. Every
 * getter here checks the JSON type before it touches a value and answers
 * NULL (or the given default) for a missing key, a JSON null and a value of
 * the wrong type alike, which is Go's zero value for the field. Every setter
 * checks the type of each container it writes into and refuses (-EINVAL)
 * rather than let json-c assert on, say, a `metadata` that is a string.
 *
 * The JSON-patch builders return RFC 6902 texts for the finalizer changes
 * every controller makes: values are escaped by json-c, never pasted into a
 * format string.
 *
 * This module holds no state; all functions are thread-safe on distinct
 * objects and on the same object for readers.
 */
#ifndef CSISIDECAR_KOBJ_H
#define CSISIDECAR_KOBJ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <json-c/json.h>

/* ---- typed getters ---------------------------------------------------------- */

/* `o` itself when it is of type `t`, else NULL (also for o == NULL). */
json_object *kobj_typed(const json_object *o, json_type t);
/* Member `key` of the object `o` whatever its type (NULL when `o` is no
 * object, the key is missing or its value is JSON null). */
json_object *kobj_get(const json_object *o, const char *key);
/* Member `key` when it is an object / array / string, else NULL. */
json_object *kobj_obj(const json_object *o, const char *key);
json_object *kobj_arr(const json_object *o, const char *key);
const char *kobj_str(const json_object *o, const char *key);
/* Member `key` when it is a boolean, else `dflt`. */
bool kobj_bool(const json_object *o, const char *key, bool dflt);
/* Member `key` when it is an integer (a double with an integral value in
 * range counts too): 0 and *out set; -ENOENT when missing or null; -EINVAL
 * for another type. */
int kobj_int64(const json_object *o, const char *key, int64_t *out);

/* Walks a dot-separated path of object members ("spec.csi.volumeHandle"):
 * NULL when a step is missing, null or not an object (the last step may be
 * any type). */
json_object *kobj_path(const json_object *o, const char *path);
/* The string at `path`, or NULL. */
const char *kobj_path_str(const json_object *o, const char *path);

/* Arrays: the length (0 when `a` is no array) and item i (NULL when `a` is
 * no array, i is out of range or the item is null). */
size_t kobj_len(const json_object *a);
json_object *kobj_at(const json_object *a, size_t i);
/* Item i when it is a string, else NULL. */
const char *kobj_str_at(const json_object *a, size_t i);

/*
 * Checks the JSON types of the fields `rules` names (NULL-ended), as Go's
 * decoder does when it fills a typed struct: one wrong type and the whole
 * object is refused. A rule is a type letter, a space and a dot-separated
 * path; "[]" after a segment applies the rest to each item of that array.
 * Types: s string (of at most 1.5 MiB, as in m and l), n name (a string of at most 253 bytes, the
 * longest name or UID an API server stores), t time (RFC 3339, as Go's metav1.Time reads it: "" or
 * any other text fails the whole object), b boolean, i integer (an int64 as kobj_int64 reads it), o
 * object, a array, m object of strings, l array of strings, r a string the API server's validation
 * requires. A missing or null field passes (Go's zero value), but for r (an empty map for a
 * claim's requests is a lie of the right type, which made a grown claim look never grown) and for
 * an upper-case letter: the lower-case type, never null there nor among its values or items. An
 * API server omits an empty omitempty field and prunes the nulls of a CRD's fields that are not
 * nullable, so a null there is a lie (a claim's resize status read as "no resize under way" and
 * csi-resizer expanded again; a deleting content's null status read as "no snapshot to delete").
 * 0, or -EINVAL with util_err_last() naming the first bad path.
 */
int kobj_check(const json_object *o, const char *const *rules);

/* ---- metadata ------------------------------------------------------------------ */

json_object *kobj_meta(const json_object *o);                     /* metadata, or NULL */
const char *kobj_meta_str(const json_object *o, const char *key); /* metadata.<key> string */
const char *kobj_name(const json_object *o);
const char *kobj_namespace(const json_object *o);
const char *kobj_uid(const json_object *o);
const char *kobj_rv(const json_object *o); /* metadata.resourceVersion */
/* True when metadata.deletionTimestamp is set (any non-null value). */
bool kobj_deleting(const json_object *o);
const char *kobj_annotation(const json_object *o, const char *key);
const char *kobj_label(const json_object *o, const char *key);

/* Index of `fin` in metadata.finalizers, or -1 (non-string items are
 * skipped, never compared). */
int kobj_finalizer_index(const json_object *o, const char *fin);
bool kobj_has_finalizer(const json_object *o, const char *fin);

/* ---- hash tables ----------------------------------------------------------------- */

/*
 * json-c's hash tables only grow. After a burst, a table that holds few
 * entries again is rebuilt at a size fit for them (never below min_size),
 * so the bucket array the burst grew goes back to the allocator. Entries,
 * keys and values stay as they are. The caller holds the table's lock.
 */
void kobj_table_shrink(struct lh_table *t, int min_size);

/* ---- setters --------------------------------------------------------------------- */

/*
 * Member `key` of `o` as an object, created (empty) when missing or null.
 * NULL when `o` is no object or `key` holds a value of another type: the
 * caller reports the object as malformed instead of overwriting data.
 */
json_object *kobj_ensure_obj(json_object *o, const char *key);
/* Sets member `key` of the object `o` to `val`, taking ownership of `val`
 * in every case (it is released on failure). -EINVAL when `o` is no object. */
int kobj_set(json_object *o, const char *key, json_object *val);
int kobj_set_str(json_object *o, const char *key, const char *s);
/* metadata.annotations[key] / metadata.labels[key] = value, creating the
 * maps as needed; -EINVAL when `o`, metadata or the map has a wrong type. */
int kobj_set_annotation(json_object *o, const char *key, const char *value);
int kobj_set_label(json_object *o, const char *key, const char *value);
/* Deletes member `key` when `o` is an object (a no-op otherwise). */
void kobj_del(json_object *o, const char *key);

/* ---- JSON patches (RFC 6902), malloc'ed texts ------------------------------------ */

/*
 * Adds `fin` to metadata.finalizers of the object whose cached state is `o`:
 * `add /metadata/finalizers/-` when the list exists; when it is absent or
 * null, `add` of the whole list `[fin]`, guarded (without `test_rv`) by a
 * `test` that the list is still null, as upstream's attacher does (the API
 * server's `test` treats a missing member as null). With `test_rv`, a
 * leading `test` of metadata.resourceVersion makes the patch fail (422)
 * when the object changed since it was read. NULL when `o` has no metadata
 * object, its finalizers are neither an array nor absent/null, or `test_rv`
 * is set and it has no resourceVersion.
 */
char *kobj_patch_add_finalizer(const json_object *o, const char *fin, bool test_rv);
/*
 * `test /metadata/finalizers/<i> == fin` then `remove` of that entry: safe
 * against concurrent changes to the list (a stale index fails the test).
 */
char *kobj_patch_remove_finalizer_at(int i, const char *fin);
/* The same for the index of `fin` in `o`; NULL when `o` lacks it. */
char *kobj_patch_remove_finalizer(const json_object *o, const char *fin);

/*
 * Sets metadata.annotations[key] = value: `add` of that one entry when the
 * map exists, of the whole map {key: value} when it is absent or null; with
 * `test_rv` behind a `test` of metadata.resourceVersion. NULL when `o` has
 * no metadata object, the map has another type, or `test_rv` is set and it
 * has no resourceVersion.
 */
char *kobj_patch_set_annotation(const json_object *o, const char *key, const char *value,
                                bool test_rv);

/* RFC 6901 escaping of one path segment ("~" -> "~0", "/" -> "~1"); the
 * caller frees. For annotation and label keys in patch paths. */
char *kobj_pointer_escape(const char *segment);

/* ---- JSON text (json.c) ------------------------------------------------------------ */

/* Containers nested deeper than this are refused: parsing recurses. */
#define KOBJ_JSON_DEPTH 64

/*
 * Parses the JSON value at the start of text[0..len) (leading whitespace
 * skipped) into a json-c tree: 0 with *out (NULL for a JSON null) and
 * *used, the bytes up to the value's end; -EAGAIN when the text ends
 * inside the value; -EINVAL for bad JSON, with util_err_last() naming the
 * byte. Strict JSON as json-c's strict mode reads it (see json.c).
 */
int kobj_parse(const char *text, size_t len, size_t *used, json_object **out);
/* The tree of a text that is one value and whitespace; NULL for anything
 * else (bad JSON, trailing text, a JSON null), util_err_last() saying why. */
json_object *kobj_parse_text(const char *text, size_t len);
/* Compact JSON text of `o` (NULL: "null"), "/" left as it is, a byte of a
 * string that is not UTF-8 written as \ufffd (as Go writes it); the caller
 * frees. *len (may be NULL) gets its length. */
char *kobj_to_text(const json_object *o, size_t *len);

/*
 * Finds where an object or array in a stream ends without parsing it, so a
 * value that arrives in pieces is parsed once, whole. Feed the pieces in
 * order to kobj_frame_scan(): it answers the bytes of this piece up to and
 * including the value's last byte, 0 when the value goes on, or -EINVAL
 * when the stream holds something that is not an object or array or nests
 * deeper than KOBJ_JSON_DEPTH. Start each value with kobj_frame_init().
 */
typedef struct {
    int depth;
    bool in_str, esc;
} kobj_frame;
void kobj_frame_init(kobj_frame *f);
long kobj_frame_scan(kobj_frame *f, const char *p, size_t n);

/* Compares two resourceVersions as the decimal integers kube-apiserver
 * writes (of any length): <0, 0, >0; -2 when either is missing or not
 * digits (another server's opaque version: no order is known). */
int kobj_rv_cmp(const char *a, const char *b);

#endif
