/* DEEP workload of bench/collector_cost.py: a recursion DEPTH frames deep
 * (main, 28 down(), spin) whose leaf spins, so nearly every sample is a
 * 30-frame user stack plus libc's start. Runs until SIGALRM after argv[1]
 * seconds (default 5). */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#define DEPTH 30

static volatile sig_atomic_t done;
static volatile unsigned long sink;

static void stop(int sig) { (void)sig; done = 1; }

__attribute__((noinline, noipa)) static unsigned long spin(void)
{
    unsigned long n = 0;
    for (int i = 0; i < 100000 && !done; i++)
        sink += i, n++;
    return n;
}

/* The work after each call (noipa: the compiler may not fold it into the
 * callee) keeps every call a real call, not a tail call or a loop. */
__attribute__((noinline, noipa)) static unsigned long down(int depth)
{
    if (depth <= 1)
        return spin() + 1;
    unsigned long r = down(depth - 1);
    sink += (unsigned long)depth;
    return r + 1;
}

int main(int argc, char **argv)
{
    signal(SIGALRM, stop);
    alarm(argc > 1 ? (unsigned)atoi(argv[1]) : 5);
    while (!done)
        down(DEPTH - 2);
    return 0;
}
