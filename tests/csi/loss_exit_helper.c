/* Runs csi_loss_exit with the termination log at argv[1], so a test can
 * check what upstream's exit-on-connection-loss leaves behind. */
#include "csi/csi.h"
#include "obs/obs.h"

int main(int argc, char **argv)
{
    if (argc != 2)
        return 2;
    obs_set_termination_log(argv[1]);
    csi_loss_exit(NULL);
}
