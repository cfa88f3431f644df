/*
 * A test double of the CUDA driver (libcuda.so.1) on host memory, for testing the cuda
 * HAL's use of the driver API on machines without a GPU. It implements only the entry
 * points the HAL resolves, runs all work synchronously, and enforces the driver rules the
 * HAL must follow: a current context for allocations and stream work, a stream used only
 * in its own context, an event recorded only on a stream of its context, timing-disabled
 * events refused by cuEventElapsedTime, kernels launched only in their module's context.
 * Stream capture records a stream's copies, memsets and launches (argument values copied)
 * into a graph; a launched graph runs them; a wait on a capturing stream is refused.
 * Its "JIT" loads PTX text and finds the `.entry` kernels it names among the host kernels
 * below (the conformance suite's vector_add and program_ids); other images are invalid.
 * FAKE_CUDA_DEVICES sets the device count (2);
 * built with -DFAKE_CUDA_TOO_OLD it lacks cuMemAlloc_v2 (a driver too old for the HAL).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;
enum {
  OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_INITIALIZED = 3, INVALID_CONTEXT = 201,
  INVALID_DEVICE = 101, INVALID_HANDLE = 400, NOT_READY = 600
};
#define MAX_DEVICES 8
#define TOTAL_MEMORY (1ull << 30)
#define MAX_ALLOCS 65536

typedef struct ctx { int device; } ctx_t;
/* Work a capturing stream recorded: a copy, a memset or a kernel launch. */
typedef struct op op_t;
typedef struct stream { ctx_t* ctx; int priority; int capturing; int strict; op_t* ops; int nops; } stream_t;
typedef struct event { ctx_t* ctx; unsigned flags; int recorded; double ms; } event_t;
typedef struct alloc { uintptr_t base; size_t size; int device; int host; } alloc_t;

static int g_init, g_devices = 2;
static ctx_t g_primary[MAX_DEVICES];
static size_t g_used[MAX_DEVICES];
static alloc_t g_allocs[MAX_ALLOCS];
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread ctx_t* t_ctx;
/* As the driver: while this thread captures in global or thread-local mode, it may not
 * allocate or instantiate a graph unless it swapped its own mode to relaxed
 * (cuThreadExchangeStreamCaptureMode). */
static __thread int t_capture_mode; /* CU_STREAM_CAPTURE_MODE_GLOBAL */
static __thread int t_strict_captures;
static int allocation_refused(void) { return t_strict_captures > 0 && t_capture_mode != 2; }

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static alloc_t* find(uintptr_t p, int exact) {
  for (int i = 0; i < MAX_ALLOCS; ++i) {
    alloc_t* a = &g_allocs[i];
    if (a->base && (exact ? p == a->base : p >= a->base && p - a->base < (a->size ? a->size : 1))) return a;
  }
  return NULL;
}

static CUresult add(void* p, size_t size, int device, int host) {
  for (int i = 0; i < MAX_ALLOCS; ++i) {
    if (!g_allocs[i].base) {
      g_allocs[i] = (alloc_t){(uintptr_t)p, size, device, host};
      return OK;
    }
  }
  return OUT_OF_MEMORY;
}

/* The context a stream's work runs in; its stream must be current. */
static CUresult stream_ctx(stream_t* s) {
  if (!t_ctx) return INVALID_CONTEXT;
  if (s && s->ctx != t_ctx) return INVALID_HANDLE;
  return OK;
}
enum { ILLEGAL_STATE = 401, CAPTURE_UNSUPPORTED = 900 };
static int capturing(stream_t* s) { return s && s->capturing; }
static void record(stream_t* s, const op_t* op);

CUresult cuInit(unsigned flags) {
  (void)flags;
  const char* n = getenv("FAKE_CUDA_DEVICES");
  if (n) g_devices = atoi(n);
  for (int i = 0; i < MAX_DEVICES; ++i) g_primary[i].device = i;
  g_init = 1;
  return OK;
}
CUresult cuDriverGetVersion(int* v) { *v = 12080; return OK; }
CUresult cuGetErrorString(CUresult r, const char** s) { *s = r == OUT_OF_MEMORY ? "out of memory" : "fake error"; return OK; }
CUresult cuGetErrorName(CUresult r, const char** s) { *s = r == OUT_OF_MEMORY ? "CUDA_ERROR_OUT_OF_MEMORY" : "CUDA_ERROR_FAKE"; return OK; }
CUresult cuDeviceGetCount(int* n) { if (!g_init) return NOT_INITIALIZED; *n = g_devices; return OK; }
CUresult cuDeviceGet(int* d, int i) { if (i < 0 || i >= g_devices) return INVALID_DEVICE; *d = i; return OK; }
CUresult cuDeviceGetName(char* name, int len, int d) { (void)d; strncpy(name, "Fake CUDA Device", len); return OK; }
CUresult cuDeviceGetAttribute(int* v, int attr, int d) {
  (void)d;
  *v = attr == 16 ? 132 : attr == 75 ? 9 : attr == 76 ? 0 : attr == 10 ? 32 : attr == 1 ? 1024
     : attr == 97 ? 232448 : 1;
  return OK;
}
CUresult cuDeviceTotalMem_v2(size_t* t, int d) { (void)d; *t = TOTAL_MEMORY; return OK; }
CUresult cuDevicePrimaryCtxRetain(ctx_t** c, int d) {
  if (d < 0 || d >= g_devices) return INVALID_DEVICE;
  *c = &g_primary[d];
  return OK;
}
CUresult cuCtxSetCurrent(ctx_t* c) { t_ctx = c; return OK; }
CUresult cuCtxGetCurrent(ctx_t** c) { *c = t_ctx; return OK; }
CUresult cuCtxSynchronize(void) { return t_ctx ? OK : INVALID_CONTEXT; }
CUresult cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  if (!t_ctx) return INVALID_CONTEXT;
  *least = 0;
  *greatest = -5;
  return OK;
}
CUresult cuMemGetInfo_v2(size_t* f, size_t* t) {
  if (!t_ctx) return INVALID_CONTEXT;
  pthread_mutex_lock(&g_mu);
  *f = TOTAL_MEMORY - g_used[t_ctx->device];
  pthread_mutex_unlock(&g_mu);
  *t = TOTAL_MEMORY;
  return OK;
}
#ifndef FAKE_CUDA_TOO_OLD
CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t size) {
  if (!t_ctx) return INVALID_CONTEXT;
  if (allocation_refused()) return CAPTURE_UNSUPPORTED;
  if (size == 0) return INVALID_VALUE;
  pthread_mutex_lock(&g_mu);
  CUresult r = OUT_OF_MEMORY;
  void* mem = NULL;
  if (size <= TOTAL_MEMORY - g_used[t_ctx->device] && posix_memalign(&mem, 256, size) == 0) {
    r = add(mem, size, t_ctx->device, 0);
    if (r == OK) {
      g_used[t_ctx->device] += size;
      *p = (CUdeviceptr)(uintptr_t)mem;
    } else {
      free(mem);
    }
  }
  pthread_mutex_unlock(&g_mu);
  return r;
}
#endif
CUresult cuMemFree_v2(CUdeviceptr p) {
  if (!t_ctx) return INVALID_CONTEXT;
  pthread_mutex_lock(&g_mu);
  alloc_t* a = find((uintptr_t)p, 1);
  CUresult r = a && !a->host ? OK : INVALID_VALUE;
  if (r == OK) {
    g_used[a->device] -= a->size;
    free((void*)a->base);
    a->base = 0;
  }
  pthread_mutex_unlock(&g_mu);
  return r;
}
CUresult cuMemHostAlloc(void** p, size_t size, unsigned flags) {
  (void)flags;
  if (!t_ctx) return INVALID_CONTEXT;
  if (allocation_refused()) return CAPTURE_UNSUPPORTED;
  if (size == 0 || size > (1ull << 40) || posix_memalign(p, 4096, size) != 0) return OUT_OF_MEMORY;
  pthread_mutex_lock(&g_mu);
  CUresult r = add(*p, size, -1, 1);
  pthread_mutex_unlock(&g_mu);
  return r;
}
CUresult cuMemFreeHost(void* p) {
  pthread_mutex_lock(&g_mu);
  alloc_t* a = find((uintptr_t)p, 1);
  CUresult r = a && a->host ? OK : INVALID_VALUE;
  if (r == OK) {
    free(p);
    a->base = 0;
  }
  pthread_mutex_unlock(&g_mu);
  return r;
}
CUresult cuMemcpy(CUdeviceptr d, CUdeviceptr s, size_t n) {
  if (!t_ctx) return INVALID_CONTEXT;
  memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)s, n);
  return OK;
}
CUresult cuMemcpyPeer(CUdeviceptr d, ctx_t* dc, CUdeviceptr s, ctx_t* sc, size_t n) {
  if (!dc || !sc || dc == sc) return INVALID_VALUE;
  memmove((void*)(uintptr_t)d, (const void*)(uintptr_t)s, n);
  return OK;
}
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, stream_t* st);
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, stream_t* st);
CUresult cuMemsetD8_v2(CUdeviceptr p, unsigned char v, size_t n) {
  if (!t_ctx) return INVALID_CONTEXT;
  memset((void*)(uintptr_t)p, v, n);
  return OK;
}

static CUresult attribute(void* data, int attr, alloc_t* a) {
  switch (attr) {
    case 2: *(unsigned*)data = a->host ? 1 : 2; return OK;
    case 9: *(int*)data = a->device; return OK;
    case 11: *(CUdeviceptr*)data = a->base; return OK;
    case 12: *(size_t*)data = a->size; return OK;
    default: return INVALID_VALUE;
  }
}
CUresult cuPointerGetAttribute(void* data, int attr, CUdeviceptr p) {
  pthread_mutex_lock(&g_mu);
  alloc_t* a = find((uintptr_t)p, 0);
  alloc_t copy = a ? *a : (alloc_t){0, 0, 0, 0};
  pthread_mutex_unlock(&g_mu);
  return a ? attribute(data, attr, &copy) : INVALID_VALUE;
}
CUresult cuPointerGetAttributes(unsigned n, int* attrs, void** data, CUdeviceptr p) {
  pthread_mutex_lock(&g_mu);
  alloc_t* a = find((uintptr_t)p, 0);
  alloc_t copy = a ? *a : (alloc_t){0, 0, 0, 0};
  pthread_mutex_unlock(&g_mu);
  for (unsigned i = 0; a && i < n; ++i) attribute(data[i], attrs[i], &copy);
  return OK;  /* unknown memory: the outputs keep their defaults */
}
CUresult cuStreamCreateWithPriority(stream_t** s, unsigned flags, int priority) {
  (void)flags;
  if (!t_ctx) return INVALID_CONTEXT;
  if (priority < -5 || priority > 0) return INVALID_VALUE; /* the HAL clamps */
  *s = calloc(1, sizeof **s);
  (*s)->ctx = t_ctx;
  (*s)->priority = priority;
  return OK;
}
CUresult cuStreamDestroy_v2(stream_t* s) {
  CUresult r = stream_ctx(s);
  if (!s) return INVALID_HANDLE;
  if (r == OK) free(s);
  return r;
}
CUresult cuStreamQuery(stream_t* s) { return capturing(s) ? CAPTURE_UNSUPPORTED : stream_ctx(s); }
CUresult cuStreamSynchronize(stream_t* s) { return capturing(s) ? CAPTURE_UNSUPPORTED : stream_ctx(s); }
CUresult cuStreamWaitEvent(stream_t* s, event_t* e, unsigned flags) {
  (void)flags;
  return e ? stream_ctx(s) : INVALID_HANDLE;
}
CUresult cuEventCreate(event_t** e, unsigned flags) {
  if (!t_ctx) return INVALID_CONTEXT;
  *e = calloc(1, sizeof **e);
  (*e)->ctx = t_ctx;
  (*e)->flags = flags;
  return OK;
}
CUresult cuEventDestroy_v2(event_t* e) {
  if (!e) return INVALID_HANDLE;
  free(e);
  return OK;
}
CUresult cuEventRecord(event_t* e, stream_t* s) {
  CUresult r = stream_ctx(s);
  if (r != OK) return r;
  if (!e || e->ctx != t_ctx) return INVALID_HANDLE; /* event and stream of one context */
  e->recorded = 1;
  e->ms = now_ms();
  return OK;
}
CUresult cuEventQuery(event_t* e) { return e ? OK : INVALID_HANDLE; }
CUresult cuEventSynchronize(event_t* e) { return e ? OK : INVALID_HANDLE; }
CUresult cuEventElapsedTime(float* ms, event_t* a, event_t* b) {
  if (!a || !b || !a->recorded || !b->recorded || (a->flags | b->flags) & 0x2) return INVALID_HANDLE;
  *ms = (float)(b->ms - a->ms);
  return OK;
}

/* ---- modules and kernels ------------------------------------------------------------ */
enum { INVALID_IMAGE = 200, NOT_FOUND = 500 };
typedef struct dim { unsigned x, y, z; } dim_t;
#define MAX_PARAMS 8
typedef void (*host_kernel_t)(dim_t grid, dim_t block, void** params);
typedef struct func { ctx_t* ctx; const char* name; host_kernel_t run; int nparams; int shared; } func_t;
typedef struct module { ctx_t* ctx; char* text; func_t funcs[2]; } module_t;

/* ---- stream capture ---- */
struct op {
  enum { COPY, SET, LAUNCH } kind;
  CUdeviceptr dst, src;
  size_t n;
  unsigned char value;
  func_t* f;
  dim_t grid, block;
  uint64_t args[MAX_PARAMS];  /* the launch's argument values, 8 bytes each */
};
typedef struct graph { ctx_t* ctx; op_t* ops; int nops; } graph_t;

static void record(stream_t* s, const op_t* op) {
  s->ops = realloc(s->ops, (size_t)(s->nops + 1) * sizeof *op);
  s->ops[s->nops++] = *op;
}
static void run(const op_t* op) {
  if (op->kind == COPY) memmove((void*)(uintptr_t)op->dst, (const void*)(uintptr_t)op->src, op->n);
  if (op->kind == SET) memset((void*)(uintptr_t)op->dst, op->value, op->n);
  if (op->kind == LAUNCH) {
    void* params[MAX_PARAMS];
    uint64_t args[MAX_PARAMS];
    memcpy(args, op->args, sizeof args);
    for (int i = 0; i < MAX_PARAMS; ++i) params[i] = &args[i];
    op->f->run(op->grid, op->block, params);
  }
}
CUresult cuMemcpyAsync(CUdeviceptr d, CUdeviceptr s, size_t n, stream_t* st) {
  CUresult r = stream_ctx(st);
  if (r != OK) return r;
  op_t op = {COPY, d, s, n, 0, NULL, {0, 0, 0}, {0, 0, 0}, {0}};
  if (capturing(st)) record(st, &op);
  else run(&op);
  return OK;
}
CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, stream_t* st) {
  CUresult r = stream_ctx(st);
  if (r != OK) return r;
  op_t op = {SET, p, 0, n, v, NULL, {0, 0, 0}, {0, 0, 0}, {0}};
  if (capturing(st)) record(st, &op);
  else run(&op);
  return OK;
}
CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
  int old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return OK;
}
CUresult cuStreamBeginCapture_v2(stream_t* s, int mode) {
  CUresult r = stream_ctx(s);
  if (r != OK) return r;
  if (!s || mode < 0 || mode > 2) return CAPTURE_UNSUPPORTED; /* the legacy stream cannot */
  if (s->capturing) return ILLEGAL_STATE;
  s->capturing = 1;
  s->strict = mode != 2;
  t_strict_captures += s->strict;
  s->ops = NULL;
  s->nops = 0;
  return OK;
}
CUresult cuStreamEndCapture(stream_t* s, graph_t** g) {
  CUresult r = stream_ctx(s);
  if (r != OK) return r;
  if (!capturing(s)) return ILLEGAL_STATE;
  *g = malloc(sizeof **g);
  **g = (graph_t){s->ctx, s->ops, s->nops};
  s->capturing = 0;
  t_strict_captures -= s->strict;
  s->strict = 0;
  s->ops = NULL;
  s->nops = 0;
  return OK;
}
static graph_t* copy_graph(const graph_t* g) {
  graph_t* c = malloc(sizeof *c);
  *c = (graph_t){g->ctx, malloc((size_t)(g->nops ? g->nops : 1) * sizeof(op_t)), g->nops};
  if (g->nops) memcpy(c->ops, g->ops, (size_t)g->nops * sizeof(op_t));
  return c;
}
CUresult cuGraphInstantiateWithFlags(graph_t** exec, graph_t* g, unsigned long long flags) {
  if (!g || flags) return INVALID_VALUE;
  if (allocation_refused()) return CAPTURE_UNSUPPORTED; /* another stream still captures */
  *exec = copy_graph(g);
  return OK;
}
CUresult cuGraphLaunch(graph_t* exec, stream_t* s) {
  CUresult r = stream_ctx(s);
  if (r != OK) return r;
  if (!exec || exec->ctx != t_ctx) return INVALID_HANDLE;
  for (int i = 0; i < exec->nops; ++i) {
    if (capturing(s)) record(s, &exec->ops[i]);
    else run(&exec->ops[i]);
  }
  return OK;
}
static CUresult free_graph(graph_t* g) {
  if (!g) return INVALID_HANDLE;
  free(g->ops);
  free(g);
  return OK;
}
CUresult cuGraphDestroy(graph_t* g) { return free_graph(g); }
CUresult cuGraphExecDestroy(graph_t* exec) { return free_graph(exec); }

static void vector_add(dim_t grid, dim_t block, void** params) {
  const float* a = *(const float**)params[0];
  const float* b = *(const float**)params[1];
  float* out = *(float**)params[2];
  long long n = *(long long*)params[3];
  for (long long i = 0; i < (long long)grid.x * block.x; ++i) {
    if (i < n) out[i] = a[i] + b[i];
  }
}

static void program_ids(dim_t grid, dim_t block, void** params) {
  (void)block;
  unsigned* out = *(unsigned**)params[0];
  for (unsigned i = 0; i < grid.x * grid.y * grid.z; ++i) out[i] = i;
}

static const struct { const char* name; host_kernel_t run; int nparams; } g_kernels[] = {
    {"vector_add", vector_add, 4}, {"program_ids", program_ids, 1}};

CUresult cuModuleLoadData(module_t** m, const void* image) {
  if (!t_ctx) return INVALID_CONTEXT;
  const char* text = (const char*)image;
  if (!strstr(text, ".version") || !strstr(text, ".entry")) return INVALID_IMAGE;
  module_t* mod = calloc(1, sizeof *mod);
  mod->ctx = t_ctx;
  mod->text = strdup(text);
  *m = mod;
  return OK;
}
CUresult cuModuleGetFunction(func_t** f, module_t* m, const char* name) {
  if (!m || m->ctx != t_ctx) return INVALID_HANDLE;
  char entry[128];
  snprintf(entry, sizeof entry, ".entry %s(", name);
  for (int i = 0; i < 2; ++i) {
    if (strcmp(g_kernels[i].name, name) != 0 || !strstr(m->text, entry)) continue;
    func_t* fn = &m->funcs[i];
    *fn = (func_t){m->ctx, g_kernels[i].name, g_kernels[i].run, g_kernels[i].nparams, 0};
    *f = fn;
    return OK;
  }
  return NOT_FOUND;
}
CUresult cuModuleUnload(module_t* m) {
  if (!m) return INVALID_HANDLE;
  free(m->text);
  free(m);
  return OK;
}
CUresult cuFuncSetAttribute(func_t* f, int attr, int value) {
  if (!f || attr != 8 || value < 0 || value > 232448) return INVALID_VALUE;
  f->shared = value;
  return OK;
}
CUresult cuFuncGetParamInfo(func_t* f, size_t index, size_t* offset, size_t* size) {
  if (!f || index >= (size_t)f->nparams) return INVALID_VALUE;
  *offset = index * 8;
  *size = 8;
  return OK;
}
CUresult cuLaunchKernel(func_t* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, stream_t* s, void** params, void** extra) {
  if (!f || extra) return INVALID_VALUE;
  if (f->ctx != t_ctx || (s && s->ctx != t_ctx)) return INVALID_CONTEXT;
  if (!gx || !gy || !gz || !bx || !by || !bz || (int)shared > (f->shared > 49152 ? f->shared : 49152)) {
    return INVALID_VALUE;
  }
  if (capturing(s)) {
    op_t op = {LAUNCH, 0, 0, 0, 0, f, {gx, gy, gz}, {bx, by, bz}, {0}};
    for (int i = 0; i < f->nparams && i < MAX_PARAMS; ++i) memcpy(&op.args[i], params[i], 8);
    record(s, &op);
    return OK;
  }
  f->run((dim_t){gx, gy, gz}, (dim_t){bx, by, bz}, params);
  return OK;
}

/* A TMA descriptor as the driver checks one (rank 1 to 5, a 16-byte aligned address and
 * byte strides, tiles of 1 to 256 elements); the 128 bytes hold what it was given, as
 * uint64s in order: address, rank, type, swizzle, fill, then
 * dims and box (innermost first, 5 each), then the byte stride of dimension 1 (the one
 * outside the innermost). */
CUresult cuTensorMapEncodeTiled(void* map, int type, unsigned rank, void* address, const unsigned long long* dims,
                                const unsigned long long* strides, const unsigned* box,
                                const unsigned* element_strides, int interleave, int swizzle, int l2, int fill) {
  if (!map || rank < 1 || rank > 5 || ((uintptr_t)address & 15) || interleave != 0 || l2 < 0 || l2 > 3) {
    return INVALID_VALUE;
  }
  unsigned long long out[16] = {(uintptr_t)address, rank, (unsigned)type, (unsigned)swizzle, (unsigned)fill};
  for (unsigned i = 0; i < rank; ++i) {
    if (!dims[i] || !box[i] || box[i] > 256 || element_strides[i] != 1) return INVALID_VALUE;
    if (i + 1 < rank && (strides[i] & 15)) return INVALID_VALUE;
    out[5 + i] = dims[i];
    out[10 + i] = box[i];
  }
  if (rank > 1) out[15] = strides[0];
  memcpy(map, out, sizeof out);
  return OK;
}
