/* p-fan: the example program of the original q-tools slides.
 * A loop calling ten functions that do different amounts of work, some of
 * them in libm. Built with plain `cc -O2 -fno-inline`: no special flags.
 * Runs for the number of seconds given as its first argument (default: forever). */
#include <math.h>
#include <stdlib.h>
#include <time.h>

long f00(long x) { return x + x; }
long f01(long x) { return x * x; }
long f02(long x) { return 1000 / x; }
long f03(long x) { return x + x * x; }
long f04(long x) { return x + x * (x + x); }
long f05(long x) { return 1.0 / x; }
long f06(long x) { return sin(x); }
long f07(long x) { return cos(x); }
long f08(long x) { return sin(x) * cos(x); }
long f09(long x) { return tan(x); }

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0, end = now() + seconds;
    unsigned long sum = 0, x = 1, rounds = 0;
    for (;;) {
        sum += f00(x++); sum += f01(x++); sum += f02(x++); sum += f03(x++);
        sum += f04(x++); sum += f05(x++); sum += f06(x++); sum += f07(x++);
        sum += f08(x++); sum += f09(x++);
        x = (x & 1023) | 1;
        if (seconds > 0 && (++rounds & 0xffff) == 0 && now() >= end)
            break;
    }
    return (int)(sum & 1);
}
