/* nvJPEG (client/lib/image/nvjpeg.c): where the library and a GPU are present, a JPEG decoded into
 * device memory matches the CPU decode (client/lib/image/image.c) within a mean absolute difference
 * of 3 (of 255: the IDCT and chroma upsampling differ); a truncated file fails. Skips, saying why,
 * where nvJPEG or the GPU is missing (the CUDA runtime is loaded with dlopen, as cuda.c does). */
#include "image.h"
#include "jpegenc.h"
#include "nvjpeg.h"
#include "testlib.h"

#include "dscache.h"

#include <dlfcn.h>
#include <math.h>

int main(void) {
    char why[256];
    dsc_nvjpeg_t *nv = NULL;
    int rc = dsc__nvjpeg_open(&nv, why, sizeof why);
    if (rc == DSC_ENOTSUP || rc == DSC_ENODEVICE)
        SKIP("%s", why);
    REQUIRE(rc == 0);
    void *cudart = dlopen("libcudart.so.13", RTLD_NOW);
    if (!cudart)
        cudart = dlopen("libcudart.so.12", RTLD_NOW);
    if (!cudart)
        cudart = dlopen("libcudart.so", RTLD_NOW);
    if (!cudart) {
        dsc__nvjpeg_close(nv);
        SKIP("no CUDA runtime (libcudart) to allocate device memory");
    }
    int (*cuda_malloc)(void **, size_t) = (int (*)(void **, size_t))dlsym(cudart, "cudaMalloc");
    int (*cuda_free)(void *) = (int (*)(void *))dlsym(cudart, "cudaFree");
    int (*cuda_memcpy)(void *, const void *, size_t, int) =
        (int (*)(void *, const void *, size_t, int))dlsym(cudart, "cudaMemcpy");
    int (*cuda_sync)(void) = (int (*)(void))dlsym(cudart, "cudaDeviceSynchronize");
    REQUIRE(cuda_malloc && cuda_free && cuda_memcpy && cuda_sync);

    enum { W = 320, H = 240 };
    uint8_t *rgb = malloc(W * H * 3);
    REQUIRE(rgb);
    for (int y = 0; y < H; y++)
        for (int x = 0; x < W; x++) {
            uint8_t *p = rgb + ((size_t)y * W + x) * 3;
            p[0] = (uint8_t)(x * 255 / (W - 1));
            p[1] = (uint8_t)(y * 255 / (H - 1));
            p[2] = (uint8_t)(128 + 100 * sin(x / 20.0));
        }
    dsc_image_ctx_t *ctx = NULL;
    REQUIRE(dsc__image_ctx_create(NULL, &ctx) == 0);
    uint8_t *jpeg = NULL, *cpu = NULL;
    size_t jlen = 0;
    uint32_t w = 0, h = 0;
    REQUIRE(dsc_jpeg_encode(NULL, rgb, W, H, 90, &jpeg, &jlen) == 0);
    REQUIRE(dsc__image_decode_rgb(ctx, jpeg, jlen, 0, &cpu, &w, &h) == 0);
    uint32_t gw = 0, gh = 0;
    CHECK_EQ_INT(dsc__nvjpeg_info(nv, jpeg, jlen, &gw, &gh), 0);
    CHECK(gw == W && gh == H);
    void *dev = NULL;
    REQUIRE(cuda_malloc(&dev, (size_t)W * H * 3) == 0);
    CHECK_EQ_INT(dsc__nvjpeg_decode_rgbi(nv, jpeg, jlen, dev, (size_t)W * 3, NULL), 0);
    REQUIRE(cuda_sync() == 0);
    uint8_t *gpu = malloc((size_t)W * H * 3);
    REQUIRE(gpu && cuda_memcpy(gpu, dev, (size_t)W * H * 3, 2 /* device to host */) == 0);
    double sum = 0;
    for (size_t i = 0; i < (size_t)W * H * 3; i++)
        sum += abs((int)gpu[i] - (int)cpu[i]);
    double mean = sum / ((double)W * H * 3);
    printf("nvJPEG against the CPU decode: mean |difference| %.3f\n", mean);
    CHECK(mean <= 3.0);
    CHECK_EQ_INT(dsc__nvjpeg_decode_rgbi(nv, jpeg, 100, dev, (size_t)W * 3, NULL), DSC_EDECODE);
    cuda_free(dev);
    free(gpu);
    free(cpu);
    free(jpeg);
    free(rgb);
    dsc__image_ctx_destroy(ctx);
    dsc__nvjpeg_close(nv);
    return TEST_DONE();
}
