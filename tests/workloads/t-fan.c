/* t-fan: p-fan's loop in several threads of one process.
 * t-fan SECONDS [THREADS]: THREADS threads (default 3, the main one among
 * them) each run p-fan's loop for SECONDS (0 or none: forever), so each
 * function's share of the process's samples is p-fan's, however the
 * scheduler spreads the threads. */
#include <pthread.h>

#define main p_fan_main
#include "p-fan.c"
#undef main

static char *fan_argv[3];

static void *fan(void *unused) {
    (void)unused;
    p_fan_main(2, fan_argv);
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t threads[64];
    int n = argc > 2 ? atoi(argv[2]) : 3;
    n = n < 1 ? 1 : n > 64 ? 64 : n;
    fan_argv[0] = argv[0];
    fan_argv[1] = argc > 1 ? argv[1] : "0";
    for (int i = 1; i < n; i++)
        if (pthread_create(&threads[i], NULL, fan, NULL) != 0)
            return 2;
    fan(NULL);
    for (int i = 1; i < n; i++)
        pthread_join(threads[i], NULL);
    return 0;
}
