/*
 * fw_internal.h -- private header of libtorch_standin.so (the framework stand-in).
 *
 * Mimics: the split inside libtorch_cuda between the caching allocator (fw_alloc.c) and the
 * rest of the framework (framework.c: process groups, matmul).  Nothing here is exported.
 */
#ifndef FW_INTERNAL_H
#define FW_INTERNAL_H

#include "fw_standin.h"

#define FW_HIDDEN __attribute__((visibility("hidden")))
#define FW_API __attribute__((visibility("default")))

/* Release the expandable segment's VA reservation if nothing is mapped in it any more. */
FW_HIDDEN int fw_release_va(void);

#endif /* FW_INTERNAL_H */
