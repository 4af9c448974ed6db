/*
 * fw_standin.h -- the API of libtorch_standin.so, the "framework" stand-in (think libtorch_cuda):
 * prototypes for code that links it, and pointer types for workloads that dlopen it RTLD_LOCAL
 * and look the functions up with dlsym, as Python extension modules are loaded.
 */
#ifndef FW_STANDIN_H
#define FW_STANDIN_H

#include "cuda_standin.h"

#define FW_MODE_CACHING 0    /* cudaMalloc of whole 2 MiB segments, freed blocks stay cached */
#define FW_MODE_EXPANDABLE 1 /* one 64 MiB VA reservation, 2 MiB pages mapped as it grows */
#define FW_MODE_ASYNC 2      /* cudaMallocAsync / cudaFreeAsync per tensor */

void *fw_alloc(size_t size, int mode);
int fw_free(void *ptr);                 /* 0, or -1 for an unknown pointer */
int fw_empty_cache(void);               /* 0, or the first CUDA error */
size_t fw_reserved_bytes(void);         /* bytes the framework holds from CUDA */
size_t fw_allocated_bytes(void);        /* bytes of live tensors (rounded to 512) */
int fw_init_process_group(void);        /* ncclGetUniqueId + ncclCommInitRank(1 rank) */
int fw_all_reduce(void *buf, size_t count);
int fw_destroy_process_group(void);
ncclComm_t fw_process_group_comm(void);
int fw_matmul(size_t m, size_t n, size_t k); /* a cuBLAS gemm on the framework's handle */
int fw_shutdown(void); /* destroy the cuBLAS handle, empty the cache, free the VA range */
/* The CUDA calls alone, for an allocator kept by the caller (the Python stand-in of torch). */
int fw_raw_malloc(void **ptr, size_t bytes);
int fw_raw_malloc_async(void **ptr, size_t bytes);
int fw_raw_free_async(void *ptr);

typedef void *(*fw_alloc_fn)(size_t, int);
typedef int (*fw_free_fn)(void *);
typedef int (*fw_void_fn)(void);
typedef size_t (*fw_size_fn)(void);
typedef int (*fw_all_reduce_fn)(void *, size_t);
typedef ncclComm_t (*fw_comm_fn)(void);
typedef int (*fw_matmul_fn)(size_t, size_t, size_t);

#endif /* FW_STANDIN_H */
