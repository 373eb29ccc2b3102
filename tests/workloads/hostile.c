/* A program whose names are hostile (tests/hostile_names.py): its two functions
 * and its source file are renamed in the built ELF to names with control
 * characters and terminal escapes, and each thread named on its command
 * line renames itself with prctl(PR_SET_NAME).
 *
 *   hostile SECS [THREAD_NAME...]   the main thread and one thread per
 *                                   name compute for SECS seconds
 *
 * The placeholders are exactly 32 bytes: the names that replace them in
 * the ELF have that length too.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <time.h>

static double seconds;
volatile double sink;

__attribute__((noinline, noclone)) double q_hostile_leaf_00000000000000000(double x) {
    for (int i = 0; i < 20000; i++)
        x = x * 0.999999 + 1.0;
    return x;
}

__attribute__((noinline, noclone)) double q_hostile_caller_000000000000000(double x) {
    return q_hostile_leaf_00000000000000000(x) + 1.0;
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void spin(void) {
    double end = now() + seconds;
    while (now() < end)
        sink += q_hostile_caller_000000000000000(sink);
}

static void *named_thread(void *name) {
    prctl(PR_SET_NAME, (const char *)name);
    spin();
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t threads[16];
    int n = 0;
    seconds = argc > 1 ? atof(argv[1]) : 0.0;
    for (int i = 2; i < argc && n < 16; i++)
        if (pthread_create(&threads[n], NULL, named_thread, argv[i]) == 0)
            n++;
    spin();
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    return 0;
}
