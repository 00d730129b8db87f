/*
 * The one csi_handler_fn every route points at, and the Identity service.
 *
 * Each call goes: count it -> injected delay / crash-before / failure ->
 * UTF-8 check -> handler -> commit (state and status on disk) ->
 * crash-after -> the reply leaves when this returns. Committing in one place
 * means no handler can forget it, and a reply never reports a state that a
 * crash could still take back.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cosid.h"
#include "kobj/kobj.h"
#include "obs/obs.h"

static const char *const method_names[COSID_N_METHODS] = {
#define COSID_M_NAME(name) #name,
    COSID_METHODS(COSID_M_NAME)
#undef COSID_M_NAME
};

const char *const *cosid_method_names(void)
{
    return method_names;
}

static void driver_get_info(cosid *d, const ProtobufCMessage *req, csi_reply *reply)
{
    (void)req;
    Cosi__V1alpha1__DriverGetInfoResponse r = COSI__V1ALPHA1__DRIVER_GET_INFO_RESPONSE__INIT;
    r.name = (char *)d->cfg->driver_name;
    csi_reply_ok(reply, &r.base);
}

typedef void (*cosid_handler)(cosid *d, const ProtobufCMessage *req, csi_reply *reply);

static const cosid_handler handlers[COSID_N_METHODS] = {
    [COSID_M_DriverGetInfo] = driver_get_info,
    [COSID_M_DriverCreateBucket] = cosid_create_bucket,
    [COSID_M_DriverDeleteBucket] = cosid_delete_bucket,
    [COSID_M_DriverGrantBucketAccess] = cosid_grant_access,
    [COSID_M_DriverRevokeBucketAccess] = cosid_revoke_access,
};

static int method_index(const char *name)
{
    for (int i = 0; i < COSID_N_METHODS; i++)
        if (strcmp(method_names[i], name) == 0)
            return i;
    return -1;
}

static void injected_delay(cosid *d, util_duration delay)
{
    /* In slices, so that SIGTERM does not wait for a long delay. */
    util_duration end = util_now_mono() + delay;
    while (!atomic_load(&d->stopping)) {
        util_duration left = end - util_now_mono();
        if (left <= 0)
            break;
        util_sleep(left < 50 * UTIL_MS ? left : 50 * UTIL_MS);
    }
}

void cosid_dispatch(void *ud, const char *method, const ProtobufCMessage *req, csi_reply *reply)
{
    cosid *d = ud;
    const char *slash = strrchr(method, '/');
    int m = method_index(slash ? slash + 1 : method);
    if (m < 0) {
        csi_reply_error(reply, CSI_UNIMPLEMENTED, "unknown method %s", method);
        return;
    }
    const char *name = method_names[m];
    if (obs_log_enabled(5, __FILE__)) {
        char *text = csi_msg_to_text(req, 2048); /* credentials come out stripped */
        obs_v(5, "%s %s", name, text);
        free(text);
    }
    cosid_store_count_call(d->store, (cosid_method)m);
    drvkit_fault_action fa;
    drvkit_faults_on_call(d->faults, m, &fa);
    if (fa.delay > 0)
        injected_delay(d, fa.delay);
    if (fa.crash_before) {
        obs_warn("fault injection: exiting before %s takes effect", name);
        _exit(137);
    }
    if (fa.fail_code != CSI_OK)
        csi_reply_error(reply, fa.fail_code, "%s", fa.fail_msg);
    else if (!drvkit_strings_valid(req))
        csi_reply_error(reply, CSI_INVALID_ARGUMENT, "%s: a string field is not valid UTF-8", name);
    else
        handlers[m](d, req, reply);
    cosid_store_commit(d->store);
    if (fa.crash_after) {
        obs_warn("fault injection: exiting after %s took effect, before replying", name);
        _exit(137);
    }
}

/* ---- helpers the handlers share ------------------------------------------------------ */

json_object *cosid_map_to_json(ProtobufCMessage *const *entries, size_t n)
{
    json_object *o = json_object_new_object();
    for (size_t i = 0; i < n; i++) {
        /* Every map<string,string> entry is {key = 1, value = 2}: read them
         * through the descriptor, whichever generated type it is. */
        const ProtobufCMessageDescriptor *desc = entries[i]->descriptor;
        const char *base = (const char *)entries[i];
        const char *k = *(char *const *)(base + desc->fields[0].offset);
        const char *v = *(char *const *)(base + desc->fields[1].offset);
        json_object_object_add(o, k ? k : "", json_object_new_string(v ? v : ""));
    }
    return o;
}

bool cosid_json_map_equal(const json_object *a, const json_object *b)
{
    if (json_object_object_length(a) != json_object_object_length(b))
        return false;
    json_object_object_foreach((json_object *)a, k, v)
    {
        const char *other = kobj_str(b, k);
        if (!other || strcmp(other, json_object_get_string(v)) != 0)
            return false;
    }
    return true;
}

const char *cosid_name_check(const char *name)
{
    if (!name || !*name)
        return "is required";
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return "holds a control character";
    return NULL;
}
