/* csi-resizer: the resizer module (module.c) as a standalone binary. */
#include "resizer.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

int main(int argc, char **argv)
{
    return sidecar_module_main(&rsz_module, SIDECAR_VERSION, argc, argv);
}
