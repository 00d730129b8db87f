/* csi-attacher: the attacher module (module.c) as a standalone binary. */
#include "attacher.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

int main(int argc, char **argv)
{
    return sidecar_module_main(&att_module, SIDECAR_VERSION, argc, argv);
}
