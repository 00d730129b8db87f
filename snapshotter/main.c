/* csi-snapshotter: the snapshotter module (module.c) as a standalone binary. */
#include "sidecar/sidecar.h"
#include "snapshotter.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

int main(int argc, char **argv)
{
    return sidecar_module_main(&snap_module, SIDECAR_VERSION, argc, argv);
}
