/*
 * fuzz_kobj: the JSON accessor module fed any JSON value as an object.
 * Every getter, setter and patch builder must answer (a value, NULL, a
 * default or -EINVAL) without touching a value of the wrong type: json-c
 * asserts on, say, an object_add to a string.
 */
#include "kobj/kobj.h"

#include <stdlib.h>

#include "fuzz.h"

static const char *const keys[] = {"metadata", "spec", "status", "items", "name", "", "a.b"};
static const char *const paths[] = {
    "metadata.name", "spec.csi.volumeHandle", "status.attached", "metadata", "a..b", "."};

static void read_all(const json_object *o)
{
    for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
        (void)kobj_get(o, keys[k]);
        (void)kobj_obj(o, keys[k]);
        (void)kobj_arr(o, keys[k]);
        (void)kobj_str(o, keys[k]);
        (void)kobj_bool(o, keys[k], true);
        int64_t v = 0;
        (void)kobj_int64(o, keys[k], &v);
        json_object *a = kobj_get(o, keys[k]);
        size_t n = kobj_len(a);
        for (size_t i = 0; i <= n && i < 64; i++) {
            (void)kobj_at(a, i);
            (void)kobj_str_at(a, i);
        }
    }
    for (size_t p = 0; p < sizeof(paths) / sizeof(paths[0]); p++) {
        (void)kobj_path(o, paths[p]);
        (void)kobj_path_str(o, paths[p]);
    }
    (void)kobj_typed(o, json_type_object);
    (void)kobj_meta(o);
    (void)kobj_meta_str(o, "generateName");
    (void)kobj_name(o);
    (void)kobj_namespace(o);
    (void)kobj_uid(o);
    (void)kobj_rv(o);
    (void)kobj_deleting(o);
    (void)kobj_annotation(o, "a");
    (void)kobj_label(o, "l");
    (void)kobj_finalizer_index(o, "f");
    (void)kobj_has_finalizer(o, "f");
}

static void patches(const json_object *o)
{
    static const bool rv[] = {false, true};
    for (size_t i = 0; i < 2; i++) {
        free(kobj_patch_add_finalizer(o, "example.com/f", rv[i]));
        free(kobj_patch_set_annotation(o, "a/b~c", "v\"\n", rv[i]));
    }
    free(kobj_patch_remove_finalizer(o, "f"));
    free(kobj_patch_remove_finalizer(o, "example.com/f"));
    free(kobj_patch_remove_finalizer_at(kobj_finalizer_index(o, "f"), "f"));
}

static void write_all(json_object *o)
{
    (void)kobj_ensure_obj(o, "metadata");
    (void)kobj_ensure_obj(o, "spec");
    (void)kobj_set_annotation(o, "a", "1");
    (void)kobj_set_label(o, "l", "2");
    (void)kobj_set_str(o, "kind", "Fuzz");
    (void)kobj_set(o, "status", json_object_new_object());
    (void)kobj_set(o, "extra", json_object_new_int(1));
    kobj_del(o, "spec");
    kobj_del(o, "missing");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *seg = fuzz_cstr(data, size < 64 ? size : 64);
    free(kobj_pointer_escape(seg != NULL ? seg : ""));
    free(seg);

    json_object *o = fuzz_json(data, size);
    if (o == NULL)
        return 0;
    read_all(o);
    patches(o);
    /* Writes go to a deep copy, then the copy is read again. */
    json_object *copy = NULL;
    if (json_object_deep_copy(o, &copy, NULL) == 0 && copy != NULL) {
        write_all(copy);
        read_all(copy);
        patches(copy);
        /* Each member as an object in its own right. */
        if (json_object_is_type(copy, json_type_object)) {
            json_object_object_foreach(copy, k, v)
            {
                (void)k;
                read_all(v);
                patches(v);
            }
        }
    }
    json_object_put(copy);
    json_object_put(o);
    return 0;
}
