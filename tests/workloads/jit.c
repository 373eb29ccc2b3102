/* jit: runs code it generated at run time, as a JIT compiler does, and says
 * where it is in /tmp/perf-PID.map (the perf JIT interface), so a profiler
 * can name it. x86_64 only. Runs for the seconds given as its argument. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    /* mov ecx, 200000; 1: dec ecx; jnz 1b; ret */
    static const unsigned char code[] = {0xb9, 0x40, 0x0d, 0x03, 0x00, 0xff, 0xc9,
                                         0x75, 0xfc, 0xc3};
    double seconds = argc > 1 ? atof(argv[1]) : 2, end = now() + seconds;
    unsigned char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE | PROT_EXEC,
                               MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (page == MAP_FAILED)
        return 1;
    memcpy(page, code, sizeof code);
    char path[64];
    snprintf(path, sizeof path, "/tmp/perf-%d.map", (int)getpid());
    FILE *map = fopen(path, "w");
    if (!map)
        return 1;
    fprintf(map, "%lx %zx jitted_spin_loop\n", (unsigned long)page, sizeof code);
    fclose(map);
    void (*spin)(void) = (void (*)(void))page;
    while (now() < end)
        for (int i = 0; i < 100; i++)
            spin();
    return 0; /* the map stays, as JITs leave it: profilers read it after the run */
}
