/* Starts gRPC as the sidecars do (csi_grpc_init), then locks two gRPC
 * mutexes in one order and then in the other: no deadlock on one thread,
 * but a cycle to abseil's deadlock detector. With argv[1] "abort" it first
 * sets the detector back to abseil's debug default (kAbort, 2) and its
 * stderr to /dev/null. Exits 0 when the locking went through. */
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <grpc/grpc.h>
#include <grpc/support/sync.h>

#include "csi/csi_internal.h"

#ifdef CSI_ABSL_DEADLOCK_MODE_SYM
void helper_absl_deadlock_mode(int mode) __asm__(CSI_ABSL_DEADLOCK_MODE_SYM);
#endif

int main(int argc, char **argv)
{
    csi_grpc_init();
    if (argc > 1 && strcmp(argv[1], "abort") == 0) {
#ifdef CSI_ABSL_DEADLOCK_MODE_SYM
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDERR_FILENO);
        helper_absl_deadlock_mode(2);
#else
        return 3;
#endif
    }
    gpr_mu a, b;
    gpr_mu_init(&a);
    gpr_mu_init(&b);
    gpr_mu_lock(&a);
    gpr_mu_lock(&b);
    gpr_mu_unlock(&b);
    gpr_mu_unlock(&a);
    gpr_mu_lock(&b);
    gpr_mu_lock(&a);
    gpr_mu_unlock(&a);
    gpr_mu_unlock(&b);
    gpr_mu_destroy(&a);
    gpr_mu_destroy(&b);
    grpc_shutdown_blocking();
    return 0;
}
