/*
 * framework.c -- process groups, matmul and shutdown of libtorch_standin.so, the framework
 * stand-in.
 *
 * Mimics: libtorch_cuda, which has DT_NEEDED on libcudart, libnccl and libcublas and is loaded
 * by Python with dlopen(RTLD_LOCAL), so NCCL ends up in a local scope that dlsym(RTLD_NEXT) from
 * a preloaded tracer cannot see.  fw_init_process_group is torch.distributed's single-rank
 * init_process_group("nccl") (ncclGetUniqueId + ncclCommInitRank), fw_all_reduce one all-reduce,
 * fw_matmul a cuBLAS GEMM on a handle the framework keeps (its workspace belongs to libcublas).
 */
#include "fw_internal.h"

#include <stddef.h>

static ncclComm_t pg;
static cublasHandle_t blas;

FW_API int fw_init_process_group(void)
{
    ncclUniqueId id;
    ncclResult_t r = ncclGetUniqueId(&id);
    if (r != ncclSuccess)
        return r;
    return ncclCommInitRank(&pg, 1, id, 0);
}

FW_API int fw_all_reduce(void *buf, size_t count)
{
    return ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, pg, NULL);
}

FW_API int fw_destroy_process_group(void)
{
    ncclResult_t r = ncclCommDestroy(pg);
    pg = NULL;
    return r;
}

FW_API ncclComm_t fw_process_group_comm(void) { return pg; }

FW_API int fw_matmul(size_t m, size_t n, size_t k)
{
    if (!blas) {
        cublasStatus_t s = cublasCreate_v2(&blas);
        if (s != CUBLAS_STATUS_SUCCESS)
            return s;
    }
    return cublasStandinGemm(blas, m, n, k);
}

FW_API int fw_shutdown(void)
{
    int rc = 0;
    if (blas) {
        rc = cublasDestroy_v2(blas);
        blas = NULL;
    }
    int e = fw_empty_cache();
    if (!rc)
        rc = e;
    e = fw_release_va();
    return rc ? rc : e;
}
