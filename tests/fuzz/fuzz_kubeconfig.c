/*
 * fuzz_kubeconfig: the kubeconfig parser (libyaml document API, every entry
 * type-checked) fed arbitrary bytes as the file. The file is an anonymous
 * memory file read through /proc/self/fd, so nothing lands on disk. Files a
 * config names (CA, token, client cert) are read-only lookups; an exec
 * plugin only runs when a token is asked for, which this target never does.
 */
#include "kube/kube.h"

#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"

static int memfd = -1;
static char memfd_path[64];

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("fuzz-kubeconfig", 0);
        if (memfd < 0)
            return 0;
        (void)snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
    }
    if (ftruncate(memfd, 0) != 0 || pwrite(memfd, data, size, 0) != (ssize_t)size)
        return 0;
    static const char *const masters[] = {NULL, "https://127.0.0.1:6443"};
    for (size_t i = 0; i < 2; i++) {
        kube_config *c = NULL;
        if (kube_config_from_file(memfd_path, masters[i], &c) == 0) {
            (void)kube_config_server(c);
            (void)kube_config_namespace(c);
            (void)kube_config_tls(c);
            kube_config_free(c);
        }
    }
    return 0;
}
