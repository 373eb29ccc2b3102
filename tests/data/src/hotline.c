/* One line does most of the work (HOT), and square() is always inlined
   into its caller: the source view and inline tests know both. */
#include <stdio.h>
#include <stdlib.h>

static inline __attribute__((always_inline)) double square(double x)
{
    return x * x * 1.000001; /* INLINED */
}

__attribute__((noinline)) double spin(long n)
{
    double acc = 0.0;
    for (long i = 0; i < n; i++) {
        acc = acc * 0.999 + (double)(i % 7) / 3.0; /* HOT */
    }
    return acc + square(acc);
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000000L;
    printf("%f\n", spin(n));
    return 0;
}
