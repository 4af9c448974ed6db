// A probe of what the CUDA runtime asks of the driver on a thread's first stream-ordered
// allocation (PyTorch's autograd thread under its cudaMallocAsync backend showed a driver
// cuMemAllocAsync beside the runtime's cudaMallocAsync of the same pointer: two objects at one
// address). Threads 0 and 1 allocate without setting a device first, threads 2 and 3 after
// cudaSetDevice(0); each makes two allocations and frees one. Prints one line per thread.
#include <cuda_runtime.h>
#include <pthread.h>
#include <stdio.h>

static void *kept[4];

static void *one(void *arg) {
    long i = (long)arg;
    if (i >= 2) cudaSetDevice(0);
    void *p = nullptr;
    int rc1 = (int)cudaMallocAsync(&p, 2 << 20, 0);
    int rc2 = (int)cudaMallocAsync(&kept[i], 2 << 20, 0);
    int rc3 = (int)cudaFreeAsync(p, 0);
    int rc4 = (int)cudaStreamSynchronize(0);
    printf("thread %ld: %d %d %d %d\n", i, rc1, rc2, rc3, rc4);
    return nullptr;
}

int main() {
    void *m = nullptr;
    int rc = (int)cudaMallocAsync(&m, 1 << 20, 0);
    rc |= (int)cudaFreeAsync(m, 0);
    for (long i = 0; i < 4; i++) {
        pthread_t t;
        pthread_create(&t, nullptr, one, (void *)i);
        pthread_join(t, nullptr);
    }
    for (int i = 0; i < 4; i++) rc |= (int)cudaFreeAsync(kept[i], 0);
    rc |= (int)cudaDeviceSynchronize();
    printf("main: %d\n", rc);
    return rc != 0;
}
