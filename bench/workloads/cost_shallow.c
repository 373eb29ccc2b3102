/* SHALLOW workload of bench/collector_cost.py: main calls four small leaf
 * functions in a loop, so nearly every sample is a 3-frame stack (leaf, main,
 * libc's start). Runs until SIGALRM after argv[1] seconds (default 5). */
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

static volatile sig_atomic_t done;
static volatile unsigned long sink;

static void stop(int sig) { (void)sig; done = 1; }

__attribute__((noinline, noipa)) static void leaf1(void) { for (int i = 0; i < 1000; i++) sink += i; }
__attribute__((noinline, noipa)) static void leaf2(void) { for (int i = 0; i < 2000; i++) sink ^= i; }
__attribute__((noinline, noipa)) static void leaf3(void) { for (int i = 0; i < 3000; i++) sink += i * 3; }
__attribute__((noinline, noipa)) static void leaf4(void) { for (int i = 0; i < 4000; i++) sink -= i; }

int main(int argc, char **argv)
{
    signal(SIGALRM, stop);
    alarm(argc > 1 ? (unsigned)atoi(argv[1]) : 5);
    while (!done) {
        leaf1();
        leaf2();
        leaf3();
        leaf4();
    }
    return 0;
}
