/* unwind_capture: real stack images for the DWARF unwinder's tests and benchmark.
 *
 * Built at test time with plain `cc -O2` (no frame pointers, default
 * asynchronous unwind tables), it captures what a PERF_SAMPLE_REGS_USER +
 * PERF_SAMPLE_STACK_USER sample would carry: the 20 user registers in perf's
 * order for mask 0xff0fff (AX BX CX DX SI DI BP SP IP FLAGS CS SS R8-R15) and
 * up to 16 KiB of stack from SP upwards. As an independent oracle it also
 * records glibc's backtrace() (libgcc's DWARF unwinder) at the same point.
 *
 *   unwind_capture direct  OUT     main -> level1 -> level2 -> qsort -> cmp -> leaf3 (libm) -> capture
 *   unwind_capture signal  OUT     main -> spin_outer -> spin (libm) interrupted by SIGALRM;
 *                                  the handler captures (stack crosses __restore_rt)
 *   unwind_capture thread  OUT     the direct chain in a second pthread (stack ends at clone3)
 *   unwind_capture samples OUT N D SIGPROF every ms of CPU: N samples of a p-fan-like loop D
 *                                  calls deep, registers from the ucontext (any pc, like perf)
 *   unwind_capture handler OUT N D the same workload, but the SIGPROF handler captures its own
 *                                  stack: every capture crosses __restore_rt at a random pc
 *
 * OUT receives cap-NNN.bin (header: u64 magic "QUNWCAP1", kind (0 capture_regs, 1 ucontext),
 * nregs, nbt, stack_len; then regs, backtrace, stack bytes), maps (/proc/self/maps) and
 * vdso.bin (this process's vdso image). x86_64 only. */
#define _GNU_SOURCE
#include <execinfo.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/time.h>
#include <ucontext.h>

#if defined(__clang__)
#define NOIPA __attribute__((noinline))
#else
#define NOIPA __attribute__((noipa))  /* no inlining, cloning or IPA: stable frames and names */
#endif

#define NREGS 20
#define STACK_MAX 16384
#define BT_MAX 128
#define MAGIC 0x31504143574e5551ULL /* "QUNWCAP1" */

struct capture {
    uint64_t kind, regs[NREGS], nbt, bt[BT_MAX], stack_len;
    unsigned char stack[STACK_MAX];
};

static struct capture *caps;
static volatile int ncaps, maxcaps;
static __thread uintptr_t stack_top;
static volatile sig_atomic_t done;
volatile double g_sink;

/* uint64_t capture_regs(uint64_t regs[20], void *out, uint64_t max, uint64_t top):
 * stores the registers in perf order (IP = an address inside this function, where
 * CFA = rsp + 8) and copies min(max, top - rsp) bytes from rsp; returns that count. */
uint64_t capture_regs(uint64_t *regs, void *out, uint64_t max, uint64_t top);
__asm__(
    "  .text\n"
    "  .globl capture_regs\n"
    "  .type capture_regs, @function\n"
    "capture_regs:\n"
    "  .cfi_startproc\n"
    "  movq %rax, 0(%rdi)\n"
    "  movq %rbx, 8(%rdi)\n"
    "  movq %rcx, 16(%rdi)\n"
    "  movq %rdx, 24(%rdi)\n"
    "  movq %rsi, 32(%rdi)\n"
    "  movq %rdi, 40(%rdi)\n"
    "  movq %rbp, 48(%rdi)\n"
    "  movq %rsp, 56(%rdi)\n"
    "1:leaq 1b(%rip), %rax\n"
    "  movq %rax, 64(%rdi)\n"
    "  pushfq\n"
    "  .cfi_adjust_cfa_offset 8\n"
    "  popq %rax\n"
    "  .cfi_adjust_cfa_offset -8\n"
    "  movq %rax, 72(%rdi)\n"
    "  movq $0x33, 80(%rdi)\n"
    "  movq $0x2b, 88(%rdi)\n"
    "  movq %r8, 96(%rdi)\n"
    "  movq %r9, 104(%rdi)\n"
    "  movq %r10, 112(%rdi)\n"
    "  movq %r11, 120(%rdi)\n"
    "  movq %r12, 128(%rdi)\n"
    "  movq %r13, 136(%rdi)\n"
    "  movq %r14, 144(%rdi)\n"
    "  movq %r15, 152(%rdi)\n"
    "  movq %rcx, %rax\n"
    "  subq %rsp, %rax\n"
    "  cmpq %rdx, %rax\n"
    "  cmovaq %rdx, %rax\n"
    "  movq %rax, %rcx\n"
    "  movq %rsi, %rdi\n"
    "  movq %rsp, %rsi\n"
    "  rep movsb\n"
    "  ret\n"
    "  .cfi_endproc\n"
    "  .size capture_regs, .-capture_regs\n");

static void set_stack_top(void)
{
    pthread_attr_t attr;
    void *addr;
    size_t size;
    if (pthread_getattr_np(pthread_self(), &attr) != 0 || pthread_attr_getstack(&attr, &addr, &size) != 0) {
        perror("pthread_getattr_np");
        exit(1);
    }
    stack_top = (uintptr_t)addr + size;
    pthread_attr_destroy(&attr);
}

static struct capture *next_capture(uint64_t kind)
{
    if (ncaps >= maxcaps)
        return NULL;
    struct capture *c = &caps[ncaps++];
    c->kind = kind;
    return c;
}

/* ---- direct and thread: calls through the program, libc's qsort and libm ---- */

static int captured;

NOIPA double leaf3(double x)
{
    double y = sin(x) + cos(x);  /* into libm and back */
    struct capture *c = next_capture(0);
    if (c) {
        c->stack_len = capture_regs(c->regs, c->stack, STACK_MAX, stack_top);
        c->nbt = backtrace((void **)c->bt, BT_MAX);
        y += (double)c->stack_len;
    }
    return y;
}

NOIPA int cmp(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    if (!captured) {
        captured = 1;
        g_sink += leaf3(x);
    }
    return (x > y) - (x < y);
}

NOIPA long level2(int n)
{
    int *v = malloc(n * sizeof *v);
    for (int i = 0; i < n; i++)
        v[i] = (i * 7919) % n;
    qsort(v, n, sizeof *v, cmp);
    long s = v[0] + v[n - 1];
    free(v);
    return s;
}

NOIPA long level1(int n)
{
    return level2(n) * 3 + 1;
}

NOIPA void *worker(void *arg)
{
    set_stack_top();
    captured = 0;
    long r = level1(64);
    __asm__ volatile("" : "+r"(r));  /* not a tail call: keep worker's frame */
    return (void *)(r + (long)arg);
}

/* ---- signal: a handler that captures while the program spins in libm ---- */

NOIPA void hlevel(void)
{
    struct capture *c = next_capture(0);
    if (c) {
        c->stack_len = capture_regs(c->regs, c->stack, STACK_MAX, stack_top);
        c->nbt = backtrace((void **)c->bt, BT_MAX);
        g_sink += (double)c->stack_len;
    }
}

NOIPA void on_alarm(int sig)
{
    hlevel();
    done = sig;
}

NOIPA double spin(double x)
{
    while (!done)
        x = sin(x) * 1.0001 + 0.5;
    return x;
}

NOIPA double spin_outer(double x)
{
    return spin(x) + 1.0;
}

/* ---- samples: perf-like captures at any pc of a p-fan-like workload ---- */

NOIPA long f00(long x) { return x + x; }
NOIPA long f01(long x) { return x * x; }
NOIPA long f02(long x) { return 1000 / x; }
NOIPA long f03(long x) { return x + x * x; }
NOIPA long f04(long x) { return x + x * (x + x); }
NOIPA long f05(long x) { return 1.0 / x; }
NOIPA long f06(long x) { return sin(x); }
NOIPA long f07(long x) { return cos(x); }
NOIPA long f08(long x) { return sin(x) * cos(x); }
NOIPA long f09(long x) { return tan(x); }

NOIPA unsigned long pfan(void)
{
    unsigned long sum = 0, x = 1;
    while (!done) {
        sum += f00(x++); sum += f01(x++); sum += f02(x++); sum += f03(x++);
        sum += f04(x++); sum += f05(x++); sum += f06(x++); sum += f07(x++);
        sum += f08(x++); sum += f09(x++);
        x = (x & 1023) | 1;
    }
    return sum;
}

NOIPA unsigned long descend(int depth)
{
    if (depth <= 0)
        return pfan();
    unsigned long r = descend(depth - 1);
    __asm__ volatile("" : "+r"(r));  /* keep a real call frame per level */
    return r ^ (unsigned long)depth;
}

NOIPA void on_prof_handler(int sig)
{
    if (ncaps >= maxcaps)
        done = 1;
    else
        hlevel();
    g_sink += sig;
}

static void on_prof(int sig, siginfo_t *si, void *ucv)
{
    (void)sig; (void)si;
    struct capture *c = next_capture(1);
    if (!c) {
        done = 1;
        return;
    }
    const greg_t *g = ((ucontext_t *)ucv)->uc_mcontext.gregs;
    static const int order[NREGS] = {REG_RAX, REG_RBX, REG_RCX, REG_RDX, REG_RSI, REG_RDI, REG_RBP,
                                     REG_RSP, REG_RIP, REG_EFL, -1, -1, REG_R8, REG_R9, REG_R10,
                                     REG_R11, REG_R12, REG_R13, REG_R14, REG_R15};
    for (int i = 0; i < NREGS; i++)
        c->regs[i] = order[i] >= 0 ? (uint64_t)g[order[i]] : (i == 10 ? 0x33 : 0x2b);
    uintptr_t sp = (uintptr_t)g[REG_RSP];
    uint64_t n = stack_top - sp < STACK_MAX ? stack_top - sp : STACK_MAX;
    memcpy(c->stack, (const void *)sp, n);
    c->stack_len = n;
    c->nbt = backtrace((void **)c->bt, BT_MAX);
}

/* ---- output ---- */

static void write_file(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void write_outputs(const char *dir)
{
    for (int i = 0; i < ncaps; i++) {
        struct capture *c = &caps[i];
        uint64_t hdr[5] = {MAGIC, c->kind, NREGS, c->nbt, c->stack_len};
        size_t n = sizeof hdr + sizeof c->regs + c->nbt * 8 + c->stack_len;
        unsigned char *buf = malloc(n), *p = buf;
        memcpy(p, hdr, sizeof hdr); p += sizeof hdr;
        memcpy(p, c->regs, sizeof c->regs); p += sizeof c->regs;
        memcpy(p, c->bt, c->nbt * 8); p += c->nbt * 8;
        memcpy(p, c->stack, c->stack_len);
        char name[64];
        snprintf(name, sizeof name, "cap-%03d.bin", i);
        write_file(dir, name, buf, n);
        free(buf);
    }
    /* the maps, and the vdso image (it has no file to open) */
    FILE *in = fopen("/proc/self/maps", "r");
    char line[4096], maps[1 << 16];
    size_t used = 0;
    uintptr_t vdso = getauxval(AT_SYSINFO_EHDR), vdso_end = 0;
    while (in && fgets(line, sizeof line, in)) {
        size_t l = strlen(line);
        if (used + l < sizeof maps) {
            memcpy(maps + used, line, l);
            used += l;
        }
        unsigned long lo, hi;
        if (strstr(line, "[vdso]") && sscanf(line, "%lx-%lx", &lo, &hi) == 2 && lo == vdso)
            vdso_end = hi;
    }
    if (in)
        fclose(in);
    write_file(dir, "maps", maps, used);
    if (vdso && vdso_end)
        write_file(dir, "vdso.bin", (const void *)vdso, vdso_end - vdso);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s direct|signal|thread|samples|handler OUTDIR [N [DEPTH]]\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1], *out = argv[2];
    void *warm[4];
    backtrace(warm, 4);  /* loads libgcc_s now, not inside a signal handler */
    set_stack_top();
    maxcaps = (strcmp(mode, "samples") == 0 || strcmp(mode, "handler") == 0) && argc > 3 ? atoi(argv[3]) : 4;
    caps = calloc(maxcaps, sizeof *caps);
    if (!caps)
        return 1;
    if (strcmp(mode, "direct") == 0) {
        g_sink += level1(64);
    } else if (strcmp(mode, "thread") == 0) {
        pthread_t t;
        void *r;
        if (pthread_create(&t, NULL, worker, NULL) != 0 || pthread_join(t, &r) != 0)
            return 1;
    } else if (strcmp(mode, "signal") == 0) {
        struct sigaction sa = {0};
        sa.sa_handler = on_alarm;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval it = {{0, 0}, {0, 20000}};
        setitimer(ITIMER_REAL, &it, NULL);
        g_sink += spin_outer(1.0);
    } else if (strcmp(mode, "samples") == 0 || strcmp(mode, "handler") == 0) {
        int depth = argc > 4 ? atoi(argv[4]) : 0;
        struct sigaction sa = {0};
        if (mode[0] == 's') {
            sa.sa_sigaction = on_prof;
            sa.sa_flags = SA_SIGINFO | SA_RESTART;
        } else {
            sa.sa_handler = on_prof_handler;
            sa.sa_flags = SA_RESTART;
        }
        sigaction(SIGPROF, &sa, NULL);
        struct itimerval it = {{0, 1000}, {0, 1000}};
        setitimer(ITIMER_PROF, &it, NULL);
        g_sink += descend(depth);
        struct itimerval off = {{0, 0}, {0, 0}};
        setitimer(ITIMER_PROF, &off, NULL);
    } else {
        fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    write_outputs(out);
    printf("%d captures\n", ncaps);
    return 0;
}
