/* Workloads with known off-CPU answers (tests/integration/test_offcpu_e2e.py).
 *
 *   offcpu sleeps SECS   one thread: compute ~1 ms, nap_short (10 ms),
 *                        compute ~1 ms, nap_long (30 ms): off-CPU 1:3
 *   offcpu pipe SECS     "reader" blocked in read_loop on a pipe that
 *                        "writer" fills with a byte every 20 ms
 *   offcpu pinned SECS   "spin-a" and "spin-b" both pinned to CPU 0,
 *                        computing: each waits for the CPU about half the time
 *   offcpu hop SECS      "hopper" sleeps 20 ms at a time while the main
 *                        thread flips its affinity between CPUs 0 and 1:
 *                        it sleeps on one CPU and wakes on the other
 *   offcpu long SECS     "dozer" sleeps SECS in one nanosleep
 *   offcpu pingpong SECS "ping" and "pong" pass a byte back and forth over
 *                        two pipes as fast as they can (bench/offcpu_vs_perf.py)
 *
 * Every thread prints "thread TID NAME ELAPSED_SECONDS" when it ends.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double secs;
static int fds[2];
static volatile int done;
static pid_t hopper_tid;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void report(const char *name, double start) {
    printf("thread %ld %s %.6f\n", (long)syscall(SYS_gettid), name, now() - start);
    fflush(stdout);
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

__attribute__((noinline)) static double compute(double ms) {
    double end = now() + ms / 1000, x = 0;
    while (now() < end)
        for (int i = 0; i < 1000; i++) x += i * 0.5;
    return x;
}

__attribute__((noinline)) void nap_short(void) { sleep_ms(10); }
__attribute__((noinline)) void nap_long(void) { sleep_ms(30); }

static void sleeps(void) {
    double start = now();
    while (now() - start < secs) {
        compute(1);
        nap_short();
        compute(1);
        nap_long();
    }
    report("sleeps", start);
}

__attribute__((noinline)) void read_loop(void) {
    char c;
    while (read(fds[0], &c, 1) == 1 && c != 'q') {}
}

static void *reader(void *arg) {
    double start = now();
    pthread_setname_np(pthread_self(), "reader");
    read_loop();
    report("reader", start);
    return arg;
}

__attribute__((noinline)) void write_loop(double start) {
    while (now() - start < secs) {
        sleep_ms(20);
        if (write(fds[1], "x", 1) != 1) exit(1);
    }
    if (write(fds[1], "q", 1) != 1) exit(1);
}

static void *writer(void *arg) {
    double start = now();
    pthread_setname_np(pthread_self(), "writer");
    write_loop(start);
    report("writer", start);
    return arg;
}

__attribute__((noinline)) double spin(double start) {
    double x = 0;
    while (now() - start < secs)
        for (int i = 0; i < 10000; i++) x += i * 0.5;
    return x;
}

static void *spinner(void *arg) {
    const char *name = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(0, &set);
    sched_setaffinity(0, sizeof set, &set);
    pthread_setname_np(pthread_self(), name);
    double start = now();
    spin(start);
    report(name, start);
    return NULL;
}

__attribute__((noinline)) void hop_sleep(void) { sleep_ms(20); }

static void *hopper(void *arg) {
    double start = now();
    pthread_setname_np(pthread_self(), "hopper");
    hopper_tid = (pid_t)syscall(SYS_gettid);
    while (!done) hop_sleep();
    report("hopper", start);
    return arg;
}

__attribute__((noinline)) void doze(void) { sleep_ms((long)(secs * 1000)); }

static void *dozer(void *arg) {
    double start = now();
    pthread_setname_np(pthread_self(), "dozer");
    doze();
    report("dozer", start);
    return arg;
}

static int back[2];
static long trips;

static void *pong(void *arg) {
    char c;
    pthread_setname_np(pthread_self(), "pong");
    while (read(fds[0], &c, 1) == 1 && c != 'q')
        if (write(back[1], &c, 1) != 1) break;
    return arg;
}

static void pingpong(void) {
    pthread_t t;
    char c = 'x';
    if (pipe(fds) || pipe(back)) exit(1);
    pthread_create(&t, NULL, pong, NULL);
    double start = now();
    while (now() - start < secs) {
        if (write(fds[1], &c, 1) != 1 || read(back[0], &c, 1) != 1) exit(1);
        trips++;
    }
    if (write(fds[1], "q", 1) != 1) exit(1);
    pthread_join(t, NULL);
    printf("trips %ld in %.3f s\n", trips, now() - start);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: offcpu sleeps|pipe|pinned|hop|long SECS\n");
        return 2;
    }
    secs = atof(argv[2]);
    pthread_t a, b;
    if (!strcmp(argv[1], "sleeps")) {
        sleeps();
    } else if (!strcmp(argv[1], "pipe")) {
        if (pipe(fds)) return 1;
        pthread_create(&a, NULL, reader, NULL);
        pthread_create(&b, NULL, writer, NULL);
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    } else if (!strcmp(argv[1], "pinned")) {
        pthread_create(&a, NULL, spinner, "spin-a");
        pthread_create(&b, NULL, spinner, "spin-b");
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    } else if (!strcmp(argv[1], "hop")) {
        pthread_create(&a, NULL, hopper, NULL);
        double start = now();
        int cpu = 0;
        while (now() - start < secs) {
            sleep_ms(7);
            if (hopper_tid) {
                cpu_set_t set;
                CPU_ZERO(&set);
                CPU_SET(cpu, &set);
                sched_setaffinity(hopper_tid, sizeof set, &set);
                cpu = !cpu;
            }
        }
        done = 1;
        pthread_join(a, NULL);
    } else if (!strcmp(argv[1], "pingpong")) {
        pingpong();
    } else if (!strcmp(argv[1], "long")) {
        pthread_create(&a, NULL, dozer, NULL);
        pthread_join(a, NULL);
    } else {
        return 2;
    }
    return 0;
}
