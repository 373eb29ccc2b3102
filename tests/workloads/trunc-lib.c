/* trunc-lib: a user who truncates, again and again, a large library of
 * their own that they are running, while a root collector reads it.
 *
 * Built twice from this file:
 *   cc -O2 -fno-inline -shared -fPIC -DLIBRARY -O0  -> the library: 4,096
 *       small functions (one FDE each in .eh_frame) and a table of them
 *       (-O0: built in 2 s, not 20);
 *   cc -O2 -fno-inline                              -> the program.
 *
 * trunc-lib LIBRARY PAD_MIB SECONDS CALM_SECONDS
 *   pads LIBRARY (a file the caller owns) to PAD_MIB MiB with a hole, loads
 *   it, and for SECONDS calls its functions in random order, so that the
 *   collector meets new FDEs all the time. After CALM_SECONDS (time for the
 *   collector to load the library's unwind tables from the whole file) it
 *   cuts the file at the page of .eh_frame_hdr every 20-80 ms and puts the
 *   bytes back as long again: its own code, below the cut, keeps running;
 *   a reader that had mapped the file dies of SIGBUS touching a cut page.
 *   Prints "truncations N" and leaves the file whole. */
#ifdef LIBRARY

#define FN(n) long tl_##n(long x) { \
    for (long i = 0; i < 64 + (0##n & 63); i++) x = x * 31 + 0##n + i; return x; }
#define REF(n) tl_##n,
#define D0(M, p) M(p##0) M(p##1) M(p##2) M(p##3) M(p##4) M(p##5) M(p##6) M(p##7)
#define D1(M, p) D0(M, p##0) D0(M, p##1) D0(M, p##2) D0(M, p##3) \
                 D0(M, p##4) D0(M, p##5) D0(M, p##6) D0(M, p##7)
#define D2(M, p) D1(M, p##0) D1(M, p##1) D1(M, p##2) D1(M, p##3) \
                 D1(M, p##4) D1(M, p##5) D1(M, p##6) D1(M, p##7)
#define D3(M) D2(M, 0) D2(M, 1) D2(M, 2) D2(M, 3) D2(M, 4) D2(M, 5) D2(M, 6) D2(M, 7)

D3(FN)

long (*const tl_table[])(long) = { D3(REF) };
const int tl_count = sizeof tl_table / sizeof tl_table[0];

#else

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void die(const char *what) {
    perror(what);
    _exit(2);
}

/* The file offset of .eh_frame_hdr's page: where the cut goes. */
static off_t cut_offset(int fd) {
    Elf64_Ehdr eh;
    if (pread(fd, &eh, sizeof eh, 0) != sizeof eh || memcmp(eh.e_ident, ELFMAG, SELFMAG))
        die("not an ELF file");
    for (int i = 0; i < eh.e_phnum; i++) {
        Elf64_Phdr ph;
        if (pread(fd, &ph, sizeof ph, eh.e_phoff + i * sizeof ph) != sizeof ph)
            die("program headers");
        if (ph.p_type == PT_GNU_EH_FRAME)
            return ph.p_offset & ~(off_t)4095;
    }
    fprintf(stderr, "no PT_GNU_EH_FRAME\n");
    _exit(2);
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: trunc-lib LIBRARY PAD_MIB SECONDS CALM_SECONDS\n");
        return 2;
    }
    const char *lib = argv[1];
    off_t padded = (off_t)atol(argv[2]) << 20;
    double start = now(), end = start + atof(argv[3]), calm = start + atof(argv[4]);
    int fd = open(lib, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        die(lib);
    off_t size = lseek(fd, 0, SEEK_END), cut = cut_offset(fd);
    size_t kept = size - cut;
    char *tail = malloc(kept);
    if (!tail || pread(fd, tail, kept, cut) != (ssize_t)kept)
        die("reading the tail");
    if (ftruncate(fd, padded) < 0)
        die("padding");
    void *handle = dlopen(lib, RTLD_NOW);
    if (!handle) {
        fprintf(stderr, "%s\n", dlerror());
        return 2;
    }
    long (*const *table)(long) = dlsym(handle, "tl_table");
    const int *count = dlsym(handle, "tl_count");
    if (!table || !count)
        die("dlsym");
    /* Our own copy of the table: the library's pages past the cut are
     * gone while it is cut, for us too. */
    int n = *count;
    long (**funcs)(long) = malloc(n * sizeof *funcs);
    memcpy(funcs, table, n * sizeof *funcs);

    unsigned long sum = 0, state = 88172645463325252UL, truncations = 0;
    int cut_now = 0;
    double toggle = calm;
    for (long rounds = 0;; rounds++) {
        state ^= state << 13; state ^= state >> 7; state ^= state << 17;
        sum += funcs[state % n]((long)sum);
        if ((rounds & 255) != 0)
            continue;
        double t = now();
        if (t >= end)
            break;
        if (t < toggle)
            continue;
        if (!cut_now) {
            if (ftruncate(fd, cut) < 0)
                die("cutting");
            truncations++;
        } else if (ftruncate(fd, padded) < 0 || pwrite(fd, tail, kept, cut) != (ssize_t)kept) {
            die("restoring");
        }
        cut_now = !cut_now;
        toggle = t + 0.02 + (state % 61) / 1000.0;
    }
    if (cut_now && (ftruncate(fd, padded) < 0 || pwrite(fd, tail, kept, cut) != (ssize_t)kept))
        die("restoring");
    printf("truncations %lu sum %lu\n", truncations, sum & 1);
    fflush(stdout);
    _exit(0);  /* not exit(): the library's destructors would read its pages */
}

#endif
