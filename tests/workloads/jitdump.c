/* jitdump: a JIT that tells profilers about its code through perf's jitdump
 * interface (/tmp/jit-PID.dump, mmapped executable so the kernel names it).
 * x86_64 only.
 *
 *   jitdump reuse A B [N]   "jit_first" at X runs A/N units of work, then
 *                           "jit_second", loaded at the same X, B/N units;
 *                           N times (default 1), each a new load of each
 *   jitdump hostile A       "jit_first", then a record of size 3
 *   jitdump truncated A     "jit_first", then half a record
 *   jitdump descending N A  "jit_first", then N CODE_MOVE records, each at an
 *                           address below the one before, then A units
 *   jitdump splits N M A    "jit_first", then N CODE_MOVE records over one
 *                           16 MiB range and M one-byte moves inside it
 *                           (each cuts the range's history in two), then A
 *                           units
 *
 * descending and splits are what a hostile user may write: records cheap to
 * write that cost a reader the most (a sorted insert at the front each; a
 * long history copied at each cut).
 *
 * Work is counted, not timed (a unit is 1000 calls of a 200000-step loop:
 * about 0.1 s of one CPU), and both codes are the same loop on different
 * registers, so a unit costs both the same. What a unit costs still drifts
 * with the machine (its clock, the other hyperthread's load): alternating
 * N times lets that drift fall on both alike.
 *
 * Each load comes with unwinding information (.eh_frame + .eh_frame_hdr for
 * perf inject's layout), so the code unwinds without frame pointers. Records
 * are written with write(2): a profiler can read them at once. */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int dump_fd;

static uint64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + ts.tv_nsec;
}

static void put(const void *p, size_t n) {
    if (write(dump_fd, p, n) != (ssize_t)n)
        exit(2);
}

static void header(void) {
    struct { uint32_t magic, version, size, mach, pad, pid; uint64_t ts, flags; } h = {
        0x4A695444, 1, 40, 62, 0, (uint32_t)getpid(), mono_ns() / 1000, 0};
    put(&h, sizeof h);
}

/* One CIE (CFA = rsp+8, return address at CFA-8) and one FDE covering the
 * code: right for leaf code that never moves rsp. Then the hdr. */
static void unwinding_info(uint64_t code_size) {
    unsigned char eh[48] = {
        0x14, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 0x10, 1, 0x1b,
        0x0c, 7, 8, 0x90, 1, 0, 0,
        0x14, 0, 0, 0, 0x1c, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    uint64_t eh_off = (code_size + 7) & ~7ull;
    int32_t pc_begin = -(int32_t)(eh_off + 24 + 8), range = (int32_t)code_size;
    memcpy(eh + 32, &pc_begin, 4);
    memcpy(eh + 36, &range, 4);
    struct __attribute__((packed)) { uint8_t v, pe, ce, te; int32_t ptr; uint32_t n;
                                     int32_t from, to; } hdr = {
        1, 0x1b, 0x03, 0x3b, -(int32_t)(sizeof eh + 4), 1,
        -(int32_t)(eh_off + sizeof eh), -(int32_t)(sizeof eh - 24)};
    struct { uint32_t id, size; uint64_t ts, usize, hsize, msize; } r = {
        4, 40 + sizeof eh + sizeof hdr, mono_ns(), sizeof eh + sizeof hdr, sizeof hdr,
        (sizeof eh + sizeof hdr + 15) & ~15ull};
    r.size = (r.size + 7) & ~7u;
    put(&r, sizeof r);
    put(eh, sizeof eh);
    put(&hdr, sizeof hdr);
    static const char pad[8];
    put(pad, r.size - (40 + sizeof eh + sizeof hdr));
}

static uint64_t code_index;

static void code_load(const char *name, void *addr, const unsigned char *code, size_t n,
                      int half) {
    unwinding_info(n);
    struct { uint32_t id, size; uint64_t ts; uint32_t pid, tid; uint64_t vma, addr, size_,
             index; } r = {0, (uint32_t)(56 + strlen(name) + 1 + n), mono_ns(),
             (uint32_t)getpid(), (uint32_t)getpid(), (uint64_t)addr, (uint64_t)addr, n,
             ++code_index};
    if (half) {  /* the writer died in the middle of a record */
        put(&r, 30);
        return;
    }
    put(&r, sizeof r);
    put(name, strlen(name) + 1);
    put(code, n);
}

/* CODE_MOVE records, written in batches: a dump of millions is written in a blink */
static struct __attribute__((packed)) move {
    uint32_t id, size; uint64_t ts; uint32_t pid, tid;
    uint64_t vma, old_addr, new_addr, code_size, index;
} moves[4096];
static int nmoves;

static void flush_moves(void) {
    put(moves, nmoves * sizeof moves[0]);
    nmoves = 0;
}

static void code_move(uint64_t addr, uint64_t size) {
    struct move m = {1, sizeof m, mono_ns(), (uint32_t)getpid(), (uint32_t)getpid(), addr,
                     addr, addr, size, ++code_index};
    moves[nmoves++] = m;
    if (nmoves == sizeof moves / sizeof moves[0])
        flush_moves();
}

static void run(void *page, double units) {
    void (*spin)(void) = (void (*)(void))page;
    for (long n = (long)(units * 1000); n > 0; n--)
        spin();
}

int main(int argc, char **argv) {
    /* mov ecx, 200000; 1: dec ecx; jnz 1b; ret -- and the same on edx */
    static const unsigned char first[] = {0xb9, 0x40, 0x0d, 0x03, 0x00, 0xff, 0xc9,
                                          0x75, 0xfc, 0xc3};
    static const unsigned char second[] = {0xba, 0x40, 0x0d, 0x03, 0x00, 0xff, 0xca,
                                           0x75, 0xfc, 0xc3};
    if (argc < 3)
        return 1;
    const char *mode = argv[1];
    char path[64];
    snprintf(path, sizeof path, "/tmp/jit-%d.dump", (int)getpid());
    dump_fd = open(path, O_CREAT | O_TRUNC | O_RDWR, 0644);
    if (dump_fd < 0)
        return 1;
    header();
    if (mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, dump_fd, 0) == MAP_FAILED)
        return 1;
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    if (!strcmp(mode, "reuse") && argc > 3) {
        int rounds = argc > 4 ? atoi(argv[4]) : 1;
        for (int i = 0; i < rounds; i++) {
            memcpy(page, first, sizeof first);
            code_load("jit_first", page, first, sizeof first, 0);
            run(page, atof(argv[2]) / rounds);
            code_load("jit_second", page, second, sizeof second, 0);
            memcpy(page, second, sizeof second);
            run(page, atof(argv[3]) / rounds);
        }
        return 0;
    }
    memcpy(page, first, sizeof first);
    code_load("jit_first", page, first, sizeof first, 0);
    /* far from the page that runs: the samples there stay jit_first's */
    const uint64_t far = 0x100000000000ull;
    if (!strcmp(mode, "descending") && argc > 3) {
        long n = atol(argv[2]);
        for (long i = n; i > 0; i--)
            code_move(far + (uint64_t)i * 64, 64);
        flush_moves();
        run(page, atof(argv[3]));
        return 0;
    }
    if (!strcmp(mode, "splits") && argc > 4) {
        long n = atol(argv[2]), m = atol(argv[3]);
        for (long i = 0; i < n; i++)
            code_move(far, 16 << 20);
        for (long i = 0; i < m; i++)
            code_move(far + 1 + 2 * (uint64_t)i, 1);
        flush_moves();
        run(page, atof(argv[4]));
        return 0;
    }
    if (!strcmp(mode, "hostile")) {
        struct { uint32_t id, size; uint64_t ts; } bad = {0, 3, mono_ns()};
        put(&bad, sizeof bad);
    }
    run(page, atof(argv[2]));
    if (!strcmp(mode, "truncated")) {
        code_load("jit_second", page + 64, second, sizeof second, 1);
    }
    return 0; /* the dump stays, as JITs leave it */
}
