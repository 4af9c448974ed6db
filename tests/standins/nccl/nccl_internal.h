/*
 * nccl_internal.h -- private header of the libnccl.so.2 stand-in.
 *
 * Mimics: NCCL's communicator object and its use of the CUDA runtime it links statically
 * (runtime_core.c compiled with -DRT_STATIC, all hidden) plus direct driver calls through the
 * cuGetProcAddress-obtained table (rt_drv) for the cuMem* virtual memory API, like NCCL's
 * cudawrap.  Nothing declared here is exported.
 */
#ifndef NCCL_INTERNAL_H
#define NCCL_INTERNAL_H

#include "../runtime/runtime_internal.h"

#include <pthread.h>
#include <stdint.h>

#define NCCL_API __attribute__((visibility("default")))
#define NCCL_HIDDEN __attribute__((visibility("hidden")))
/* Export `name` as a weak alias of p<name>, as the real library does. */
#define NCCL_ALIAS(name)                                                                           \
    extern __typeof__(p##name) name __attribute__((weak, alias("p" #name), visibility("default")));

#define COMM_MAGIC 0x6e63636cu /* "nccl" */
#define CHANNEL_BYTES 4096
#define PROXY_DEV_BYTES (2u << 20)
#define HOST_BUF_BYTES 4096
#define PROXY_HOST_BYTES (64u << 10)
#define LAZY_BYTES (1u << 20)
#define VMM_GRANULARITY (2ull << 20)

struct ncclComm {
    uint32_t magic;
    int rank, nranks, device, finalized;
    void *channels[2];
    CUdeviceptr proxy_va;
    void *host_buf;
    void *lazy_buf; /* allocated by the first ncclAllReduce */
    pthread_t proxy;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int proxy_ready, proxy_stop;
    cudaError_t proxy_rc;
    struct ncclComm *next;
};

/* Registry of live communicators (so a destroyed one is recognised as invalid). */
NCCL_HIDDEN int comm_valid(ncclComm_t comm);
/* Make `dev` current for this thread (keeping a context already current on it). */
NCCL_HIDDEN ncclResult_t dev_enter(int dev, CUcontext *saved, int *switched);
NCCL_HIDDEN void dev_leave(CUcontext saved, int switched);
/* cuMemCreate + cuMemAddressReserve + cuMemMap + cuMemSetAccess; the handle stays referenced. */
NCCL_HIDDEN ncclResult_t vmm_alloc(int dev, size_t size, CUdeviceptr *va);
NCCL_HIDDEN ncclResult_t cuda_result(cudaError_t e);
/* With NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS unset or naming ALLOC (or ALL): print the line the
 * real NCCL prints for an allocation ("Cuda Alloc Size N pointer P" / "Cuda Host Alloc ..."). */
NCCL_HIDDEN void debug_alloc(int dev, const char *where, int host, size_t size, const void *ptr);
NCCL_HIDDEN ncclResult_t cu_result(CUresult r);

#endif /* NCCL_INTERNAL_H */
