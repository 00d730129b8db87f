/* csi-sidecars: the controller-side sidecars of a driver in one process. */
#include "attacher/attacher.h"
#include "provisioner/provisioner.h"
#include "resizer/resizer.h"
#include "sidecar/sidecar.h"
#include "snapshotter/snapshotter.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

int main(int argc, char **argv)
{
    static const sidecar_module *const mods[] = {&prov_module, &att_module, &rsz_module,
                                                 &snap_module};
    return sidecar_multi_main("csi-sidecars", mods, sizeof(mods) / sizeof(mods[0]), SIDECAR_VERSION,
                              argc, argv);
}
