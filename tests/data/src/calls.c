/* Functions for synthetic call graphs: the viewer tests build stacks of
 * these names (the program is never run; its addresses are what matter). */
#include <math.h>
#include <stdlib.h>

volatile long sink;

long leaf1(long x) { return x * 3 + 1; }
long leaf2(long x) { return x * x - 7; }
long work(long x) { return leaf1(x) + leaf2(x); }
long helper(long x) { return work(x) + leaf1(x); }
long rec(long n) { return n <= 0 ? leaf1(n) : rec(n - 1) + 1; }
long pong(long n);
long ping(long n) { return n <= 0 ? leaf2(n) : pong(n - 1) + 1; }
long pong(long n) { return n <= 0 ? leaf1(n) : ping(n - 1) + 2; }
double trig(double x) { return sin(x) + 1.0; }

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 3;
    sink = helper(n) + work(n) + rec(n) + ping(n) + (long)trig((double)n);
    return 0;
}
