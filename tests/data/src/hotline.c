/* One line of spin() does most of the work, square() is always inlined
   into it, and step() (inlined into main) calls leafwork(): the source view
   and inline tests know all three by their marker comments. */
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

__attribute__((noinline)) double leafwork(double x)
{
    return x / 3.0 + 1.0;
}

static inline __attribute__((always_inline)) double step(double x)
{
    return leafwork(x) * 0.5; /* CALLS */
}

int main(int argc, char **argv)
{
    long n = argc > 1 ? atol(argv[1]) : 100000000L;
    double r = spin(n);
    printf("%f\n", r + step(r));
    return 0;
}
