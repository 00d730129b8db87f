/*
 * fuzz_registrar: arbitrary bytes from the kubelet on the registration
 * socket. The first byte picks the call (even: GetInfo, odd:
 * NotifyRegistrationStatus); then come the driver name and the
 * registration path (NUL-separated, what the flags would give) and the
 * request bytes, unpacked as the gRPC server would and, when they unpack,
 * answered by the registrar's own code. Checked: GetInfo's answer packs
 * and unpacks back to the driver, path, type and version given; a status
 * is a rejection exactly when plugin_registered is false, reported once.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "registrar/registrar.h"

#include "fuzz.h"

/* From registrar/kubelet.c (not in its header: only this target needs it). */
bool reg_kubelet__first_rejection(atomic_bool *rejected,
                                  const Pluginregistration__RegistrationStatus *st);

static void same(const char *what, const char *got, const char *want)
{
    if (strcmp(got != NULL ? got : "", want) != 0) {
        fprintf(stderr, "GetInfo %s: got \"%s\", want \"%s\"\n", what, got ? got : "(null)", want);
        abort();
    }
}

static void get_info(const char *driver, const char *endpoint, const uint8_t *p, size_t n)
{
    Pluginregistration__InfoRequest *rq = pluginregistration__info_request__unpack(NULL, n, p);
    if (rq == NULL)
        return;
    Pluginregistration__PluginInfo info;
    char *versions[1];
    reg_info_fill(&info, driver, endpoint, versions);
    size_t len = pluginregistration__plugin_info__get_packed_size(&info);
    uint8_t *buf = malloc(len + 1);
    if (buf == NULL)
        abort();
    if (pluginregistration__plugin_info__pack(&info, buf) != len)
        abort();
    Pluginregistration__PluginInfo *back = pluginregistration__plugin_info__unpack(NULL, len, buf);
    if (back == NULL || back->n_supported_versions != 1) {
        fprintf(stderr, "GetInfo: the answer does not unpack as one PluginInfo\n");
        abort();
    }
    same("type", back->type, "CSIPlugin");
    same("name", back->name, driver);
    same("endpoint", back->endpoint, endpoint);
    same("version", back->supported_versions[0], REG_SUPPORTED_VERSION);
    pluginregistration__plugin_info__free_unpacked(back, NULL);
    free(buf);
    pluginregistration__info_request__free_unpacked(rq, NULL);
}

static void notify(const uint8_t *p, size_t n)
{
    Pluginregistration__RegistrationStatus *st =
        pluginregistration__registration_status__unpack(NULL, n, p);
    if (st == NULL)
        return;
    atomic_bool rejected;
    atomic_init(&rejected, false);
    bool first = reg_kubelet__first_rejection(&rejected, st);
    bool again = reg_kubelet__first_rejection(&rejected, st);
    if (first != !st->plugin_registered || again) {
        fprintf(stderr, "status registered=%d: first rejection %d, again %d\n",
                st->plugin_registered, first, again);
        abort();
    }
    /* The answer the server sends back, whatever the status said. */
    Pluginregistration__RegistrationStatusResponse resp =
        PLUGINREGISTRATION__REGISTRATION_STATUS_RESPONSE__INIT;
    uint8_t out[16];
    if (pluginregistration__registration_status_response__get_packed_size(&resp) > sizeof(out))
        abort();
    pluginregistration__registration_status_response__pack(&resp, out);
    pluginregistration__registration_status__free_unpacked(st, NULL);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    bool status = (data[0] & 1) != 0;
    const uint8_t *rest = NULL;
    size_t rest_len = 0;
    char *driver = fuzz_split(data + 1, size - 1, 0, &rest, &rest_len);
    if (driver == NULL)
        return 0;
    const uint8_t *req = NULL;
    size_t req_len = 0;
    char *endpoint = fuzz_split(rest, rest_len, 0, &req, &req_len);
    if (endpoint != NULL) {
        if (status)
            notify(req, req_len);
        else
            get_info(driver, endpoint, req, req_len);
    }
    free(endpoint);
    free(driver);
    return 0;
}
