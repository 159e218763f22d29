/* Helpers of hccl-rs's own C tests of the C API: checks, device buffers,
 * and element values of every HcclDataType, written and read as doubles
 * (the tests use small integers, exact in every type). */
#ifndef CAPI_TEST_COMMON_H
#define CAPI_TEST_COMMON_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "acl/acl.h"
#include "hccl/hccl.h"

static int failures = 0;

#define EXPECT(cond, ...)                                          \
    do {                                                           \
        if (!(cond)) {                                             \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                          \
            fputc('\n', stderr);                                   \
            failures++;                                            \
        }                                                          \
    } while (0)

#define MUST(call, want)                                                               \
    do {                                                                               \
        long r_ = (long)(call);                                                        \
        if (r_ != (long)(want)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s returned %ld, want %ld\n", __FILE__,       \
                    __LINE__, #call, r_, (long)(want));                                \
            exit(2);                                                                   \
        }                                                                              \
    } while (0)

static inline size_t esize(HcclDataType t)
{
    switch (t) {
    case HCCL_DATA_TYPE_INT8: case HCCL_DATA_TYPE_UINT8: return 1;
    case HCCL_DATA_TYPE_INT16: case HCCL_DATA_TYPE_UINT16:
    case HCCL_DATA_TYPE_FP16: case HCCL_DATA_TYPE_BFP16: return 2;
    case HCCL_DATA_TYPE_INT32: case HCCL_DATA_TYPE_UINT32: case HCCL_DATA_TYPE_FP32: return 4;
    default: return 8;
    }
}

static inline uint16_t to_fp16(double v)
{
    int e;
    double m;
    if (v == 0) return 0;
    m = frexp(v, &e); /* v = m * 2^e, 0.5 <= m < 1 */
    return (uint16_t)(((e - 1 + 15) << 10) | (uint16_t)((m * 2 - 1) * 1024));
}

static inline double from_fp16(uint16_t h)
{
    int e = (h >> 10) & 0x1f;
    if (e == 0) return 0;
    return ldexp(1 + (h & 0x3ff) / 1024.0, e - 15) * ((h & 0x8000) ? -1 : 1);
}

static inline void put(HcclDataType t, void *buf, size_t i, double v)
{
    char *p = (char *)buf + i * esize(t);
    float f = (float)v;
    uint32_t bits;
    switch (t) {
    case HCCL_DATA_TYPE_INT8: *(int8_t *)p = (int8_t)v; break;
    case HCCL_DATA_TYPE_UINT8: *(uint8_t *)p = (uint8_t)v; break;
    case HCCL_DATA_TYPE_INT16: *(int16_t *)p = (int16_t)v; break;
    case HCCL_DATA_TYPE_UINT16: *(uint16_t *)p = (uint16_t)v; break;
    case HCCL_DATA_TYPE_INT32: *(int32_t *)p = (int32_t)v; break;
    case HCCL_DATA_TYPE_UINT32: *(uint32_t *)p = (uint32_t)v; break;
    case HCCL_DATA_TYPE_INT64: *(int64_t *)p = (int64_t)v; break;
    case HCCL_DATA_TYPE_UINT64: *(uint64_t *)p = (uint64_t)v; break;
    case HCCL_DATA_TYPE_FP32: *(float *)p = f; break;
    case HCCL_DATA_TYPE_FP64: *(double *)p = v; break;
    case HCCL_DATA_TYPE_FP16: *(uint16_t *)p = to_fp16(v); break;
    case HCCL_DATA_TYPE_BFP16:
        memcpy(&bits, &f, 4);
        *(uint16_t *)p = (uint16_t)(bits >> 16);
        break;
    default: break;
    }
}

static inline double get(HcclDataType t, const void *buf, size_t i)
{
    const char *p = (const char *)buf + i * esize(t);
    uint32_t bits;
    float f;
    switch (t) {
    case HCCL_DATA_TYPE_INT8: return *(const int8_t *)p;
    case HCCL_DATA_TYPE_UINT8: return *(const uint8_t *)p;
    case HCCL_DATA_TYPE_INT16: return *(const int16_t *)p;
    case HCCL_DATA_TYPE_UINT16: return *(const uint16_t *)p;
    case HCCL_DATA_TYPE_INT32: return *(const int32_t *)p;
    case HCCL_DATA_TYPE_UINT32: return *(const uint32_t *)p;
    case HCCL_DATA_TYPE_INT64: return (double)*(const int64_t *)p;
    case HCCL_DATA_TYPE_UINT64: return (double)*(const uint64_t *)p;
    case HCCL_DATA_TYPE_FP32: return *(const float *)p;
    case HCCL_DATA_TYPE_FP64: return *(const double *)p;
    case HCCL_DATA_TYPE_FP16: return from_fp16(*(const uint16_t *)p);
    case HCCL_DATA_TYPE_BFP16:
        bits = (uint32_t)(*(const uint16_t *)p) << 16;
        memcpy(&f, &bits, 4);
        return f;
    default: return NAN;
    }
}

/* Device memory of `n` elements, zeroed. */
static inline void *dev_alloc(HcclDataType t, size_t n)
{
    void *p = NULL;
    size_t b = n * esize(t);
    MUST(aclrtMalloc(&p, b ? b : 1, ACL_MEM_MALLOC_HUGE_FIRST), ACL_SUCCESS);
    MUST(aclrtMemset(p, b ? b : 1, 0, b ? b : 1), ACL_SUCCESS);
    return p;
}

/* Device memory holding f(i) for i < n. */
static inline void *dev_fill(HcclDataType t, size_t n, double (*f)(int, size_t), int r)
{
    size_t i, b = n * esize(t);
    void *host = calloc(n ? n : 1, esize(t));
    void *d = dev_alloc(t, n);
    for (i = 0; i < n; i++) put(t, host, i, f(r, i));
    if (b) MUST(aclrtMemcpy(d, b, host, b, ACL_MEMCPY_HOST_TO_DEVICE), ACL_SUCCESS);
    free(host);
    return d;
}

/* A host copy of `n` elements of device memory. */
static inline void *dev_read(HcclDataType t, const void *d, size_t n)
{
    size_t b = n * esize(t);
    void *host = calloc(n ? n : 1, esize(t));
    if (b) MUST(aclrtMemcpy(host, b, d, b, ACL_MEMCPY_DEVICE_TO_HOST), ACL_SUCCESS);
    return host;
}

#endif
