/*
 * nccl.c -- communicators, collectives and groups of the libnccl.so.2 stand-in.
 *
 * Mimics: NCCL 2.28, which links the CUDA runtime STATICALLY (its own hidden copy, so its
 * cudaMalloc never reaches a symbol hook on libcudart) and reaches the driver through
 * dlopen("libcuda.so.1") + dlsym("cuGetProcAddress_v2") + gpa("cuGetProcAddress").  Each
 * communicator init allocates, in this order: 2 channel buffers of 4096 bytes (static
 * cudaMalloc -> cuMemAlloc_v2), one 2 MiB proxy buffer (cuMemCreate + cuMemAddressReserve +
 * cuMemMap + cuMemSetAccess), one 4096-byte host buffer (cudaHostAlloc -> cuMemHostAlloc), then
 * starts one proxy thread that allocates a 64 KiB host buffer (cuMemHostAlloc) and lives until
 * destroy/abort.  The first ncclAllReduce allocates a 1 MiB buffer (cudaMalloc) kept until
 * destroy.  Destroy/abort free everything (the VMM buffer with NCCL's pattern: retain handle,
 * release twice, unmap, free the address range); STANDIN_NCCL_LEAK_ON_DESTROY=1 makes them forget
 * the 1 MiB buffer (a planted orphan).  As in the real library, every public nccl* name is a WEAK
 * alias of a GLOBAL pnccl* symbol, and NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=ALLOC prints a
 * "Cuda Alloc Size N pointer P" / "Cuda Host Alloc Size N pointer P" line for each allocation.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "nccl_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t comms_mu = PTHREAD_MUTEX_INITIALIZER;
static struct ncclComm *comms;
static unsigned id_counter;
static __thread int group_depth;

static void comms_lock(void) { pthread_mutex_lock(&comms_mu); }
static void comms_unlock(void) { pthread_mutex_unlock(&comms_mu); }

__attribute__((constructor)) static void nccl_ctor(void)
{
    pthread_atfork(comms_lock, comms_unlock, comms_unlock);
}

NCCL_HIDDEN ncclResult_t cuda_result(cudaError_t e)
{
    return e == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError;
}

NCCL_HIDDEN ncclResult_t cu_result(CUresult r)
{
    return r == CUDA_SUCCESS ? ncclSuccess : ncclUnhandledCudaError;
}

NCCL_HIDDEN void debug_alloc(int dev, const char *where, int host, size_t size, const void *ptr)
{
    const char *lvl = getenv("NCCL_DEBUG"), *sub = getenv("NCCL_DEBUG_SUBSYS");
    if (!lvl || (strcasecmp(lvl, "INFO") != 0 && strcasecmp(lvl, "TRACE") != 0))
        return;
    if (sub && *sub && !strcasestr(sub, "ALLOC") && !strcasestr(sub, "ALL"))
        return;
    char host_name[64] = "localhost";
    gethostname(host_name, sizeof host_name - 1);
    printf("%s:%d:%d [%d] NCCL INFO %s Cuda %sAlloc Size %zu pointer %p\n", host_name, (int)getpid(),
           (int)syscall(SYS_gettid), dev, where, host ? "Host " : "", size, ptr);
    fflush(stdout);
}

NCCL_HIDDEN int comm_valid(ncclComm_t comm)
{
    int ok = 0;
    comms_lock();
    for (struct ncclComm *c = comms; c; c = c->next)
        if (c == comm && c->magic == COMM_MAGIC)
            ok = 1;
    comms_unlock();
    return ok;
}

NCCL_HIDDEN ncclResult_t dev_enter(int dev, CUcontext *saved, int *switched)
{
    *switched = 0;
    cudaError_t e = rt_ensure();
    if (e != cudaSuccess)
        return cuda_result(e);
    CUdevice cur;
    *saved = NULL;
    rt_drv.cuCtxGetCurrent(saved);
    if (*saved && rt_drv.cuCtxGetDevice(&cur) == CUDA_SUCCESS && cur == dev)
        return ncclSuccess;
    if ((e = cudaSetDevice(dev)) != cudaSuccess)
        return cuda_result(e);
    *switched = 1;
    return ncclSuccess;
}

NCCL_HIDDEN void dev_leave(CUcontext saved, int switched)
{
    if (switched)
        rt_drv.cuCtxSetCurrent(saved);
}

NCCL_HIDDEN ncclResult_t vmm_alloc(int dev, size_t size, CUdeviceptr *va)
{
    CUmemAllocationProp prop;
    memset(&prop, 0, sizeof prop);
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    CUmemGenericAllocationHandle h;
    CUresult r = rt_drv.cuMemCreate(&h, size, &prop, 0);
    if (r != CUDA_SUCCESS)
        return cu_result(r);
    if ((r = rt_drv.cuMemAddressReserve(va, size, 0, 0, 0)) != CUDA_SUCCESS) {
        rt_drv.cuMemRelease(h);
        return cu_result(r);
    }
    if ((r = rt_drv.cuMemMap(*va, size, 0, h, 0)) != CUDA_SUCCESS) {
        rt_drv.cuMemAddressFree(*va, size);
        rt_drv.cuMemRelease(h);
        return cu_result(r);
    }
    CUmemAccessDesc ad = {{CU_MEM_LOCATION_TYPE_DEVICE, dev}, CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
    return cu_result(rt_drv.cuMemSetAccess(*va, size, &ad, 1));
}

/* ------------------------------------------------------------------ proxy thread */
static void *proxy_main(void *arg)
{
    struct ncclComm *c = arg;
    void *buf = NULL;
    cudaError_t e = cudaSetDevice(c->device);
    if (e == cudaSuccess)
        e = cudaHostAlloc(&buf, PROXY_HOST_BYTES, cudaHostAllocDefault);
    if (e == cudaSuccess)
        debug_alloc(c->device, "proxy.cc:1556", 1, PROXY_HOST_BYTES, buf);
    pthread_mutex_lock(&c->mu);
    c->proxy_rc = e;
    c->proxy_ready = 1;
    pthread_cond_broadcast(&c->cv);
    while (!c->proxy_stop)
        pthread_cond_wait(&c->cv, &c->mu);
    pthread_mutex_unlock(&c->mu);
    if (buf)
        cudaFreeHost(buf);
    return NULL;
}

static void proxy_stop(struct ncclComm *c)
{
    pthread_mutex_lock(&c->mu);
    c->proxy_stop = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    pthread_join(c->proxy, NULL);
}

/* ------------------------------------------------------------------ init / teardown */
static void comm_release_resources(struct ncclComm *c, int leak_lazy)
{
    if (c->lazy_buf && !leak_lazy)
        cudaFree(c->lazy_buf);
    for (int i = 0; i < 2; i++)
        if (c->channels[i])
            cudaFree(c->channels[i]);
    if (c->proxy_va) {
        CUmemGenericAllocationHandle h;
        if (rt_drv.cuMemRetainAllocationHandle(&h, (void *)(uintptr_t)c->proxy_va) ==
            CUDA_SUCCESS) {
            rt_drv.cuMemRelease(h);
            rt_drv.cuMemRelease(h);
        }
        rt_drv.cuMemUnmap(c->proxy_va, PROXY_DEV_BYTES);
        rt_drv.cuMemAddressFree(c->proxy_va, PROXY_DEV_BYTES);
    }
    if (c->host_buf)
        cudaFreeHost(c->host_buf);
}

static ncclResult_t comm_create(int nranks, int rank, int dev, ncclComm_t *out)
{
    struct ncclComm *c = calloc(1, sizeof *c);
    if (!c)
        return ncclSystemError;
    c->magic = COMM_MAGIC;
    c->rank = rank;
    c->nranks = nranks;
    c->device = dev;
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->cv, NULL);
    CUcontext saved;
    int switched;
    ncclResult_t res = dev_enter(dev, &saved, &switched);
    if (res != ncclSuccess)
        goto fail;
    for (int i = 0; i < 2 && res == ncclSuccess; i++) {
        res = cuda_result(cudaMalloc(&c->channels[i], CHANNEL_BYTES));
        if (res == ncclSuccess)
            debug_alloc(dev, "channel.cc:42", 0, CHANNEL_BYTES, c->channels[i]);
    }
    if (res == ncclSuccess)
        res = vmm_alloc(dev, PROXY_DEV_BYTES, &c->proxy_va);
    if (res == ncclSuccess)
        debug_alloc(dev, "proxy.cc:1302", 0, PROXY_DEV_BYTES, (void *)(uintptr_t)c->proxy_va);
    if (res == ncclSuccess)
        res = cuda_result(cudaHostAlloc(&c->host_buf, HOST_BUF_BYTES, cudaHostAllocDefault));
    if (res == ncclSuccess)
        debug_alloc(dev, "init.cc:1994", 1, HOST_BUF_BYTES, c->host_buf);
    if (res == ncclSuccess && pthread_create(&c->proxy, NULL, proxy_main, c) != 0)
        res = ncclSystemError;
    if (res == ncclSuccess) {
        pthread_mutex_lock(&c->mu);
        while (!c->proxy_ready)
            pthread_cond_wait(&c->cv, &c->mu);
        pthread_mutex_unlock(&c->mu);
        if (c->proxy_rc != cudaSuccess) {
            proxy_stop(c);
            res = ncclUnhandledCudaError;
        }
    }
    if (res != ncclSuccess) {
        comm_release_resources(c, 0);
        dev_leave(saved, switched);
        goto fail;
    }
    dev_leave(saved, switched);
    comms_lock();
    c->next = comms;
    comms = c;
    comms_unlock();
    *out = c;
    return ncclSuccess;
fail:
    free(c);
    return res;
}

static ncclResult_t comm_teardown(ncclComm_t comm)
{
    comms_lock();
    struct ncclComm **pp = &comms;
    while (*pp && *pp != comm)
        pp = &(*pp)->next;
    if (!*pp || comm->magic != COMM_MAGIC) {
        comms_unlock();
        return ncclInvalidArgument;
    }
    *pp = comm->next;
    comms_unlock();
    proxy_stop(comm);
    const char *leak = getenv("STANDIN_NCCL_LEAK_ON_DESTROY");
    CUcontext saved;
    int switched;
    ncclResult_t res = dev_enter(comm->device, &saved, &switched);
    comm_release_resources(comm, leak && *leak && strcmp(leak, "0") != 0);
    dev_leave(saved, switched);
    comm->magic = 0;
    pthread_mutex_destroy(&comm->mu);
    pthread_cond_destroy(&comm->cv);
    free(comm);
    return res;
}

/* ------------------------------------------------------------------ API */
NCCL_API ncclResult_t pncclGetVersion(int *version)
{
    if (!version)
        return ncclInvalidArgument;
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}

NCCL_API const char *pncclGetErrorString(ncclResult_t result)
{
    switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
    case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
    case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
    case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
    case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
    }
}

NCCL_API ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
    if (!uniqueId)
        return ncclInvalidArgument;
    memset(uniqueId, 0, sizeof *uniqueId);
    memcpy(uniqueId->internal, "VTNCCLID", 8);
    unsigned n = __atomic_add_fetch(&id_counter, 1, __ATOMIC_RELAXED);
    memcpy(uniqueId->internal + 8, &n, sizeof n);
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                             int rank, ncclConfig_t *config)
{
    (void)config;
    (void)commId; /* a real rank would bootstrap with its peers through this id */
    if (!comm || nranks < 1 || rank < 0 || rank >= nranks)
        return ncclInvalidArgument;
    cudaError_t e = rt_ensure();
    int dev = 0;
    if (e == cudaSuccess)
        e = cudaGetDevice(&dev);
    if (e != cudaSuccess)
        return cuda_result(e);
    return comm_create(nranks, rank, dev, comm);
}

NCCL_API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return pncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}

NCCL_API ncclResult_t pncclCommInitAll(ncclComm_t *comms_out, int ndev, const int *devlist)
{
    if (!comms_out || ndev < 1)
        return ncclInvalidArgument;
    for (int i = 0; i < ndev; i++) {
        ncclResult_t res = comm_create(ndev, i, devlist ? devlist[i] : i, &comms_out[i]);
        if (res != ncclSuccess) {
            while (i-- > 0)
                comm_teardown(comms_out[i]);
            return res;
        }
    }
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                    ncclConfig_t *config)
{
    (void)key;
    (void)config;
    if (!comm_valid(comm) || !newcomm || (color < 0 && color != NCCL_SPLIT_NOCOLOR))
        return ncclInvalidArgument;
    if (color == NCCL_SPLIT_NOCOLOR) {
        *newcomm = NULL;
        return ncclSuccess;
    }
    return comm_create(1, 0, comm->device, newcomm);
}

NCCL_API ncclResult_t pncclCommFinalize(ncclComm_t comm)
{
    if (!comm_valid(comm))
        return ncclInvalidArgument;
    comm->finalized = 1; /* frees nothing: ncclCommDestroy does */
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    return comm_teardown(comm);
}

NCCL_API ncclResult_t pncclCommAbort(ncclComm_t comm)
{
    if (!comm)
        return ncclSuccess;
    return comm_teardown(comm);
}

NCCL_API ncclResult_t pncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm_valid(comm) || !count)
        return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm_valid(comm) || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm_valid(comm) || !device)
        return ncclInvalidArgument;
    *device = comm->device;
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                    cudaStream_t stream)
{
    (void)stream;
    if (!comm_valid(comm) || datatype < ncclInt8 || datatype > ncclBfloat16 || op < ncclSum ||
        op > ncclAvg || (count && (!sendbuff || !recvbuff)))
        return ncclInvalidArgument;
    if (comm->lazy_buf)
        return ncclSuccess;
    CUcontext saved;
    int switched;
    ncclResult_t res = dev_enter(comm->device, &saved, &switched);
    if (res == ncclSuccess)
        res = cuda_result(cudaMalloc(&comm->lazy_buf, LAZY_BYTES));
    if (res == ncclSuccess)
        debug_alloc(comm->device, "enqueue.cc:2245", 0, LAZY_BYTES, comm->lazy_buf);
    dev_leave(saved, switched);
    return res;
}

NCCL_API ncclResult_t pncclGroupStart(void)
{
    group_depth++;
    return ncclSuccess;
}

NCCL_API ncclResult_t pncclGroupEnd(void)
{
    if (group_depth == 0)
        return ncclInvalidUsage;
    group_depth--;
    return ncclSuccess;
}

/* Like the real libnccl.so.2: the public names are WEAK aliases of GLOBAL pnccl* symbols (the
 * profiling interface). */
NCCL_ALIAS(ncclGetVersion)
NCCL_ALIAS(ncclGetErrorString)
NCCL_ALIAS(ncclGetUniqueId)
NCCL_ALIAS(ncclCommInitRankConfig)
NCCL_ALIAS(ncclCommInitRank)
NCCL_ALIAS(ncclCommInitAll)
NCCL_ALIAS(ncclCommSplit)
NCCL_ALIAS(ncclCommFinalize)
NCCL_ALIAS(ncclCommDestroy)
NCCL_ALIAS(ncclCommAbort)
NCCL_ALIAS(ncclCommCount)
NCCL_ALIAS(ncclCommUserRank)
NCCL_ALIAS(ncclCommCuDevice)
NCCL_ALIAS(ncclAllReduce)
NCCL_ALIAS(ncclGroupStart)
NCCL_ALIAS(ncclGroupEnd)
