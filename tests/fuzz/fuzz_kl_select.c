/*
 * fuzz_kl_select: kube-lite's query-string parsers fed arbitrary text: the
 * input up to the first NUL is a label selector, then a field selector,
 * then a bearer token; anything after a third NUL is the object (JSON) the
 * selectors are matched against. Field selectors are checked against every
 * served type.
 */
#include <stdlib.h>

#include "kube-lite/kl.h"

#include "kobj/kobj.h"

#include "fuzz.h"

static const unsigned char key[KL_TOKEN_KEY_LEN] = "0123456789abcdef0123456789abcdef";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)
        return 0;
    const uint8_t *r1 = NULL;
    const uint8_t *r2 = NULL;
    const uint8_t *r3 = NULL;
    size_t n1 = 0;
    size_t n2 = 0;
    size_t n3 = 0;
    char *lsel = fuzz_split(data, size, 0, &r1, &n1);
    char *fsel = fuzz_split(r1, n1, 0, &r2, &n2);
    char *token = fuzz_split(r2, n2, 0, &r3, &n3);
    json_object *obj = fuzz_json(r3, n3);
    if (lsel == NULL || fsel == NULL || token == NULL)
        goto out;

    kl_labelsel *ls = NULL;
    if (kl_labelsel_parse(lsel, &ls) == 0) {
        (void)kl_labelsel_match(ls, kobj_path(obj, "metadata.labels"));
        (void)kl_labelsel_match(ls, NULL);
        kl_labelsel_free(ls);
    }
    kl_fieldsel *fs = NULL;
    if (kl_fieldsel_parse(fsel, &fs) == 0) {
        size_t n_types = 0;
        const kl_type *types = kl_types(&n_types);
        for (size_t i = 0; i < n_types; i++)
            (void)kl_fieldsel_check(fs, &types[i]);
        (void)kl_fieldsel_match(fs, obj);
        (void)kl_fieldsel_name(fs);
        kl_fieldsel_free(fs);
    }
    (void)kl_is_dns1123_subdomain(lsel);
    (void)kl_is_dns1123_label(lsel);
    (void)kl_is_qualified_name(lsel);
    (void)kl_is_label_value(lsel);
    free(kl_qualified_name_msgs(lsel));
    free(kl_label_value_msgs(lsel));
    free(kl_quote(lsel));

    char *ns = NULL;
    char *name = NULL;
    char *uid = NULL;
    if (kl_sa_token_verify(key, token, 1700000000, &ns, &name, &uid) == 0) {
        free(ns);
        free(name);
        free(uid);
    }
out:
    json_object_put(obj);
    free(lsel);
    free(fsel);
    free(token);
    return 0;
}
