/* csi-node-driver-registrar: the registrar module (module.c) as a standalone binary. */
#include "registrar/registrar.h"
#include "sidecar/sidecar.h"

#ifndef SIDECAR_VERSION
#define SIDECAR_VERSION "unknown"
#endif

int main(int argc, char **argv)
{
    return sidecar_module_main(&reg_module, SIDECAR_VERSION, argc, argv);
}
